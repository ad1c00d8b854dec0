"""`ztq completion bash|zsh|fish` (docs/cli.md, "Shell completion"): the script is printed,
and a shell that ran the install line of the docs completes a subcommand and a flag, by
running the real ``ztq`` of this venv as a user's Tab would. bash and fish complete for
real; zsh registers the function with compinit, and its side of the protocol
(``_ARGCOMPLETE_SHELL=zsh``) is checked, since zsh's completion needs a terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ztq.worker.cli.commands import main

BIN = Path(sys.executable).parent
DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def install_line(shell: str) -> str:
    """The line of docs/cli.md, "Shell completion", that installs ``shell``'s script."""
    section = DOC.read_text("utf-8").split("## Shell completion", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    (line,) = [ln.split("  #")[0].strip() for ln in block[1].splitlines()
               if f"ztq completion {shell}" in ln]  # fmt: skip
    return line


def shell_env(home: Path | None = None) -> dict[str, str]:
    """The environment of a user whose PATH finds this venv's ``ztq`` first."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return env if home is None else {**env, "HOME": str(home), "XDG_CONFIG_HOME": ""}


def script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_each_shell(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = script(shell, capsys)
    assert "ztq" in text and "_ARGCOMPLETE" in text
    if shell == "zsh":
        assert text.startswith("#compdef ztq")


BASH = r"""
{install}
complete -p ztq
complete_line() {  # what bash sets before it calls the function, for a Tab at the end
    COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<< "$1"
    [[ "$1" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMPREPLY=()
    _python_argcomplete ztq "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    echo "[$1] ${COMPREPLY[*]}"
}
complete_line "ztq wor"
complete_line "ztq worker --hea"
complete_line "ztq queue "
"""


@pytest.mark.slow
def test_bash_completes_a_subcommand_and_a_flag() -> None:
    bash = BASH.replace("{install}", install_line("bash"))
    assert "source <(ztq completion bash)" in bash
    got = subprocess.run(["bash", "-c", bash], env=shell_env(), capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0].endswith(" ztq") and "-F _python_argcomplete" in lines[0]  # complete -p
    assert lines[1].split() == ["[ztq", "wor]", "worker", "workers"]
    assert lines[2].split() == ["[ztq", "worker", "--hea]", "--health-port", "--health-host",
                                "--heartbeat"]  # fmt: skip
    assert set(lines[3].split()[3:]) >= {"pause", "resume", "purge", "limit", "forget"}


@pytest.mark.tools  # fish from make system-deps
def test_fish_completes_a_subcommand_and_a_flag(tmp_path: Path) -> None:
    env = shell_env(home=tmp_path)  # the docs' line writes into ~/.config/fish/completions
    subprocess.run(["bash", "-c", install_line("fish")], env=env, check=True, timeout=60)
    assert (tmp_path / ".config/fish/completions/ztq.fish").is_file()
    fish = 'complete -C "ztq wor"; echo SPLIT; complete -C "ztq worker --hea"'
    got = subprocess.run(["fish", "-c", fish], env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert got.returncode == 0, got.stderr
    words, flags = (
        sorted(line.split("\t")[0] for line in part.strip().splitlines())
        for part in got.stdout.split("SPLIT\n")
    )
    assert words == ["worker", "workers"]
    assert flags == ["--health-host", "--health-port", "--heartbeat"]
    assert "\tserve /livez and /readyz here" in got.stdout  # fish shows the flag's help


@pytest.mark.tools  # zsh from make system-deps
def test_zsh_registers_the_script_and_gets_described_completions(tmp_path: Path) -> None:
    zsh = (f"autoload -U compinit && compinit -u -d {tmp_path}/zcompdump && "
           f"{install_line('zsh')} && print -r -- $_comps[ztq]")  # fmt: skip
    registered = subprocess.run(["zsh", "-f", "-c", zsh], env=shell_env(home=tmp_path),
                                capture_output=True, text=True, timeout=60)  # fmt: skip
    assert registered.returncode == 0, registered.stderr
    assert registered.stdout.strip() == "_python_argcomplete"
    # what the script's _python_argcomplete runs under zsh: ztq itself, answering on fd 8
    line = "ztq worker --hea"
    env = {**shell_env(), "_ARGCOMPLETE": "1", "_ARGCOMPLETE_SHELL": "zsh",
           "COMP_LINE": line, "COMP_POINT": str(len(line)), "_ARGCOMPLETE_IFS": "\n"}  # fmt: skip
    answer = subprocess.run(["bash", "-c", "ztq 8>&1 1>/dev/null 2>&1"], env=env,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    got = answer.stdout.split("\n")
    assert "--heartbeat:heartbeat seconds (default 3)" in got
    assert {g.split(":")[0] for g in got} == {"--health-port", "--health-host", "--heartbeat"}
