"""docs/design.md says what the code does: its key table and its script table are checked
against ``Keys``, against the types a real Redis reports, and against ``core/scripts``."""

from __future__ import annotations

import inspect
import re
import time
from pathlib import Path

import ztq.core as ztq
from tests import sample_tasks as t
from tests.console import scenario
from ztq.core.client.cron import CronEntry
from ztq.core.engine.keys import Keys
from ztq.core.engine.scripts import NAMES
from ztq.core.engine.storage import EnqueueEntry, Finished, Storage
from ztq.core.engine.workers import send_command, set_cron_enabled

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"
PLACEHOLDERS = {
    "queue": "q",
    "priority": "<level>",
    "minute": "<minute>",
    "slot": "<slot>",
    "worker_id": "<id>",
    "digest": "<id>",
    "handle": "<id>",
    "token_id": "<id>",
    "broadcast_id": "<id>",
    "batch": "<id>",
    "batch_id": "<id>",
    "call_id": "<id>",
    "request_id": "<id>",
    "channel": "<channel>",
    "key": "<key>",
}


def section_table(heading: str) -> list[list[str]]:
    """The rows (cells) of the first table under the heading that starts with ``heading``."""
    text = DESIGN.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}")
    rows = []
    for line in text[start + 1 :].splitlines()[1:]:
        if line.startswith("## "):
            break
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    assert rows, f"no table under {heading!r}"
    return rows[1:]  # without the header


def documented_keys() -> dict[str, str]:
    out = {}
    for cells in section_table("Redis layout"):
        keys = re.findall(r"`([^`]+)`", cells[0])
        assert len(keys) == 1, f"one key per row, not {cells[0]!r}"
        out[keys[0]] = cells[1]
    return out


def code_keys() -> set[str]:
    """Every key name ``Keys`` can spell, with placeholders for its variable parts."""
    keys = Keys("ztq")
    out = set()
    for name, value in inspect.getmembers(keys):
        if name.startswith("_") or name in ("prefix", "ready_all"):
            continue
        if isinstance(value, str):
            out.add(value)
        elif callable(value):
            params = inspect.signature(value).parameters
            out.add(value(*(PLACEHOLDERS[p] for p in params)))
    return out


def test_key_table_lists_exactly_the_keys_the_code_spells() -> None:
    assert set(documented_keys()) == code_keys()


def _pattern(doc_key: str, prefix: str) -> re.Pattern[str]:
    escaped = re.escape(doc_key.replace("ztq:", f"{prefix}:", 1))
    escaped = escaped.replace(re.escape("{q}"), r"\{[^}]+\}")
    for holder in ("<level>", "<minute>", "<slot>", "<id>", "<channel>"):
        escaped = escaped.replace(re.escape(holder), r"[^:{}]+")
    escaped = escaped.replace(re.escape("<key>"), r".+")  # a task's key may hold ':'
    return re.compile(f"^{escaped}$")


def test_every_key_exists_with_the_documented_type(redis_url: str) -> None:
    """Populate a Redis the way workers and the console do, then compare each key's TYPE."""
    storage: Storage = ztq.get_storage()
    ids = scenario.populate(storage)  # tasks in every state, workers, history, events, cron
    errors_queue = t.boom.queue
    assert storage.errors.trash_errors(errors_queue, "deleted", ids["errors"][:1])[0] == 1  # undo
    assert storage.errors.redo_errors(errors_queue, "redone", ids["errors"][1:2]) == 1  # follow set
    storage.queues.register_queue("default")
    set_cron_enabled(storage, "nightly-report", False, by="ops")
    assert send_command(storage, "mailer-1", "refresh")
    t.add.enqueue((9, 9), delay=60)  # a token for the schedulers
    [lease] = storage.leases.fetch("reports", "w", "t", 60_000, 1)
    storage.leases.ack("reports", "w", [Finished(lease.id, lease.token, "x", "1")])
    storage.queues.pause("reports")
    storage.queues.configure("reports", max_running=1)  # the queue's config hash
    storage.queues.configure("digest", max_pending=1, when_full="buffer")
    storage.queues.configure("press", max_pending=1, when_full="block")
    for queue in ("digest", "press"):
        entries = [EnqueueEntry(f"{queue}-{n}", "{}") for n in range(2)]
        assert storage.call(*storage.tasks.enqueue_op(queue, entries))[3] in ("overflow", "full")
    storage.leases.fetch("press", "w", "t", 60_000, 1)  # room made in a full queue: a token in room
    storage.queues.configure("rated", rate_limit="1/h")  # a rate limit's token state
    storage.call(*storage.tasks.enqueue_op("rated", [EnqueueEntry("rated-1", "{}")]))
    storage.leases.fetch("rated", "w", "t", 60_000, 1)
    for queue in ("idle", "handy"):  # an idle executor registers; a task is handed to one
        storage.call(*storage.leases.fetch_op(queue, "w", "t", 60_000, 1, 60_000))
    storage.call(*storage.tasks.enqueue_op("handy", [EnqueueEntry("handed", "{}")]))
    table = ztq.CronTable([CronEntry("every-minute", t.noop.prepare(), "* * * * *")])
    table.fire(now=(int(time.time()) // 60) * 60 + 0.5)
    from ztq.core.auth.logins import LoginPolicy, login_failed

    login_failed(storage, LoginPolicy(), "ann", "192.0.2.1")  # the sign-in counters
    from ztq.core.auth.sessions import SessionPolicy, open_session
    from ztq.core.auth.tokens import create_token

    open_session(storage, SessionPolicy(), "s" * 32, user="ann", role="operator", grant="g",
                 via="password", ip="192.0.2.1", ua="test")  # fmt: skip
    create_token(storage, "prometheus", "viewer", 30)
    scenario.log(storage, "audit-probe", "ops")  # events
    from ztq.core.messaging.broadcast import listen_op, record_run

    storage.call(*listen_op(storage, "reports", "join", "mailer-1", 60_000))  # listeners
    sent = t.noop.broadcast()  # the queue's broadcasts and this one's record
    record_run(storage, sent.queue, sent.id, "mailer-1", "running")  # broadcast-runs
    news = ztq.channel("news")  # the channel index, its messages and meta
    reader = news.subscribe("audit")
    news.publish({"n": 1})
    reader.ack(*reader.read())  # trimmed: a wake-up token in room
    storage.client.xadd(storage.keys.audit, {"who": "ops", "what": "redo"})
    from ztq.core.alerts.alerter import Alerter, AlertSettings
    from ztq.core.alerts.rules import parse_rules

    rules = parse_rules("no_worker *; error_rate * > 0 in 60m")
    assert Alerter(storage, AlertSettings(rules)).step() is not None  # the alerts, log, lock
    from ztq.core.engine.connection import server_identity

    server_identity(storage, "scenario")  # the data-set marker a worker sets (issue 28)
    from ztq.core.client.batch import relay

    with ztq.batch(on_complete=t.noop.prepare(), pass_results=True):  # a finished batch
        t.add.enqueue((1, 1), queue="batched")
    with ztq.batch():  # an open one, its member's end still in the queue's outbox
        t.add.enqueue((2, 2), queue="batched")
    [lease] = storage.leases.fetch("batched", "w", "t", 60_000, 1)
    storage.leases.ack("batched", "w", [Finished(lease.id, lease.token, "x", "2")])
    relay(storage, ["batched"])  # applied: results, events, the callback and its once-key
    [lease] = storage.leases.fetch("batched", "w", "t", 60_000, 1)
    storage.leases.ack("batched", "w", [Finished(lease.id, lease.token, "x", "4")])  # not relayed
    # an empty batch with a callback, written bare: its send waits in the global outbox
    storage.call(*storage.batches.batch_create_op("empty", [], on_complete=True, ttl_ms=60_000))
    from tests.key_tasks import Q as keyed
    from tests.key_tasks import call_api, send_mail

    ztq.configure_queue(keyed, key_concurrency=2)  # keyed tasks: turns, states, counts
    for key, n in (("a", 3), ("b", 2), ("c", 1), ("d", 2), ("e", 3)):
        for i in range(n):
            (call_api if key == "b" else send_mail).delay(key, i)
    storage.key_turns.pause_key(keyed, "c")
    storage.leases.fetch(keyed, "w", "t", 60_000, 4)  # a, b, d, e take a turn each
    storage.leases.fetch(keyed, "w", "u", 60_000, 2)  # a and d again, b parked until its next token
    storage.key_turns.weigh_key(keyed, "e", 3)  # next in line: its turn goes on (k:used)
    storage.leases.fetch(keyed, "w", "v", 60_000, 1)  # e, 1 of its 3
    found = [str(k) for k in storage.client.scan_iter(match="ztq:*", count=1000)]
    types = dict(zip(found, (storage.client.type(k) for k in found), strict=True))
    unmatched = set(found)
    for doc_key, doc_type in documented_keys().items():
        pattern = _pattern(doc_key, "ztq")
        hits = [k for k in found if pattern.match(k)]
        assert hits, f"{doc_key} is documented but the scenario made no such key"
        for k in hits:
            assert types[k] == doc_type, f"{k}: Redis says {types[k]}, the doc says {doc_type}"
        unmatched -= set(hits)
    assert not unmatched, f"keys the doc does not describe: {sorted(unmatched)}"


def test_script_table_lists_every_script_with_what_it_returns() -> None:
    rows = section_table("The scripts")
    documented = [re.findall(r"`([^`]+)`", cells[0])[0] for cells in rows]
    assert sorted(documented) == sorted(NAMES)
    for cells in rows:
        assert len(cells) == 4 and cells[2], f"{cells[0]}: say what it returns"
    folder = Path(ztq.__file__).parent / "engine" / "scripts"
    for name in NAMES:
        header = (folder / f"{name}.lua").read_text(encoding="utf-8").split("\n\n")[0]
        for part in ("KEYS", "ARGV", "Returns"):
            assert part in header, f"{name}.lua: its header comment does not say {part}"


def test_design_doc_names_nothing_outside_the_repo() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    assert "shared/" not in text and "../" not in text
    for path in re.findall(r"`((?:core|worker|console|tests|docs)/[^`*]+?)`", text):
        assert (DESIGN.parents[1] / path.split("::")[0]).exists(), path
