"""The ``ztq`` command: ``worker``; the operator's ``info``, ``workers``, ``queue``,
``errors``, ``task``, ``redo``, ``delete``, ``purge``, ``check`` and ``systems``
(:mod:`ztq.worker.cli.ops`);
``enqueue`` (:mod:`ztq.worker.cli.enqueue`); ``token`` and ``hash-password`` for the console;
``console``, which runs ``python -m ztq.console``. Exit codes: docs/cli.md, "Exit codes"."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError, ResponseError

import ztq.core as ztq
from ztq.core import settings
from ztq.core.client.app import connection_flags, default_app, load_app
from ztq.core.errors import ConnectionFailed, NotFound, ZtqError
from ztq.core.settings.redis_urls import safe_url
from ztq.worker import logs
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ztq", description="ztq task queue")
    parser.add_argument(
        "--log-level",
        help="debug (adds a start line per run), info (default: "
        "one line per run), warning, error, critical",
    )
    parser.add_argument("--log-format", help="text (default) or json: one JSON object a line")
    parser.add_argument("--system", help="the system of ztq.systems to work on (docs/systems.md)")
    sub = parser.add_subparsers(dest="command", required=True)

    w = sub.add_parser("worker", help="run a worker")
    w.add_argument("--log-level", default=argparse.SUPPRESS)
    w.add_argument("--log-format", default=argparse.SUPPRESS)
    w.add_argument("-c", "--config", help="ini file ([server] + [queues], or app.ini)")
    w.add_argument("--app", help="the ztq.core.App to serve, as module:attribute")
    w.add_argument("--redis", help="Redis URL (overrides ZTQ_REDIS_URL and the file)")
    w.add_argument(
        "--queue",
        action="append",
        default=[],
        help="NAME[:N[:thread|process|async]][:shards=S], repeatable (async: N tasks on one "
        "event loop; shards: the queue's shard count, docs/scaling.md); N may be MIN..MAX: "
        "autoscaled (docs/autoscaling.md)",
    )
    w.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        help="module with tasks, repeatable (added to the modules of the file / ZTQ_MODULES)",
    )
    w.add_argument(
        "--pool",
        choices=["thread", "process", "async"],
        default="thread",
        help="how --queue entries without :thread/:process/:async run tasks",
    )
    w.add_argument("--name", help="worker name shown in the console")
    w.add_argument("--prefix", help="Redis key prefix")
    w.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    w.add_argument("--health-port", metavar="[HOST:]PORT",
                   help="serve /livez and /readyz here (HOST defaults to 0.0.0.0)")  # fmt: skip
    w.add_argument("--lease", type=float, help="lease seconds (default 15)")
    w.add_argument("--heartbeat", type=float, help="heartbeat seconds (default 3)")
    w.add_argument("--prefetch", type=int, help="most tasks leased in one call (default 32)")
    w.add_argument("--grace", type=float, help="seconds to finish running tasks on SIGTERM")
    w.add_argument(
        "--broadcast-catch-up",
        type=float,
        metavar="SECONDS",
        help="at start, run the broadcasts sent this long before (default: the app's, none)",
    )
    w.add_argument(
        "--autoscale-cpu-max",
        type=float,
        metavar="PERCENT",
        help="host CPU %% from which the autoscaler adds no thread (default 85)",
    )
    w.add_argument(
        "--autoscale-memory-max",
        type=float,
        metavar="PERCENT",
        help="host memory %% from which it adds none and lets one go (default 90)",
    )
    w.add_argument(
        "--autoscale-threads-max",
        type=int,
        metavar="N",
        help="most threads of the autoscaled queues together (default 0: no cap)",
    )
    w.add_argument(
        "--autoscale-idle-beats",
        type=int,
        metavar="N",
        help="heartbeats threads stay unneeded before some go (default 3)",
    )

    info = sub.add_parser("info", help="queues and workers, as tables")
    info.add_argument("--json", action="store_true", help="the console's /api dicts")
    info.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        metavar="SECONDS",
        help="refresh in place every SECONDS (default 2) until Ctrl-C",
    )
    info.add_argument("--all", action="store_true", help="stopped workers too")
    wk = sub.add_parser("workers", help="list workers, or pause|resume|stop|threads|auto them")
    wk.add_argument("action", nargs="?", choices=["pause", "resume", "stop", "threads", "auto"])
    wk.add_argument("worker", nargs="*", help="worker names (as the console shows them)")
    wk.add_argument("--queue", help="threads, auto: the queue (auto: autoscaled again)")
    wk.add_argument("--count", type=int, help="threads: how many (0 to 256)")
    wk.add_argument("--json", action="store_true")
    wk.add_argument("--all", action="store_true", help="stopped workers too")
    qu = sub.add_parser("queue", help="pause, resume, purge or limit a queue")
    qu.add_argument("action", choices=["pause", "resume", "purge", "limit"])
    qu.add_argument("queue")
    qu.add_argument(
        "what",
        nargs="?",
        choices=["ready", "delayed", "errors"],
        default="ready",
        help="purge: which list (default ready)",
    )
    qu.add_argument("--yes", action="store_true", help="do not ask before purging")
    qu.add_argument(
        "--max-running",
        metavar="N|none",
        help="limit: tasks of the queue running at once across every worker (none: no limit)",
    )
    qu.add_argument(
        "--max-pending",
        metavar="N|none",
        help="limit: tasks of the queue waiting to run, at most (none: no limit)",
    )
    qu.add_argument(
        "--when-full",
        choices=["raise", "block", "buffer"],
        help="limit: what an enqueue meets at --max-pending: QueueFull (raise, the default), "
        "a wait for room (block) or the overflow buffer (buffer)",
    )
    qu.add_argument(
        "--block-timeout",
        type=float,
        metavar="SECONDS",
        help="limit: longest wait for room with --when-full block (default 30)",
    )
    qu.add_argument(
        "--rate-limit",
        metavar="N/s|N/m|N/h|none",
        help="limit: tasks of the queue started per second, minute or hour across every "
        "worker, e.g. 20/s or '100/m burst 10' (none: no limit)",
    )
    er = sub.add_parser("errors", help="failed tasks (newest first), grouped, or one in full")
    er.add_argument("id", nargs="?", help="show this task with its traceback")
    er.add_argument("--queue", help="one queue (default: all)")
    er.add_argument("--task", help="task name contains")
    er.add_argument("--grep", help="text in the id, name, arguments or error")
    er.add_argument("--limit", type=int, default=50)
    er.add_argument("--groups", action="store_true", help="grouped by error and top frame")
    er.add_argument("--window", type=int, default=500, help="--groups: newest errors to group")
    er.add_argument("--json", action="store_true")
    tq = sub.add_parser("task", help="one task in full, in any state")
    tq.add_argument("id")
    tq.add_argument("--queue", help="look in this queue only")
    tq.add_argument("--json", action="store_true")
    e = sub.add_parser("enqueue", help="enqueue a task as the code would (its queue, options, "
                       "id), or by name with --queue")  # fmt: skip
    e.add_argument("task", help="a registered task's name, or module.function")
    e.add_argument("--args", default="[]", help="JSON list")
    e.add_argument("--kwargs", default="{}", help="JSON object")
    e.add_argument("--queue", help="instead of the task's queue; needed for a task not found")
    e.add_argument("--delay", type=float, help="seconds before it may run")
    e.add_argument("--expires", type=float, help="seconds after which, not started, it never "
                   "runs (instead of the task's expires)")  # fmt: skip
    e.add_argument("--priority", choices=["high", "normal", "low"],
                   help="instead of the task's priority")  # fmt: skip
    r = sub.add_parser("redo", help="move failed tasks back to ready")
    r.add_argument("queue")
    r.add_argument("ids", nargs="*")
    r.add_argument("--all", action="store_true", help="every error present when it starts")
    r.add_argument("--task", help="only errors whose task name contains this")
    r.add_argument("--grep", help="only errors with this text in id, arguments or error")
    r.add_argument("--yes", action="store_true", help=argparse.SUPPRESS)  # redo never asks
    d = sub.add_parser("delete", help="delete tasks by id, or errors in bulk")
    d.add_argument("queue")
    d.add_argument("ids", nargs="*")
    d.add_argument("--errors", action="store_true", help="delete errors in bulk (with --all, "
                   "--task or --grep)")  # fmt: skip
    d.add_argument("--all", action="store_true")
    d.add_argument("--task")
    d.add_argument("--grep")
    d.add_argument("--yes", action="store_true", help="do not ask")
    pg = sub.add_parser("purge", help="delete every task of a list (as 'queue purge')")
    pg.add_argument("queue")
    pg.add_argument("what", choices=["ready", "delayed", "errors"])
    pg.add_argument("--yes", action="store_true", help="do not ask")
    ck = sub.add_parser("check", help="exit non-zero with a reason when something is wrong")
    ck.add_argument("--queue", action="append", default=[], help="check these queues only")
    ck.add_argument(
        "--max-wait",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="the oldest waiting task may wait this long (default 300; 0: no limit)",
    )
    ck.add_argument("--json", action="store_true")
    al = sub.add_parser("alerts", help="evaluate the alert rules once (exit 1 if one fires), "
                        "or --loop")  # fmt: skip
    al.add_argument("--loop", action="store_true", help="evaluate every alerts.every seconds")
    al.add_argument("--rule", action="append", default=[],
                    help="a rule, repeatable (instead of ztq.alerts.rules)")  # fmt: skip
    al.add_argument("--webhook", help="URL alerts are POSTed to (instead of ztq.alerts.webhook)")
    al.add_argument("--every", type=float, help="--loop: seconds between rounds (default 30)")
    al.add_argument("--json", action="store_true", help="one JSON object per round")
    tk = sub.add_parser("token", help="API tokens for the console's /api and /metrics")
    tks = tk.add_subparsers(dest="token_command", required=True)
    tc = tks.add_parser("create", help="create a token; it is printed once, stored hashed")
    tc.add_argument("name", help="who uses it, e.g. prometheus")
    tc.add_argument("--role", choices=["viewer", "operator"], default="viewer")
    tc.add_argument("--days", type=float, default=90.0, help="lifetime (default 90, most 366)")
    tl = tks.add_parser("list", help="the live tokens")
    tl.add_argument("--json", action="store_true", help="one JSON list")
    tr = tks.add_parser("revoke", help="end a token now")
    tr.add_argument("id", help="the token's id (the 12 hex digits after ztq_)")
    bt = sub.add_parser("batch", help="batches (newest first), or one batch with its members")
    bt.add_argument("id", nargs="?", help="a batch id: that batch and a page of its members")
    bt.add_argument("--redo", action="store_true", help="put the batch's failed members back")
    bt.add_argument("--offset", type=int, default=0, help="first batch or member shown")
    bt.add_argument("--limit", type=int, default=50, help="how many are shown (default 50)")
    bt.add_argument("--json", action="store_true", help="the console's /api dicts")
    sy = sub.add_parser("systems", help="every system of ztq.systems, with its health")
    sy.add_argument("-c", "--config", help="app.ini (or a worker file) with ztq.systems")
    sy.add_argument("--json", action="store_true", help="one object per system")
    for p in (w, info, wk, qu, er, tq, e, r, d, pg, ck, al, tc, tl, tr, bt):
        p.add_argument("--system", default=argparse.SUPPRESS, help="the system of ztq.systems "
                       "to work on (or ZTQ_SYSTEM; not with --redis/--prefix)")  # fmt: skip
    for p in (info, wk, qu, er, tq, e, r, d, pg, ck, al, tc, tl, tr, bt):
        p.add_argument("-c", "--config", help="ini file (worker.ini or app.ini) for Redis")
        p.add_argument("--redis", help="Redis URL (overrides ZTQ_REDIS_URL and the file)")
        p.add_argument("--prefix", help="Redis key prefix (overrides ZTQ_PREFIX and the file)")
        p.add_argument("--app", help="a ztq.core.App (module:attribute): its Redis and prefix")
    sub.add_parser("hash-password", help="print a password hash for ztq.console.users")
    co = sub.add_parser("console", help="serve the console with waitress (python -m ztq.console)")
    co.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    co.add_argument("--port", type=int, help="port to listen on (default 6543)")
    co.add_argument("--ini", metavar="FILE", help="an app.ini: its settings, [server:main] "
                    "and logging (without it: the environment, docs/settings.md)")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        path = getattr(args, "config", None)  # the command's file: its log settings too
        got = settings.resolve(
            settings.SETTINGS,
            settings.LOGGING,
            flags={"log_level": args.log_level, "log_format": args.log_format},
            ini=settings.read_ini(path, settings.SETTINGS).values if path else None,
        )
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
        "health": args.health_port,
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
    for flag, value in (("--host", args.host), ("--port", args.port), ("--ini", args.ini)):
        argv += [flag, str(value)] if value is not None else []
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 2  # not reached: execv replaces this process or raises OSError


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
}
