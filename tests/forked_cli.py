"""``ztq`` commands run as processes forked from a server that imported ztq once.

A ``ztq`` command spends most of its 0.5-1 s (more on a busy machine) importing ztq, redis
and their dependencies; the suite runs a few hundred of them. :func:`run` is
``subprocess.run`` for a command of the ``ztq`` script: the command still runs in a process
of its own (its own pid, environment, working directory, stdin/stdout/stderr and exit
status, a real interpreter exit with atexit handlers and thread joins), only forked from a
process that had already imported ``ztq.worker.cli`` (as the script does first) and the
modules its commands import as they run. The server
sets ``sys.path`` as the script's interpreter does (the script's folder first, not the
tests'), so what a command can import is what it could as the script.

What Python reads only at start-up (``PYTHON*``, the locale variables) is the server's: a
server is started per distinct set of those (see :func:`_startup`). The terminal tests, the
``--watch`` ones and a few others still start the script itself, so the entry point and its
shebang are exercised too.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

SCRIPT = Path(sys.executable).with_name("ztq")
_servers: dict[tuple[tuple[str, str], ...], tuple[subprocess.Popen[bytes], str]] = {}
_lock = threading.Lock()


def _startup(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables the interpreter reads when it starts (encoding, buffering, paths)."""
    return tuple(sorted((k, v) for k, v in env.items()
                        if k.startswith(("PYTHON", "LC_")) or k == "LANG"))  # fmt: skip


def _server(env: dict[str, str]) -> str:
    """The socket of a server for ``env``'s start-up variables, started on first use."""
    key = _startup(env)
    with _lock:
        if key not in _servers:
            folder = tempfile.mkdtemp(prefix="ztq-forked-cli-")
            path = os.path.join(folder, "s")
            base = {k: v for k, v in os.environ.items() if (k, v) not in _startup(os.environ)}
            proc = subprocess.Popen(
                [sys.executable, __file__, path], env={**base, **dict(key)},
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None,
            )  # fmt: skip
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the server is listening (or died saying why)
            assert line == b"ready\n", f"the forked-cli server did not start: {line!r}"
            atexit.register(_stop, proc)
            _servers[key] = (proc, path)
        return _servers[key][1]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def run(
    argv: list[str],
    env: dict[str, str],
    *,
    merge_stderr: bool = False,
    timeout: float = 30,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)``
    (``merge_stderr``: ``stderr=STDOUT``) for ``argv[0]`` the ``ztq`` script; any other
    program runs as ``subprocess.run`` would run it."""
    if Path(argv[0]) != SCRIPT:
        return subprocess.run(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, timeout=timeout, text=True,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, check=False,
        )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ztq-forked-run-") as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        request = {"argv": argv, "env": env, "cwd": cwd or os.getcwd(), "out": out,
                   "err": out if merge_stderr else err}  # fmt: skip
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(_server(env))
            conn.sendall(json.dumps(request).encode() + b"\n")
            conn.settimeout(timeout)
            replies = conn.makefile("r")
            pid = int(replies.readline())
            try:
                code = int(replies.readline())
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(argv, timeout) from None
        stdout = Path(out).read_text(errors="replace")
        stderr = "" if merge_stderr else Path(err).read_text(errors="replace")
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


# -- the server (``python tests/forked_cli.py SOCKET``) ----------------------------------------
def _serve(path: str) -> None:
    """Accept requests; each is handled by a child that forks the command's process, waits
    for it and answers its pid, then its exit status (as ``Popen.returncode`` gives it)."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    os.write(1, b"ready\n")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    parent = os.getppid()
    listener.settimeout(1.0)
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test process died without stopping us
                os._exit(0)
            continue
        if os.fork() == 0:  # the handler
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            listener.close()
            request: dict[str, Any] = json.loads(conn.makefile("r").readline())
            pid = os.fork()
            if pid == 0:
                conn.close()
                _command(request)  # exits the interpreter, as the script does
            conn.sendall(f"{pid}\n".encode())
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                conn.sendall(f"{code}\n".encode())
            os._exit(0)
        conn.close()


def _command(request: dict[str, Any]) -> None:
    """In the command's process: its working directory, environment and standard streams,
    then what the ``ztq`` script does: ``sys.exit(main())``."""
    from ztq.worker.cli import main

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    err = (
        out
        if request["err"] == request["out"]
        else os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    )
    os.dup2(out, 1)
    os.dup2(err, 2)
    sys.argv = [request["argv"][0].removesuffix(".exe"), *request["argv"][1:]]
    sys.exit(main())


if __name__ == "__main__":
    # the script's interpreter puts the script's folder first on sys.path, not this one's
    sys.path[0] = str(SCRIPT.parent)
    import encodings.idna  # noqa: F401 - what connecting to "localhost" imports
    import importlib
    import pkgutil

    # what a command imports as it runs, imported once, here: the commands, the read models
    # they show (and so rich, decimal, ...)
    for package in ("ztq.worker.cli", "ztq.core.monitor", "ztq.core.engine.read_models"):
        path = importlib.import_module(package).__path__
        for found in pkgutil.walk_packages(path, package + "."):
            importlib.import_module(found.name)
    # what was imported is never collected: the children neither scan it nor copy its
    # pages to update its GC flags (a command's run and exit took 2-3x as long without)
    gc.freeze()
    _serve(sys.argv[1])
