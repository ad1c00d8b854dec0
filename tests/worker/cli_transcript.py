"""The real output of the commands of docs/cli.md and docs/deploy.md, pasted under each one.

    python -m tests.worker.cli_transcript --write   # run them all, rewrite the output blocks
    python -m tests.worker.cli_transcript           # run them all, say which blocks differ
    python -m tests.worker.cli_transcript --write --page cli.md   # one page only

An output block is the fenced ``text`` block after a marker line
``<!-- output: COMMAND[; SITUATION][; first N lines][; exit N] -->``. COMMAND is the command
as the block above it shows it (names in capitals are filled in with ids of the seeded
state), SITUATION tells apart two runs of one command (``Redis down``), ``first N lines``
pastes only the beginning of a long output (and a line ``…``), ``exit N`` is written when
the exit code is not 0. To document one more command, put an empty marker and block under it and
run with ``--write``.

docs/cli.md's commands each run on a fresh copy of the shop of :mod:`tests.worker.cli_state`
(one Redis database each, side by side), as ``ztq ...`` subprocesses with ``NO_COLOR=1``:
through a pipe (tables are then 200 columns wide, ``PIPE_WIDTH``), stderr after stdout as a
terminal shows them; the commands that ask (``delete`` without ``--yes``,
``hash-password``) on a 100-column pseudo-terminal, answered, and those whose SITUATION is
``N columns`` on a pseudo-terminal that wide. docs/deploy.md's run against a
real ``ztq worker --health-port`` and a real console (``pserve``), before and after their
Redis is killed; ``curl -i`` is answered with what the server sent. Everything runs on
redis-servers started here on free ports; the ports and paths of the run are shown as the
docs name them (6379, 8080, 6543, /etc/ztq/worker.ini).

The check compares after :func:`normalise` (times, ages, sizes, percentages, tokens, ports,
and the width of table columns, which follows them) so that only a change of what a
command prints fails it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import fcntl
import http.client
import os
import pty
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests import forked_cli
from tests.worker import cli_state
from ztq.core import App
from ztq.worker.embedded import RedisProcess, free_port

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
BIN = Path(sys.executable).parent
COLUMNS = 100
MARKER = re.compile(r"^<!-- output: (?P<spec>.+?) -->\n```text\n(?P<body>.*?)^```$", re.M | re.S)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
WRITE_HINT = "run `python -m tests.worker.cli_transcript --write`, then read the prose around it"


@dataclass
class Block:
    """One output block of a page: what ran, how it ended, what it printed."""

    command: str
    situation: str = ""
    lines: int = 0  # only the first lines are pasted
    code: int = 0
    body: str = ""

    @property
    def key(self) -> str:
        return f"{self.command}; {self.situation}" if self.situation else self.command

    def marker(self) -> str:
        spec = self.key + (f"; first {self.lines} lines" if self.lines else "")
        spec += f"; exit {self.code}" if self.code else ""
        return f"<!-- output: {spec} -->\n```text\n{self.body}```"

    def paste(self, output: str) -> str:
        """What the block shows of ``output``."""
        if self.lines and output.count("\n") > self.lines:
            return "".join(output.splitlines(keepends=True)[: self.lines]) + "…\n"
        return output


def parse_spec(spec: str, body: str = "") -> Block:
    command, *rest = spec.split("; ")
    block = Block(command, body=body)
    for part in rest:
        if re.fullmatch(r"exit \d+", part):
            block.code = int(part.split()[1])
        elif re.fullmatch(r"first \d+ lines", part):
            block.lines = int(part.split()[1])
        else:
            block.situation = part
    return block


def blocks(page: str) -> list[Block]:
    text = (DOCS / page).read_text("utf-8")
    return [parse_spec(m["spec"], m["body"]) for m in MARKER.finditer(text)]


def command_blocks(page: str) -> list[str]:
    """The fenced blocks of a page that are not output blocks."""
    text = MARKER.sub("", (DOCS / page).read_text("utf-8"))
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)


def clean(output: str) -> str:
    """What a person reads: no escape sequences, no padding at line ends, one final newline."""
    text = ANSI.sub("", output).replace("\r\n", "\n").replace("\r", "")
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines) + "\n" if lines else ""


# -- what may differ between two runs ----------------------------------------------------------
JSON_TIMES = re.compile(
    r'"(\w+_ms|\w+_at|enqueued|started|ended|failed|due|since|last|first|expires|created|used|'
    r'cpu_percent|rss|mem_total|mem_percent|pid|uptime)": (-?[\d.e+]+|"[^"]*"|null)'
)
VARYING: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?( UTC|Z)?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "<time>"),
    (re.compile(r"^Date: .*$", re.M), "Date: <time>"),
    (re.compile(r"\b1\d{12}(\.\d+)?\b"), "<epoch ms>"),
    (re.compile(r"\[\d{8}, \d+, \d+\]"), "[<minute>, <done>, <failed>]"),  # throughput
    (re.compile(r"\b\d+[mhd] \d+[smh]\b|\b\d+(\.\d+)? (ms|s|min|h)\b"), "<age>"),
    (re.compile(r"\b\d+(\.\d+)?%"), "<percent>"),
    (re.compile(r"\b\d+(\.\d+)? [KMG]?B\b"), "<size>"),
    (re.compile(r"\bztq_[0-9a-f]{12}_[\w-]+"), "<token>"),
    (re.compile(r"\bscrypt\$\S+"), "<hash>"),
    (re.compile(r"\b[0-9a-f]{32}\b|\b[0-9a-f]{12}\b"), "<id>"),
    (re.compile(r"\b127\.0\.0\.1:\d+/\d+\b"), "127.0.0.1:<port>/<db>"),  # docs/systems.md
    (re.compile(r"\b127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    (re.compile(r"Python/[\d.]+"), "Python/<version>"),
    (JSON_TIMES, r'"\1": <varies>'),
]


def normalise(text: str) -> list[str]:
    """The lines of ``text`` with what varies between runs replaced by a name, and runs of
    blanks made one (table columns are as wide as their widest value)."""
    text = clean(text)
    for pattern, name in VARYING:
        text = pattern.sub(name, text)
    return [re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines()]


# -- running a command -------------------------------------------------------------------------
def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZTQ_")}
    env.update(NO_COLOR="1", COLUMNS=str(COLUMNS), LINES="40", TERM="xterm",
               PYTHONUNBUFFERED="1", **extra)  # fmt: skip
    env.pop("FORCE_COLOR", None)
    return env


def piped(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    done = forked_cli.run(argv, env, merge_stderr=True, timeout=30)
    return done.returncode, done.stdout


def on_a_terminal(
    argv: list[str], env: dict[str, str], prompt: str, answer: str, columns: int = COLUMNS
) -> tuple[int, str]:
    """Run on a pseudo-terminal ``columns`` wide, typing ``answer`` once ``prompt`` shows."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**env, "COLUMNS": str(columns)}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)  # fmt: skip
    os.close(slave)
    seen, deadline = b"", time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if answer and prompt.encode() in seen:
                os.write(master, answer.encode())
                answer = ""
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                seen += data
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.wait(10), seen.decode(errors="replace")


def watched(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """``--watch`` through a pipe: the first snapshot and its time line, then Ctrl-C."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("-- "):
                break
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.wait(10), "".join(lines)


def fill(command: str, ids: dict[str, object]) -> str:
    """The documented command with its names in capitals replaced by ids of the state."""
    refused: list[str] = ids["refused"]  # type: ignore[assignment]
    pairs = [("TASK_ID [TASK_ID...]", " ".join(refused)),
             ("WORKER [WORKER...]", "app-1.4242 mail-1.311"), ("WORKER", "app-1.4242"),
             ("TOKEN_ID", str(ids["token"]))]  # fmt: skip
    if command.startswith("ztq task "):
        pairs.append(("TASK_ID", str(ids["running"])))
    pairs.append(("TASK_ID", refused[0]))
    for name, value in pairs:
        command = command.replace(name, value)
    return command


def run_cli(block: Block, url: str) -> tuple[int, str]:
    """Seed the shop into the empty database of ``url``, then run the command of ``block``
    on it (in its situation: ``N columns``, or none)."""
    command = block.command
    width = re.fullmatch(r"(\d+) columns", block.situation)
    if block.situation and not width:
        raise ValueError(f"docs/cli.md: unknown situation {block.situation!r}")
    app = App(f"transcript {url}")
    app.connect(url)
    try:
        ids = cli_state.seed(app)
    finally:
        app.disconnect_all()
    words = shlex.split(fill(command, ids))
    assert words[0] == "ztq", command
    argv, env = [str(BIN / "ztq"), *words[1:]], environment(ZTQ_REDIS_URL=url)
    if words[1] == "systems" or "--system" in words:  # docs/systems.md: eu is the shop,
        # us an empty database beside it, asia a Redis that is down
        server = url.rsplit("/", 1)[0]
        env["ZTQ_SYSTEMS"] = f"eu {url}; us {server}/0; asia redis://127.0.0.1:{free_port()}/0"
    if width:
        return on_a_terminal(argv, env, "", "", columns=int(width[1]))
    if words[1] == "hash-password":
        return on_a_terminal(argv, env, "password: ", "correct horse battery staple\n")
    if words[1] in ("delete", "purge", "queue") and "--yes" not in words:
        return on_a_terminal(argv, env, "[y/n]", "y\n")
    if "--watch" in words:
        return watched(argv, env)
    return piped(argv, env)


def cli_outputs(wanted: list[Block]) -> dict[str, tuple[int, str]]:
    """Each command of docs/cli.md on a fresh copy of the shop (a database each), several
    at a time."""
    server = RedisProcess(extra=["--databases", str(len(wanted) + 1)]).start()
    try:
        urls = [f"redis://127.0.0.1:{server.port}/{db}" for db in range(1, len(wanted) + 1)]
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            done = list(pool.map(run_cli, wanted, urls))
        return {b.key: (code, clean(out)) for b, (code, out) in zip(wanted, done, strict=True)}
    finally:
        server.cleanup()


# -- docs/deploy.md: a worker's and the console's health checks --------------------------------
def curl_i(port: int, path: str) -> tuple[int, str]:
    """What ``curl -i`` prints: the status line, the headers, a blank line, the body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        head = [f"HTTP/{'1.1' if r.version == 11 else '1.0'} {r.status} {r.reason}"]
        head += [f"{name}: {value}" for name, value in r.getheaders()]
        return 0, "\n".join([*head, "", r.read().decode()])
    finally:
        conn.close()


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up (exit {proc.returncode})")
        time.sleep(0.05)


def answers(port: int, path: str, status: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            return conn.getresponse().status == status
        except OSError:
            return False

    return check


@contextmanager
def started(argv: list[str], env: dict[str, str], cwd: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def deploy_outputs(wanted: list[Block]) -> dict[str, tuple[int, str]]:
    """Each curl / ztq check of docs/deploy.md, with Redis up, then with ``Redis down``."""
    with tempfile.TemporaryDirectory(prefix="ztq-transcript-") as tmp:
        return _deploy_outputs(wanted, tmp)


def _deploy_outputs(wanted: list[Block], tmp: str) -> dict[str, tuple[int, str]]:
    from ztq.core.auth.passwords import hash_password

    redis = RedisProcess().start()
    health, console = free_port(), free_port()
    ini = Path(tmp, "worker.ini")
    ini.write_text(f"[server]\nredis = {redis.url}\nheartbeat = 0.5\nlease = 2\n"
                   "idle_wait = 0.5\n\n[queues]\ndefault = 1\n")  # fmt: skip
    app_ini = Path(tmp, "app.ini")
    app_ini.write_text((REPO / "app.ini").read_text().replace("127.0.0.1:6543",
                                                               f"127.0.0.1:{console}"))  # fmt: skip
    real = {"/etc/ztq/worker.ini": str(ini), ":8080/": f":{health}/", ":6543/": f":{console}/"}
    shown = {f"127.0.0.1:{redis.port}": "127.0.0.1:6379", f":{health}/": ":8080/",
             f":{console}/": ":6543/", str(ini): "/etc/ztq/worker.ini"}  # fmt: skip

    def run(block: Block) -> tuple[int, str]:
        command = block.command
        for name, value in real.items():
            command = command.replace(name, value)
        words = shlex.split(command)
        if words[:2] == ["curl", "-i"]:
            url = words[2].split("//", 1)[1]
            host_port, path = url.split("/", 1)
            code, out = curl_i(int(host_port.rsplit(":", 1)[1]), "/" + path)
        elif words[0] == "ztq":
            code, out = piped([str(BIN / "ztq"), *words[1:]], environment())
        else:
            raise ValueError(f"docs/deploy.md: no way to run {block.command!r}")
        for name, value in shown.items():
            out = out.replace(name, value)
        if words[0] == "curl":  # the length of the body as shown (6379 is shorter)
            head, _, body = out.partition("\n\n")
            head = re.sub(r"^Content-Length: \d+$", f"Content-Length: {len(body.encode())}",
                          head, flags=re.M)  # fmt: skip
            out = f"{head}\n\n{body}"
        return code, clean(out)

    env = environment(ZTQ_REDIS_URL=redis.url, ZTQ_CONSOLE_SECRET="transcript-" + "x" * 32,
                      ZTQ_CONSOLE_USERS=f"ann operator {hash_password('pw', n=1024)}")  # fmt: skip
    worker = [str(BIN / "ztq"), "worker", "-c", str(ini), "--health-port", f"127.0.0.1:{health}"]
    got: dict[str, tuple[int, str]] = {}
    try:
        with started(worker, env, tmp) as w, started([str(BIN / "pserve"), str(app_ini)], env,
                                                     tmp) as p:  # fmt: skip
            wait_until(answers(health, "/readyz", 200), w, "the worker")
            wait_until(answers(console, "/healthz", 200), p, "the console")
            for block in (b for b in wanted if not b.situation):
                got[block.key] = run(block)
            redis.stop()
            wait_until(answers(health, "/readyz", 503), w, "the worker's /readyz 503")
            for block in (b for b in wanted if b.situation == "Redis down"):
                got[block.key] = run(block)
    finally:
        redis.cleanup()
    unknown = [b.key for b in wanted if b.key not in got]
    if unknown:
        raise ValueError(f"docs/deploy.md: unknown situation in {unknown}")
    return got


# -- the pages ---------------------------------------------------------------------------------
PAGES = ("cli.md", "deploy.md")


def fresh_outputs(pages: tuple[str, ...] = PAGES) -> dict[str, dict[str, tuple[int, str]]]:
    """Every output block's command of ``pages``, run now: page -> key -> (exit code,
    output)."""
    found = {page: blocks(page) for page in pages}
    for page, shown in found.items():
        keys = [b.key for b in shown]
        duplicated = sorted({k for k in keys if keys.count(k) > 1})
        if duplicated:
            raise ValueError(f"docs/{page}: two output blocks for {duplicated}")
    runners = {"cli.md": cli_outputs, "deploy.md": deploy_outputs}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        running = {page: pool.submit(runners[page], shown) for page, shown in found.items()}
        return {page: future.result() for page, future in running.items()}


def differences(fresh: dict[str, dict[str, tuple[int, str]]]) -> list[str]:
    """What the pages show that the commands do not print any more, block by block."""
    found = []
    for page, outputs in fresh.items():
        for block in blocks(page):
            code, out = outputs[block.key]
            if code != block.code:
                found.append(f"docs/{page}, {block.key}: exits {code}, the page says {block.code}")
            shown, now = normalise(block.body), normalise(block.paste(out))
            if shown != now:
                diff = difflib.unified_diff(shown, now, "on the page", "printed now", lineterm="")
                found.append(f"docs/{page}, {block.key}:\n" + "\n".join(diff))
    return found


def write(fresh: dict[str, dict[str, tuple[int, str]]]) -> None:
    for page, outputs in fresh.items():
        path = DOCS / page

        def paste(m: re.Match[str], outputs: dict[str, tuple[int, str]] = outputs) -> str:
            block = parse_spec(m["spec"])
            block.code, out = outputs[block.key]
            block.body = block.paste(out)
            return block.marker()

        path.write_text(MARKER.sub(paste, path.read_text("utf-8")), "utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.worker.cli_transcript",
                                     description=(__doc__ or "").split("\n\n")[0])  # fmt: skip
    parser.add_argument("--write", action="store_true", help="rewrite the output blocks")
    parser.add_argument("--page", action="append", choices=PAGES,
                        help="only this page of docs/ (again for more; default: all)")  # fmt: skip
    args = parser.parse_args(argv)
    pages = tuple(args.page or PAGES)
    fresh = fresh_outputs(pages)
    if args.write:
        write(fresh)
        print(f"wrote the output of {sum(map(len, fresh.values()))} commands into docs/"
              + " and docs/".join(pages))  # fmt: skip
        return 0
    found = differences(fresh)
    for text in found:
        print(text + "\n")
    if found:
        print(WRITE_HINT)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
