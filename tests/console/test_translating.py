"""docs/translating.md, run as written: on a copy of the console and its templates, the
page's pybabel commands extract the same template as the one committed, start a French
catalog, take its translations after an update, and compile it; the console's loader then
offers French, under the name its catalog gives, with no code changed."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.pofile import read_po, write_po

from ztq.console import i18n

REPO = Path(__file__).resolve().parents[2]
PYBABEL = Path(sys.executable).with_name("pybabel")


def commands() -> list[str]:
    """The page's pybabel commands, in order."""
    text = (REPO / "docs" / "translating.md").read_text("utf-8")
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.startswith("pybabel")]


def run(command: str, cwd: Path) -> str:
    argv = [str(PYBABEL), *shlex.split(command)[1:]]
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def without_dates(pot: Path) -> str:
    return re.sub(r'"POT-Creation-Date: [^"]*"\n', "", pot.read_text("utf-8"))


@pytest.mark.slow
def test_the_pages_commands_add_a_language(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.mo")
    for name in ("console", "templates"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=ignore)
    extract, init, update, compile_ = commands()
    assert [c.split()[1] for c in (extract, init, update, compile_)] == [
        "extract", "init", "update", "compile"
    ]  # fmt: skip
    locale = tmp_path / "console" / "locale"

    run(extract, tmp_path)  # 1: the committed template is what the code says now
    assert without_dates(locale / "ztq.pot") == without_dates(REPO / "console/locale/ztq.pot")

    run(init, tmp_path)  # 2: French, every msgstr empty
    po = locale / "fr_FR" / "LC_MESSAGES" / "ztq.po"
    with po.open("rb") as fp:
        catalog = read_po(fp)
    assert len(catalog) > 600 and not any(m.string for m in catalog if m.id and not m.pluralizable)

    french = {"Workers": "Travailleurs", "English": "Français"}  # 3: a translator's work
    for message in catalog:
        if message.id in french:
            message.string = french[message.id]
        elif message.id == ("{n} worker", "{n} workers"):
            forms = catalog.num_plurals  # French in CLDR: one, many, other
            message.string = ("{n} travailleur", *["{n} travailleurs"] * (forms - 1))
    with po.open("wb") as fp:
        write_po(fp, catalog, width=0)

    run(update, tmp_path)  # 4: nothing new: the translations stay
    said = run(compile_, tmp_path)  # 5
    assert "fr_FR" in said and (po.with_suffix(".mo")).is_file()
    assert (locale / "zh_CN" / "LC_MESSAGES" / "ztq.mo").is_file()

    monkeypatch.setattr(i18n, "LOCALE", locale)  # the console's loader, on the copy
    found = i18n._catalogs()
    assert list(found) == ["en", "fr", "zh"]
    fr = found["fr"]
    assert fr.gettext("English") == "Français" and fr.gettext("Workers") == "Travailleurs"
    assert fr.ngettext("{n} worker", "{n} workers", 1) == "{n} travailleur"
    assert fr.ngettext("{n} worker", "{n} workers", 3) == "{n} travailleurs"
    assert fr.gettext("Queues") == "Queues"  # untranslated: English
