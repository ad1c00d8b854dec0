"""The ``ztq`` command: worker, info, enqueue, redo, purge, token, hash-password."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import ztq.core as ztq
from ztq.core import settings
from ztq.core.app import connection_flags, default_app, load_app
from ztq.core.errors import ZtqError
from ztq.worker import logs
from ztq.worker.config import ThreadSpec, load_config, parse_queue_entry


def _queue_flag(value: str, default_pool: str = "thread") -> list[ThreadSpec]:
    """``mail`` / ``mail:2`` / ``pdf:1:process`` / ``crawl:200:async``."""
    name, _, rest = value.partition(":")
    count, _, pool = rest.partition(":")
    return parse_queue_entry(name, f"{count or 1} {pool or default_pool}", "--queue: ")


REDO_BATCH = 500  # tasks per script call of redo --all


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ztq", description="ztq task queue")
    parser.add_argument("--log-level", help="debug, info (default), warning, error")
    parser.add_argument("--log-format", help="text (default) or json: one JSON object a line")
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
        help="NAME[:N[:thread|process|async]], repeatable (async: N tasks on one event loop)",
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
    w.add_argument("--lease", type=float, help="lease seconds (default 15)")
    w.add_argument("--heartbeat", type=float, help="heartbeat seconds (default 3)")
    w.add_argument("--prefetch", type=int, help="most tasks leased in one call (default 32)")
    w.add_argument("--grace", type=float, help="seconds to finish running tasks on SIGTERM")

    info = sub.add_parser("info", help="show queues and workers")
    e = sub.add_parser("enqueue", help="enqueue a task by name")
    e.add_argument("task")
    e.add_argument("--args", default="[]", help="JSON list")
    e.add_argument("--kwargs", default="{}", help="JSON object")
    e.add_argument("--queue", default="default")
    e.add_argument("--delay", type=float)
    e.add_argument("--priority", default="normal")
    r = sub.add_parser("redo", help="move failed tasks back to ready")
    r.add_argument("queue")
    r.add_argument("ids", nargs="*")
    r.add_argument("--all", action="store_true", help="every error present when the command starts")
    pg = sub.add_parser("purge", help="delete every task of a list")
    pg.add_argument("queue")
    pg.add_argument("what", choices=["ready", "delayed", "errors"])
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
    for p in (info, e, r, pg, tc, tl, tr):
        p.add_argument("-c", "--config", help="ini file (worker.ini or app.ini) for Redis")
        p.add_argument("--redis", help="Redis URL (overrides ZTQ_REDIS_URL and the file)")
        p.add_argument("--prefix", help="Redis key prefix (overrides ZTQ_PREFIX and the file)")
        p.add_argument("--app", help="a ztq.core.App (module:attribute): its Redis and prefix")
    sub.add_parser("hash-password", help="print a password hash for ztq.console.users")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        got = settings.resolve(
            ("log_level", "log_format"),
            flags={"log_level": args.log_level, "log_format": args.log_format},
        )
        logs.configure(got["log_level"].value, got["log_format"].value)
        return int(COMMANDS[args.command](args) or 0)
    except ZtqError as exc:
        print(f"ztq: {exc}", file=sys.stderr)
        return 2


def cmd_worker(args: argparse.Namespace) -> int:
    from ztq.worker.worker import Worker

    threads = tuple(spec for flag in args.queue for spec in _queue_flag(flag, args.pool))
    overrides: dict[str, Any] = {
        "app": args.app,
        "redis_url": args.redis,
        "threads": threads,
        "name": args.name,
        "prefix": args.prefix,
        "lease": args.lease,
        "heartbeat": args.heartbeat,
        "prefetch": args.prefetch,
        "grace": args.grace,
        "burst": args.burst or None,
    }
    cfg = load_config(args.config, **overrides)
    if args.imports:  # added to the modules of the environment or the file
        cfg = cfg.with_changes(imports=tuple(dict.fromkeys((*cfg.imports, *args.imports))))
    worker = Worker(cfg)
    worker.install_signals()
    worker.run()
    return 0


def _connect(args: argparse.Namespace) -> ztq.Storage:
    """The app's (--app, else the default app's) connection, from --redis / --prefix (or the
    app's own) > environment > -c FILE > default."""
    app = load_app(args.app) if args.app else default_app()
    url, prefix = connection_flags(app, args.redis, args.prefix)
    cfg = settings.connection(url, prefix, path=args.config)
    return app.connect(cfg.redis_url, prefix=cfg.prefix)


def cmd_info(args: argparse.Namespace) -> int:
    from ztq.core.workers import list_workers

    storage = _connect(args)
    for queue in storage.queues():
        pending, paused = storage.pending_count(queue), storage.is_paused(queue)
        print(f"queue {queue}: pending {pending} paused {paused}")
    for w in list_workers(storage):
        print(f"worker {w.id}: {w.status} host {w.get('host')} threads {w.get('threads')}")
    return 0


def cmd_enqueue(args: argparse.Namespace) -> int:
    _connect(args)
    try:
        call_args, call_kwargs = json.loads(args.args), json.loads(args.kwargs)
    except ValueError as exc:
        print(f"ztq: --args/--kwargs must be JSON: {exc}", file=sys.stderr)
        return 2
    call = ztq.TaskCall(
        args.task,
        tuple(call_args),
        call_kwargs,
        queue=args.queue,
        delay=args.delay,
        priority=args.priority,
        app=load_app(args.app) if args.app else None,
    )
    handle = call.enqueue()
    print(f"{handle.id} {handle.outcome}")
    return 0


def cmd_redo(args: argparse.Namespace) -> int:
    from ztq.core.monitor import queue_stats

    storage = _connect(args)
    total = 0
    if args.all:
        # bounded like the console's bulk redo: the errors present now, not the ones the
        # redone tasks make when they fail again at once (that loop would never end)
        present = queue_stats(storage, [args.queue], minutes=0)[0].errors
        while total < present:
            moved = storage.requeue(args.queue, "error", oldest=min(REDO_BATCH, present - total))
            if not moved:
                break
            total += moved
        print(f"{total} of {present} error(s) back in {args.queue}")
    else:
        total = storage.requeue(args.queue, "error", args.ids)
        print(f"{total} task(s) back in {args.queue}")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    storage = _connect(args)
    total = 0
    while True:
        deleted, taken = storage.remove(args.queue, purge=args.what, limit=1000)
        total += deleted
        if taken == 0:
            break
    print(f"{total} task(s) deleted from {args.queue} {args.what}")
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    import time

    from ztq.core import tokens

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
        used = time.strftime("%Y-%m-%d %H:%M", time.gmtime(t.used)) if t.used else "never"
        until = time.strftime("%Y-%m-%d %H:%M", time.gmtime(t.expires))
        print(f"{t.id}  {t.role:8}  until {until}  used {used:16}  {t.name}")
    if not live:
        print("no live token", file=sys.stderr)
    return 0


def cmd_hash_password(args: argparse.Namespace) -> int:
    import getpass

    from ztq.core.passwords import hash_password

    password = (
        getpass.getpass("password: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
    )
    if not password:
        print("ztq: empty password", file=sys.stderr)
        return 2
    print(hash_password(password))
    return 0


COMMANDS = {
    "worker": cmd_worker,
    "info": cmd_info,
    "enqueue": cmd_enqueue,
    "redo": cmd_redo,
    "purge": cmd_purge,
    "token": cmd_token,
    "hash-password": cmd_hash_password,
}
