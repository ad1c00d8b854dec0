"""The build step pyproject.toml cannot say: the console's gettext catalogs are compiled
(``console/locale/*/LC_MESSAGES/ztq.po`` -> ``ztq.mo``, with Babel, a build requirement) when
the package is built or installed, ``pip install -e .`` (``make run``, ``make test``)
included, so that the wheel ships the ``.mo`` files and a checkout has them; the ``.mo`` files
are not kept in git (docs/translating.md)."""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LOCALE = Path(__file__).resolve().parent / "console" / "locale"


def compile_catalogs() -> list[Path]:
    """Each .po of console/locale compiled to the .mo beside it (when older or missing)."""
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    written = []
    for po in sorted(LOCALE.glob("*/LC_MESSAGES/*.po")):
        mo = po.with_suffix(".mo")
        if mo.is_file() and mo.stat().st_mtime >= po.stat().st_mtime:
            continue
        with po.open("rb") as fp:
            catalog = read_po(fp, locale=po.parent.parent.name)
        with mo.open("wb") as fp:
            write_mo(fp, catalog)
        written.append(mo)
    return written


class BuildWithCatalogs(build_py):
    """build_py that compiles the catalogs first (in editable mode too, where build_py
    copies nothing: the .mo then sits in the checkout the install points at)."""

    def run(self) -> None:
        compile_catalogs()
        super().run()


setup(cmdclass={"build_py": BuildWithCatalogs})
