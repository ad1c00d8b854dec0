"""The ``ztq`` command line, one function per family of subcommands: the worker, reading
(tables and one task), changing (queues, redo, delete, enqueue), alerts and tokens, and
the console with the shell's completion. :func:`build_parser` puts them together; the
commands themselves live in :mod:`ztq.worker.cli.commands` and the modules it names.

Kept apart from the commands so that shell completion (``argcomplete``, which runs the
``ztq`` command on each Tab) reads the same parser the commands are parsed with: a flag
added here completes without anything else to change.
"""

from __future__ import annotations

import argparse
from typing import Any

from ztq.worker.startup import ztq_version

Sub = Any  # argparse's _SubParsersAction (private: not worth naming in a signature)
SHELLS = ("bash", "zsh", "fish")  # what `ztq completion` writes a script for


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``ztq`` command (``ztq --help`` lists them in this order)."""
    parser = argparse.ArgumentParser(prog="ztq", description="ztq task queue")
    _log_flags(parser)
    parser.add_argument("--system", help="the system of ztq.systems to work on (docs/systems.md)")
    parser.add_argument("--version", action="version", version=f"ztq {ztq_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = _worker(sub)
    on_redis = [*_reading(sub), *_changing(sub), *_alerts_and_tokens(sub)]
    for p in (worker, *on_redis):
        p.add_argument("--system", default=argparse.SUPPRESS, help="the system of ztq.systems "
                       "to work on (or ZTQ_SYSTEM; not with --redis/--prefix)")  # fmt: skip
    for p in on_redis:
        p.add_argument("-c", "--config", help="ini file (worker.ini or app.ini) for Redis")
        p.add_argument("--redis", help="Redis URL (overrides ZTQ_REDIS_URL and the file)")
        p.add_argument("--prefix", help="Redis key prefix (overrides ZTQ_PREFIX and the file)")
        p.add_argument("--app", help="a ztq.core.App (module:attribute): its Redis and prefix")
    _console(sub)
    return parser


def _log_flags(parser: argparse.ArgumentParser, *, default: Any = None) -> None:
    """``--log-level``, ``--log-format`` and ``--log-config``: before the command (``ztq
    --log-level debug worker``) or, for the worker, after it (SUPPRESS: not given there
    leaves the value given before)."""
    parser.add_argument(
        "--log-level",
        default=default,
        help="debug (adds a start line per run), info (default: "
        "one line per run), warning, error, critical",
    )
    parser.add_argument("--log-format", default=default,
                        help="text (default) or json: one JSON object a line")  # fmt: skip
    parser.add_argument("--log-config", metavar="FILE", default=default,
                        help="logging's own configuration instead: a .json dictConfig or an "
                        ".ini fileConfig, the task's fields on every record")  # fmt: skip


def _worker(sub: Sub) -> argparse.ArgumentParser:
    w = sub.add_parser("worker", help="run a worker")
    _log_flags(w, default=argparse.SUPPRESS)
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
                   help="serve /livez and /readyz here (HOST defaults to 127.0.0.1)")  # fmt: skip
    w.add_argument("--health-host", metavar="HOST",
                   help="listen for --health-port on HOST (0.0.0.0: every interface)")  # fmt: skip
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
    for flag, kind, metavar, text in (
        ("cpu-max", float, "PERCENT", "host CPU %% from which the autoscaler adds no thread "
         "(default 85)"),
        ("memory-max", float, "PERCENT", "host memory %% from which it adds none and lets one "
         "go (default 90)"),
        ("threads-max", int, "N", "most threads of the autoscaled queues together (default 0: "
         "no cap)"),
        ("idle-beats", int, "N", "heartbeats threads stay unneeded before some go (default 3)"),
    ):  # fmt: skip
        w.add_argument(f"--autoscale-{flag}", type=kind, metavar=metavar, help=text)
    return w


def _reading(sub: Sub) -> list[argparse.ArgumentParser]:
    """The commands that read: tables, one task, one batch, the checks."""
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
    wk.add_argument("--yes", action="store_true", help=argparse.SUPPRESS)  # workers never ask
    er = sub.add_parser("errors", help="failed tasks (newest first), grouped, or one in full")
    er.add_argument("id", nargs="?", help="show this task with its traceback")
    er.add_argument("--queue", help="one queue (default: all)")
    er.add_argument("--task", help="task name contains")
    er.add_argument("--grep", help="text in the id, name, arguments or error")
    er.add_argument("--limit", type=int, default=50)
    er.add_argument("--groups", action="store_true", help="grouped by error and top frame, "
                    "counted exactly (as the console)")  # fmt: skip
    er.add_argument("--window", type=int, default=500,
                    help="--groups with --task or --grep: newest errors to group")  # fmt: skip
    er.add_argument("--full", action="store_true", help="with an id: its arguments whole")
    er.add_argument("--json", action="store_true")
    tq = sub.add_parser("task", help="one task in full, in any state")
    tq.add_argument("id")
    tq.add_argument("--queue", help="look in this queue only")
    tq.add_argument("--full", action="store_true", help="the arguments whole, however long "
                    "(they are cut at 2,000 characters otherwise)")  # fmt: skip
    tq.add_argument("--json", action="store_true")
    bt = sub.add_parser("batch", help="batches (newest first), or one batch with its members")
    bt.add_argument("id", nargs="?", help="a batch id: that batch and a page of its members")
    bt.add_argument("--redo", action="store_true", help="put the batch's failed members back")
    bt.add_argument("--offset", type=int, default=0, help="first batch or member shown")
    bt.add_argument("--limit", type=int, default=50, help="how many are shown (default 50)")
    bt.add_argument("--json", action="store_true", help="the console's /api dicts")
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
    sy = sub.add_parser("systems", help="every system of ztq.systems, with its health")
    sy.add_argument("-c", "--config", help="app.ini (or a worker file) with ztq.systems")
    sy.add_argument("--json", action="store_true", help="one object per system")
    return [info, wk, er, tq, bt, ck]


def _changing(sub: Sub) -> list[argparse.ArgumentParser]:
    """The commands that change tasks and queues."""
    qu = sub.add_parser("queue", help="pause, resume, purge, limit or forget a queue")
    qu.add_argument("action", choices=["pause", "resume", "purge", "limit", "forget"])
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
    key_help = "limit: tasks of one key running at once, all workers (none: no limit)"
    qu.add_argument("--key-concurrency", metavar="N|none", help=key_help)
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
    return [qu, e, r, d, pg]


def _alerts_and_tokens(sub: Sub) -> list[argparse.ArgumentParser]:
    """``ztq alerts`` and ``ztq token create|list|revoke``."""
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
    return [al, tc, tl, tr]


def _console(sub: Sub) -> None:
    """The console's commands, and the shell's completion script."""
    sub.add_parser("hash-password", help="print a password hash for ztq.console.users")
    co = sub.add_parser("console", help="serve the console with waitress (python -m ztq.console)")
    co.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    co.add_argument("--port", type=int, help="port to listen on (default 6543)")
    co.add_argument("--ini", metavar="FILE", help="an app.ini: its settings, [server:main] "
                    "and logging (without it: the environment, docs/settings.md)")  # fmt: skip
    co.add_argument("--log-config", metavar="FILE", default=argparse.SUPPRESS,
                    help="logging's own configuration, after the ini's: .json or .ini")  # fmt: skip
    co.add_argument("--print-config", action="store_true",
                    help="print a commented app.ini to start from, and exit")  # fmt: skip
    cp = sub.add_parser("completion", help="print the shell's completion script for ztq "
                        "(docs/cli.md, Shell completion)")  # fmt: skip
    cp.add_argument("shell", choices=SHELLS)
