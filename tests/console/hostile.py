"""Hostile data for console tests: a corpus of nasty strings, planted into every
Redis-controlled field the console shows.

Everything is written the way a worker writes it (the storage scripts: enqueue, fetch,
fail, ack, progress; heartbeats, the worker log, cron entries, the audit log), so the
console reads real records; what no ztq process would write (a queue name that
``check_queue`` refuses, a record that is not JSON, times that are not numbers) is written
raw, as another client sharing the Redis could.

Payloads that try to run script call ``alert()`` or set ``window.__ztqHostile``; payloads
that try to add markup give it an id starting with ``ztq-evil``, so a test sees an injection
even where the Content-Security-Policy stops the script.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from tests.console import scenario
from ztq.core.auth.tokens import create_token
from ztq.core.engine.storage import EnqueueEntry, Finished, Storage
from ztq.core.engine.workers import (
    log_event,
    publish_cron_entries,
    set_cron_enabled,
    write_heartbeat,
)
from ztq.core.monitor.streams import write_audit

MARKER = "__ztqHostile"  # a global the payloads set when their script runs
EVIL = "ztq-evil"  # the id (prefix) of every element the payloads try to inject
QUEUE = "hostile"  # the (valid) queue holding the hostile tasks
LONG = "W" * 100_000  # 100 kB without a space or a break opportunity
USER_AGENT = f"\"><img id={EVIL}-ua src=x onerror=alert('ztq-ua')> Mozilla/5.0"  # sessions

PAYLOADS: dict[str, str] = {
    "script": "<script>alert('ztq-script')</script>",
    "script-marker": f"<script>window.{MARKER}='script'</script>",
    "img-onerror": f"\"><img id={EVIL}-img src=x onerror=alert('ztq-img')>",
    "attr-single": f"' onmouseover='alert(1)' autofocus onfocus='window.{MARKER}=1' x='",
    "attr-double": f'" autofocus onfocus="window.{MARKER}=2" id="{EVIL}-attr" x="',
    "attr-unquoted": f"x onfocus=alert(3) autofocus id={EVIL}-unquoted",
    "javascript-url": "javascript:alert('ztq-js-url')",
    "data-url": "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "svg-onload": f"<svg id={EVIL}-svg onload=alert('ztq-svg')>",
    "svg-script": f"<svg><script>window.{MARKER}='svg'</script></svg>",
    "iframe-srcdoc": f'<iframe id={EVIL}-iframe srcdoc="<script>parent.alert(1)</script>">',
    "details-toggle": f"<details id={EVIL}-details open ontoggle=alert('ztq-details')>",
    "jinja": "{{7*7}}{% raw %}{{ config }}{{ ''.__class__.__mro__ }}{#",
    "js-template": "${7*7}`${alert('ztq-tpl')}`#{7*7}<%= 7*7 %>",
    "style-breakout": f"</style><script>alert('ztq-style')</script><style id={EVIL}-style>"
    "body{display:none}</style>",
    "title-breakout": f"</title><script>window.{MARKER}='title'</script>",
    "textarea-breakout": f"</textarea></option></select><b id={EVIL}-textarea>x</b>",
    "comment-breakout": "--><script>alert('ztq-comment')</script><!--",
    "noscript-mxss": f'<noscript><p title="</noscript><img id={EVIL}-mxss src=x '
    "onerror=alert('ztq-mxss')>\">",
    "base-meta": f'<base id={EVIL}-base href="//evil.invalid/">'
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    "css-import": f'<link id={EVIL}-link rel=stylesheet href="//evil.invalid/x.css">'
    '<style>@import "//evil.invalid/y.css";</style>',
    "css-value": "red;background:url(javascript:alert(1));x:expression(alert(1))",
    "polyglot": "jaVasCript:/*-/*`/*\\`/*'/*\"/**/(/* */oNcliCk=alert() )//%0D%0A%0d%0a//"
    "</stYle/</titLe/</teXtarEa/</scRipt/--!>\\x3csVg/<sVg/oNloAd=alert()//>\\x3e",
    "pre-escaped": "&lt;script&gt;alert(1)&lt;/script&gt; &amp;amp; &#x3C;b&#x3E; &quot;",
    "url-encoded": "%3Cscript%3Ealert(1)%3C%2Fscript%3E%22%3E%0d%0a",
    "bidi": "invoice\u202egpj.exe \u2066<b>\u2069 \u200f\u202d",
    "zero-width": "ad\u200bmin\u200c\u200d\u2060\ufeff",
    "lookalike": "\uff1cscript\uff1ealert(1)\uff1c/script\uff1e \u0430dmin \u1438script\u1433",
    "control": "nul\x00bell\x07esc\x1b[31mred\x1b[0m\x08\x7f\x85\x0bvt\x0cff",
    "crlf": f"x\r\nSet-Cookie: ztq=evil\r\n\r\n<b id={EVIL}-crlf>",
    "prometheus": 'x"} 1\nztq_injected{a="b"} 1\n# HELP ztq_injected x\\',
    "emoji": "\U0001f600\U0001f389\U0001f469\u200d\U0001f469\u200d\U0001f467 "
    "\U0001d54f\U0001d502 \U0001f4a9 \U0010fffd",
    "zalgo": "Z" + "\u0336\u0321\u0322\u031b\u0317" * 40,
    "rtl": "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd <b>x</b>",
    "json-ish": '{"a": [1, 2, ,]}\'}]}\\u0000 NaN Infinity "\\',
    "script-close": f"</script><script>window.{MARKER}='close'</script>",
    "long": LONG,
    "long-markup": f"<b id={EVIL}-long>" + "x" * 20_000 + "</b>" + "y" * 5_000,
}
# printable payloads whose text the browser shows unchanged (others are normalized:
# control characters, collapsed white space)
VERBATIM = tuple(
    k for k, v in PAYLOADS.items() if v.isprintable() and "  " not in v and len(v) <= 200
)
# times and counters that are not what a worker writes (a foreign writer, a bad clock)
ODD_NUMBERS = ("inf", "-inf", "nan", "-1", "1e300", "99999999999999999999999", "<b>1</b>", "")
STATES = ("error", "done", "delayed", "running", "queued")


@dataclass
class Planted:
    """What :func:`plant` wrote: the pages a test should open."""

    tasks: list[tuple[str, str]] = field(default_factory=list)  # (queue, id)
    workers: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)  # valid names, with a page of their own
    bad_queues: list[str] = field(default_factory=list)  # names check_queue refuses


def task_id(state: str, key: str) -> str:
    return f"h-{state}-{key}"


def worker_id(key: str, text: str) -> str:
    # an id is a hash field and a path segment: keep the 100 kB ones to a URL's size
    return text if len(text) <= 2000 else f"long-{key}-" + text[:1000]


def traceback_of(text: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        f'  File "/srv/app/{text}.py", line 7, in {text}\n'
        f"    {text}\n"
        f"HostileError: {text}\n"
    )


def _payload(text: str) -> str:
    data = {"task": text, "args": [text, {text: [text]}, 1], "kwargs": {text: text}}
    data["opts"] = {"retries": 3, "meta": {text: text}}
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _enqueue(storage: Storage, queue: str, tid: str, text: str, **kw: Any) -> None:
    storage.queues.register_queue(queue)
    storage.call(*storage.tasks.enqueue_op(queue, [EnqueueEntry(tid, _payload(text), **kw)]))


def _lease(storage: Storage, queue: str, worker: str, thread: str) -> Any:
    [lease] = storage.leases.fetch(queue, worker, thread, 600_000, 1)
    return lease


def _fail(
    storage: Storage, queue: str, worker: str, lease: Any, text: str, error: str = "", **kw: Any
) -> None:
    error = error or f"HostileError: {text}"
    storage.leases.fail(queue, worker, lease.id, lease.token, text, error, traceback_of(text), **kw)


def _retried(storage: Storage, queue: str, key: str, state: str, text: str) -> tuple[str, Any]:
    """A task that failed once (error and traceback stay on its record) and is leased again."""
    wid = worker_id(key, text)
    _enqueue(storage, queue, task_id(state, key), text)
    _fail(storage, queue, wid, _lease(storage, queue, wid, text), text, retry_delay_ms=0)
    storage.tasks.promote(queue)
    return wid, _lease(storage, queue, wid, text)


def plant_task(storage: Storage, queue: str, key: str, text: str, state: str) -> str:
    """One task with ``text`` as its name, arguments and every text a run adds, in ``state``."""
    tid, wid = task_id(state, key), worker_id(key, text)
    if state == "error":  # the text as the error's type too: error groups show it
        _enqueue(storage, queue, tid, text)
        _fail(storage, queue, wid, _lease(storage, queue, wid, text), text, f"{text}: {text}")
    elif state == "done":
        wid, lease = _retried(storage, queue, key, state, text)
        result = json.dumps({"result": text, "list": [text]}, ensure_ascii=False)
        storage.leases.ack(queue, wid, [Finished(lease.id, lease.token, text, result)])
    elif state == "delayed":
        _enqueue(storage, queue, tid, text)
        lease = _lease(storage, queue, wid, text)
        _fail(storage, queue, wid, lease, text, retry_delay_ms=3_600_000)
    elif state == "running":
        wid, lease = _retried(storage, queue, key, state, text)
        progress = json.dumps({"done": 1, "total": 3, "stage": text}, ensure_ascii=False)
        if key.startswith(("a", "s", "l")):  # some report progress that is not JSON
            progress = text
        storage.leases.set_run_info(queue, lease.id, lease.token, wid, "progress", progress)
        storage.leases.set_run_info(queue, lease.id, lease.token, wid, "comment", text)
    else:
        _enqueue(storage, queue, tid, text, priority=("high", "normal", "low")[len(key) % 3])
    return tid


def plant_worker(storage: Storage, key: str, text: str, n: int) -> str:
    wid = worker_id(key, text)
    now = time.time()
    data = {
        "name": text,
        "host": text,
        "ip": text,
        "pid": text if n % 2 else 4242,
        "cpu_percent": 12.5,
        "mem_total": 16 * 2**30,
        "mem_percent": 41.0,
        "rss": 120 * 2**20,
        "started": now - 3600,
        "status": ("running", "paused", "stopping", text)[n % 4],
        "pool": [text],
        "threads": {QUEUE: 2, text: 1},
        "config_editable": bool(n % 2),
        "current": {
            text: {
                "id": task_id("running", key),
                "queue": QUEUE,
                "task": text,
                "started": now - 75,
                "comment": text,
            },
            f"{text}-2": {"id": text, "queue": text, "task": text, "started": text},
        },
        "done": 10,
        "failed": 2,
    }
    write_heartbeat(storage, wid, data)
    if n % 5 == 4:  # lost: no heartbeat for four minutes
        scenario.make_lost(storage, wid, 240)
    return wid


def plant(storage: Storage) -> Planted:
    """Write every payload into every string the console shows; returns what to open."""
    out = Planted(queues=[QUEUE, "-", "a.b_c-d", "q" * 64])
    for state in STATES:
        for key, text in PAYLOADS.items():
            out.tasks.append((QUEUE, plant_task(storage, QUEUE, key, text, state)))
    for n, (key, text) in enumerate(PAYLOADS.items()):
        out.workers.append(plant_worker(storage, key, text, n))
        _events(storage, key, text, n)
        write_audit(storage, text, text, queue=text, ids=[text, task_id("error", key)], detail=text)
    for name in out.queues[1:]:  # odd but valid names
        for state in ("error", "queued"):
            out.tasks.append((name, plant_task(storage, name, "odd", name, state)))
    for key in ("script", "attr-double", "bidi", "control", "long-markup", "prometheus"):
        bad = PAYLOADS[key]  # names check_queue refuses, in the queue set all the same
        plant_task(storage, bad, key, bad, "error")
        plant_task(storage, bad, key, bad, "queued")
        out.bad_queues.append(bad)
    _cron(storage)
    for key in ("script", "attr-double", "title-breakout", "control", "long"):
        create_token(storage, PAYLOADS[key], "viewer", 1)  # the sessions page lists tokens
    _raw(storage, out)
    return out


def _events(storage: Storage, key: str, text: str, n: int) -> None:
    kinds = ("start", "stop", "lost", "command", "config", text)
    log_event(storage, kinds[n % len(kinds)], worker_id(key, text), text, by=text)
    storage.client.xadd(storage.keys.events, {"kind": text, "worker": text, text: text})


def _cron(storage: Storage) -> None:
    entries = []
    for n, text in enumerate(PAYLOADS.values()):
        entries.append(
            {
                "name": text,
                "spec": text if n % 2 else "*/5 * * * *",
                "task": text,
                "queue": text if n % 3 else QUEUE,
                "args": [text],
                "kwargs": {text: text},
                "next": int((time.time() + 300 + n) * 1000),
            }
        )
    entries.append({"name": "odd-next", "spec": "", "task": "", "next": "<b>soon</b>"})
    publish_cron_entries(storage, entries)
    for key in ("script", "attr-double", "long"):
        set_cron_enabled(storage, PAYLOADS[key], False, by=PAYLOADS[key])
    storage.client.hset(storage.keys.cron, "not-json", "{<script>")
    storage.client.hset(storage.keys.cron, "not-a-dict", json.dumps([PAYLOADS["script"]]))


def _raw(storage: Storage, out: Planted) -> None:
    """What only a foreign writer leaves: records that are not JSON, fields of the wrong
    type, times that are not numbers, ids the console cannot link to."""
    k, c = storage.keys, storage.client
    now = int(time.time() * 1000)
    script, long = PAYLOADS["script"], PAYLOADS["long-markup"]
    records = {
        "h-raw-nometa": f"no meta line {script}",
        "h-raw-badmeta": f"{{not json {script}\n{_payload(script)}",
        "h-raw-badpayload": json.dumps({"state": "error", "error": script}) + f"\n{{{script}",
        "h-raw-types": json.dumps(
            {
                "state": script,
                "prio": script,
                "enqueued": script,
                "started": "soon",
                "ended": [script],
                "attempts": {"n": script},
                "progress": script,
                "result": script,
                "worker": script,
                "thread": long,
                "error": {"e": script},
                "traceback": long,
                "comment": [long],
            }
        )
        + "\n"
        + _payload(long),
    }
    for n, odd in enumerate(ODD_NUMBERS):
        meta = {"state": "error", "enqueued": odd, "started": odd, "ended": odd, "failed": odd}
        meta |= {"due": odd, "attempts": odd, "error": f"Odd: {odd}", "progress": odd}
        records[f"h-raw-odd-{n}"] = json.dumps(meta) + "\n" + _payload(odd)
    c.hset(k.tasks(QUEUE), mapping=records)
    c.zadd(k.errors(QUEUE), {i: now - n for n, i in enumerate(records)})
    c.zadd(k.errors(QUEUE), {script: now, "h-gone": now})  # ids without a record
    c.zadd(k.delayed(QUEUE), {"h-raw-types": now + 60_000, script: now + 60_000})
    c.zadd(k.running(QUEUE), {"h-raw-types": now + 60_000, long: now - 60_000})
    c.rpush(k.ready(QUEUE, "normal"), "h-raw-badmeta", script)
    out.tasks += [(QUEUE, i) for i in records]
    for odd in ODD_NUMBERS:
        entry = {"id": script, "task": script, "status": odd or script, "worker": script}
        entry |= {"thread": odd, "enqueued": odd, "started": odd, "ended": odd}
        entry |= {"runtime_ms": odd, "summary": script}
        c.xadd(k.history(QUEUE), entry)
        c.xadd(k.audit, {"user": script, "action": odd, "count": odd})
        c.xadd(k.events, {"kind": odd, "worker": odd, "message": odd})
    c.xadd(k.history(QUEUE), {"summary": long})  # an entry without the usual fields
    write_heartbeat(storage, "odd-numbers", {"name": 1, "started": 1e300, "threads": [1]})
    write_heartbeat(storage, "odd-numbers-2", {"started": "inf", "current": {"t": "x"}})
    c.hset(k.workers, "not-json", f"{{{script}")
    c.zadd(k.seen, {"not-json": now})
    out.workers += ["odd-numbers", "odd-numbers-2", "not-json"]
    # bytes that are not UTF-8: half a character, and bytes no encoding gives
    bad = "错".encode()[:2] + b"\xff\xfe<script>alert(1)</script>"
    c.xadd(k.history(QUEUE), {"id": "h-raw-bytes", "task": bad, "summary": bad, "worker": bad})
    c.hset(k.tasks(QUEUE), "h-raw-bytes", b'{"state":"error","error":"' + bad + b'"}\n' + bad)
    c.zadd(k.errors(QUEUE), {"h-raw-bytes": now})
    c.hset(k.workers, "bytes", b'{"name":"' + bad + b'","host":"' + bad + b'"}')
    c.zadd(k.seen, {"bytes": now})
    c.xadd(k.events, {"kind": bad, "worker": bad, "message": bad})
    c.xadd(k.audit, {"user": bad, "action": bad, "detail": bad})
    c.hset(k.cron, bad, b'{"name":"' + bad + b'","next":1}')
    out.tasks.append((QUEUE, "h-raw-bytes"))
    out.workers.append("bytes")
    for minute in range(int(time.time() // 60) - 5, int(time.time() // 60)):
        c.hset(k.stats(QUEUE, minute), mapping={"done": 7, "failed": 3})
