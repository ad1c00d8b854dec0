"""The ``ztq`` command: ``worker``; the operator's ``info``, ``workers``, ``queue``,
``errors``, ``task``, ``redo``, ``delete``, ``purge``, ``check`` and ``systems``
(:mod:`ztq.worker.cli.ops`);
``enqueue`` (:mod:`ztq.worker.cli.enqueue`); ``token`` and ``hash-password`` for the console;
``console``, which runs ``python -m ztq.console``; ``completion``, the shell's script. The
command line itself is :mod:`ztq.worker.cli.parser`. Exit codes: docs/cli.md, "Exit codes"."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import argcomplete

import ztq.core as ztq
from ztq.core import settings
from ztq.core.client.app import default_app
from ztq.core.client.apps import connection_flags, load_app
from ztq.core.engine.connection import RedisError, ResponseError
from ztq.core.errors import ConfigError, ConnectionFailed, NotFound, ZtqError
from ztq.core.settings.redis_urls import safe_url
from ztq.worker import logs
from ztq.worker.cli.parser import build_parser
from ztq.worker.config import ScaleSpec, ThreadSpec, load_config, parse_queue_flag


def _queue_flag(value: str, default_pool: str = "thread") -> list[ThreadSpec]:
    """``mail`` / ``mail:2`` / ``pdf:1:process`` / ``crawl:200:async`` / ``hot:8:shards=3``:
    the flag's executors (an autoscaled queue's minimum); every word checked, see
    :func:`ztq.worker.config.parse_queue_flag`."""
    got = parse_queue_flag(value, default_pool)
    return got.initial() if isinstance(got, ScaleSpec) else got


def scale_flag(value: str, default_pool: str = "thread") -> ScaleSpec | None:
    """``mail:1..8`` / ``pdf:0..4:process`` / ``hot:2..8:shards=3``: an autoscaled queue
    (None: the flag gives a count, see :func:`_queue_flag`)."""
    got = parse_queue_flag(value, default_pool)
    return got if isinstance(got, ScaleSpec) else None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # a Tab in a shell that sourced `ztq completion SHELL` runs ztq with _ARGCOMPLETE set:
    # argcomplete answers from the parser and exits here; otherwise this does nothing
    argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    try:
        path = getattr(args, "config", None)  # the command's file: its log settings too
        got = settings.resolve(
            settings.SETTINGS,
            settings.LOGGING,
            flags={"log_level": args.log_level, "log_format": args.log_format,
                   "log_config": args.log_config},
            ini=settings.read_ini(path, settings.SETTINGS).values if path else None,
        )  # fmt: skip
        if got["log_config"].value:  # the user's logging, with the task's fields
            logs.configure_file(got["log_config"].value)
        else:
            logs.configure(got["log_level"].value, got["log_format"].value)
        return int(COMMANDS[args.command](args) or 0)
    except NotFound as exc:  # the exit codes: docs/cli.md, "Exit codes"
        print(f"ztq: {exc}", file=sys.stderr)
        return 1
    except ZtqError as exc:
        print(f"ztq: {exc}", file=sys.stderr)
        return 2
    except RedisError as exc:  # past the first command (see _connect): still one line
        print(f"ztq: Redis answered with an error: {exc}", file=sys.stderr)
        return 2


def cmd_worker(args: argparse.Namespace) -> int:
    from ztq.worker.worker import Worker

    scaled = [scale_flag(flag, args.pool) for flag in args.queue]
    threads = tuple(
        spec
        for flag, scale in zip(args.queue, scaled, strict=True)
        if scale is None
        for spec in _queue_flag(flag, args.pool)
    )
    overrides: dict[str, Any] = {
        "scaled": tuple(s for s in scaled if s is not None),
        "autoscale_cpu_max": args.autoscale_cpu_max,
        "autoscale_memory_max": args.autoscale_memory_max,
        "autoscale_threads_max": args.autoscale_threads_max,
        "autoscale_idle_beats": args.autoscale_idle_beats,
        "app": args.app,
        "redis_url": args.redis,
        "threads": threads,
        "name": args.name,
        "prefix": args.prefix,
        "lease": args.lease,
        "heartbeat": args.heartbeat,
        "prefetch": args.prefetch,
        "grace": args.grace,
        "broadcast_catch_up": args.broadcast_catch_up,
        "burst": args.burst or None,
        "health": _health_flag(args.health_port, args.health_host),
    }
    chosen, system = settings.command_connection(
        args.redis, args.prefix, system=args.system, path=args.config
    )
    if system is not None:  # --system / ZTQ_SYSTEM: that system's Redis and prefix, as flags
        overrides.update(redis_url=chosen.redis_url, prefix=chosen.prefix)
    cfg = load_config(args.config, **overrides)
    if args.imports:  # added to the modules of the environment or the file
        cfg = cfg.with_changes(imports=tuple(dict.fromkeys((*cfg.imports, *args.imports))))
    worker = Worker(cfg)
    worker.install_signals()
    worker.run()
    return 0


def _health_flag(port: str | None, host: str | None) -> str | None:
    """--health-port with --health-host: HOST:PORT (the host flag wins over a port's own)."""
    if not host:
        return port
    if not port:
        raise ConfigError("--health-host needs --health-port")
    bare = port.rpartition(":")[2]
    return f"[{host}]:{bare}" if ":" in host else f"{host}:{bare}"


def _connect(args: argparse.Namespace) -> ztq.Storage:
    """The app's (--app, else the default app's) connection, from --system / ZTQ_SYSTEM (a
    system of ztq.systems, docs/systems.md), else --redis / --prefix (or the app's own) >
    environment > -c FILE > default. ``args.system_name``: the system named, or ''."""
    app = load_app(args.app) if args.app else default_app()
    url, prefix = connection_flags(app, args.redis, args.prefix)
    cfg, system = settings.command_connection(url, prefix, system=args.system, path=args.config)
    args.system_name = system.name if system is not None else ""
    storage = app.connect(cfg.redis_url, prefix=cfg.prefix)
    try:  # the first command: a URL Redis refuses (a DB index, AUTH) fails here, in one line
        storage.ping_server()
    except ResponseError as exc:
        raise ConnectionFailed(
            f"Redis at {safe_url(storage.url)} refused the connection: {exc}"
        ) from exc
    return storage


def cmd_enqueue(args: argparse.Namespace) -> int:
    from ztq.worker.cli.enqueue import cmd_enqueue as run

    _connect(args)
    return run(args, load_app(args.app) if args.app else default_app())


def cmd_token(args: argparse.Namespace) -> int:
    import time

    from ztq.core.auth import tokens

    storage = _connect(args)
    if args.token_command == "create":
        token, info = tokens.create_token(storage, args.name, args.role, args.days)
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(info.expires))
        print(token)
        print(f"ztq: token {info.id} ({info.name}, {info.role}) until {until}; it is shown "
              "only now: send it as 'Authorization: Bearer <token>'", file=sys.stderr)  # fmt: skip
        return 0
    if args.token_command == "revoke":
        if tokens.revoke_token(storage, args.id):
            print(f"token {args.id} revoked")
            return 0
        print(f"ztq: no live token {args.id}", file=sys.stderr)
        return 1
    live = tokens.list_tokens(storage)
    if args.json:
        print(json.dumps([vars(t) for t in live], indent=2))
        return 0
    for t in live:
        used = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t.used)) if t.used else "never"
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t.expires))
        print(f"{t.id}  {t.role:8}  until {until}  used {used:16}  {t.name}")
    if not live:
        print("no live token", file=sys.stderr)
    return 0


def cmd_hash_password(args: argparse.Namespace) -> int:
    import getpass

    from ztq.core.auth.passwords import hash_password

    password = (
        getpass.getpass("password: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
    )
    if not password:
        print("ztq: empty password", file=sys.stderr)
        return 2
    print(hash_password(password))
    return 0


def cmd_console(args: argparse.Namespace) -> int:
    """Become ``python -m ztq.console``: the CLI never imports the console (docs/architecture.md),
    and the server's process is then this one (signals from a supervisor reach it)."""
    import os

    argv = [sys.executable, "-m", "ztq.console"]
    given = (("--host", args.host), ("--port", args.port), ("--ini", args.ini),
             ("--log-config", args.log_config))  # `ztq --log-config F console` too  # fmt: skip
    for flag, value in given:
        argv += [flag, str(value)] if value is not None else []
    argv += ["--print-config"] if args.print_config else []
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 2  # not reached: execv replaces this process or raises OSError


def cmd_completion(args: argparse.Namespace) -> int:
    """The script that makes the shell complete ``ztq`` (argcomplete's, for ``args.shell``):
    it asks ``ztq`` itself on each Tab, so it never goes stale as commands change."""
    print(argcomplete.shellcode(["ztq"], shell=args.shell), end="")
    return 0


def cmd_alerts(args: argparse.Namespace) -> int:
    from ztq.worker.cli.alerts import cmd_alerts as run

    return run(args, _connect)


def cmd_batch(args: argparse.Namespace) -> int:
    """``ztq batch`` (ztq.worker.cli.batches, imported when used, as ops is)."""
    from ztq.worker.cli import batches, ops

    system = getattr(args, "system_name", "")
    return batches.cmd_batch(args, _connect, ops._who(), system)


def _ops(name: str) -> Callable[[argparse.Namespace], int]:
    """A command of :mod:`ztq.worker.cli.ops` (imported when used: rich is not needed to work)."""

    def run(args: argparse.Namespace) -> int:
        from ztq.worker.cli import ops

        def connect(args: argparse.Namespace) -> ztq.Storage:
            storage = _connect(args)
            ops.SYSTEM.set(getattr(args, "system_name", ""))  # the audit entries name the system
            return storage

        return int(getattr(ops, name)(args, connect))

    return run


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "worker": cmd_worker,
    "info": _ops("cmd_info"),
    "workers": _ops("cmd_workers"),
    "queue": _ops("cmd_queue"),
    "errors": _ops("cmd_errors"),
    "task": _ops("cmd_task"),
    "redo": _ops("cmd_redo"),
    "delete": _ops("cmd_delete"),
    "purge": _ops("cmd_purge"),
    "check": _ops("cmd_check"),
    "systems": _ops("cmd_systems"),
    "batch": cmd_batch,
    "alerts": cmd_alerts,
    "enqueue": cmd_enqueue,
    "token": cmd_token,
    "hash-password": cmd_hash_password,
    "console": cmd_console,
    "completion": cmd_completion,
}
