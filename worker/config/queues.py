"""The one grammar of a queue entry, shared by ``[queues]`` in an ini file, ``--queue`` and
``ZTQ_QUEUES`` (docs/worker.md): every word is checked, and any other word is a
:class:`ConfigError` naming the entry and the form expected."""

from __future__ import annotations

import logging
import re

from ztq.core.engine.keys import MAX_SHARDS, check_queue, check_shards
from ztq.core.errors import ConfigError, InvalidName
from ztq.core.settings import NAME
from ztq.worker.config.specs import ScaleSpec, ThreadSpec, WorkerConfig

log = logging.getLogger("ztq.worker.config")

POOLS = ("thread", "process", "async")
ORDERS = ("fair", "strict")  # how one thread asks its list of queues
OPTIONS = ("shards",)  # the KEY=VALUE words an entry may hold
MAX_THREADS = 256
MAX_ASYNC = 10_000  # coroutines of one async pool
RANGE = re.compile(r"^(\d+)\.\.(\d+)$")
# a word of a list of queues that reads as a number (-2, 2.5, +3, 1e3) is a mistyped count
NUMBERISH = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
# the one grammar of a queue entry, as the ini and --queue spell it (docs/worker.md)
INI_FORM = ("QUEUE = N|MIN..MAX [thread|process|async] [shards=S], or "
            "THREAD = QUEUE, QUEUE ... [thread|process] [fair|strict]")  # fmt: skip
FLAG_FORM = "NAME[:N[:POOL]][:shards=S] (N a count >= 1 or MIN..MAX, POOL thread|process|async)"


def _misplaced(word: str) -> bool:
    return word in (*POOLS, *ORDERS) or word.isdigit() or bool(RANGE.match(word))


def _stray(word: str) -> str:
    """Why ``word`` has no place where it stands in an entry."""
    if _misplaced(word):
        return f"{word!r} is out of place"
    return f"{word!r} is not a pool ({', '.join(POOLS)}) nor an option (shards=N)"


def take_shards(words: list[str], where: str, head: str = "", form: str = INI_FORM) -> int:
    """Remove the ``KEY=VALUE`` words of an entry: the last ``shards=N``'s N (1 when none);
    a key other than those of :data:`OPTIONS` is refused."""
    shards = 1
    for word in [w for w in words if "=" in w]:
        words.remove(word)
        key, _, n = word.partition("=")
        if key not in OPTIONS:
            known = ", ".join(f"{o}=N" for o in OPTIONS)
            raise ConfigError(
                f"{where}{head}{word!r} is not a known option (known: {known}); the form is {form}"
            )
        try:
            shards = check_shards(int(n))
        except (ValueError, InvalidName):
            raise ConfigError(
                f"{where}{head}{word!r} is not a shard count (1-{MAX_SHARDS})"
            ) from None
    return shards


def _none_served(key: str, where: str, head: str, flag: bool) -> ConfigError:
    """A static count of 0: refused, so that a worker given queues never serves another
    (``--queue mail:0`` alone once served ``default``)."""
    sep = ":" if flag else " = "
    ztq = "" if flag else f" (in ZTQ's file, with host/port/db, '{key} = 0' is one thread)"
    return ConfigError(
        f"{where}{head}0 threads serve nothing: write {key}{sep}0..N to serve it on demand "
        f"(autoscaled), or leave it out (ztq queue pause {key} keeps its tasks waiting){ztq}"
    )


def parse_queue_entry(
    key: str, value: str, where: str = "", *, ztq_style: bool = False, flag: bool = False
) -> list[ThreadSpec]:
    """``default = 2`` / ``pdf = 1 process`` / ``crawl = 200 async`` / ``fast = urgent,
    default`` / ``hot = 8 shards=3`` → executor specs. ``N async`` is one thread running up
    to N ``async def`` tasks at once on its event loop; ``shards=N`` says the queue is
    spread over N shards (each of its threads fetches from all of them in turn); a list of
    queues may end with ``fair`` (ask a different queue first at each fetch) or ``strict``
    (the default: always in the order written). Every word is checked: one that is not a
    count, pool, order or known option where it stands is a :class:`ConfigError` naming
    the entry and the form; so is a count of 0 (``flag``: the entry is a ``--queue``).

    In a ZTQ file (``ztq_style``: its ``[server]`` gives ``host``/``port``/``db``) an entry
    of whole numbers is ZTQ's: one thread per number, the number being the seconds ZTQ's
    thread paused after each task (``default = 0`` is one thread, ``mail = 0, 0`` two). ztq
    threads never pause, so a pause other than 0 is logged and not kept."""
    words = value.replace(",", " ").split()
    if words and all(w.isdigit() for w in words) and (ztq_style or len(words) > 1):
        return ztq_queue_entry(key, value, words, where, ztq_style)
    head, form = ("", FLAG_FORM) if flag else (f"queue entry {key} = {value.strip()!r}: ", INI_FORM)
    order = words.pop() if words and words[-1] in ORDERS else "strict"
    fair = order == "fair"
    shards = take_shards(words, where, head, form)
    pool = words.pop() if words and words[-1] in POOLS else "thread"
    if not words:
        raise ConfigError(f"{where}queue entry {key!r} has no value")
    try:
        if words[0].isdigit():
            if len(words) > 1:
                raise ConfigError(f"{where}{head}{_stray(words[1])}; the form is {form}")
            count = int(words[0])
            check_queue(key)
            if fair:
                raise ConfigError(f"{where}'fair' rotates between several queues: "
                                  f"'{key} = a, b fair', not {key!r} = {value!r}")  # fmt: skip
            if count == 0:
                raise _none_served(key, where, head, flag)
            if pool == "async":
                if count > MAX_ASYNC:
                    raise ConfigError(
                        f"{where}async tasks for {key!r} must be 1-{MAX_ASYNC}, not {count}"
                    )
                return [ThreadSpec(f"{key}-0", (key,), pool, count, shards)]
            if count > MAX_THREADS:
                raise ConfigError(
                    f"{where}thread count for {key!r} must be 1-{MAX_THREADS}, not {count}"
                )
            return [ThreadSpec(f"{key}-{i}", (key,), pool, 1, shards) for i in range(count)]
        for word in words:  # a list of queues: names only, then [pool] [order]
            if _misplaced(word):
                raise ConfigError(f"{where}{head}{_stray(word)}; the form is {form}")
            if NUMBERISH.match(word):
                raise ConfigError(
                    f"{where}{head}{word!r} is not a thread count (a whole number >= 1) nor a "
                    f"queue name; the form is {form}"
                )
        if shards > 1:
            raise ConfigError(
                f"{where}shards=N goes with a thread count ('{words[0]} = 4 shards={shards}'), "
                f"not with a list of queues ({key!r} = {value!r})"
            )
        for q in words:
            check_queue(q)
        check_list_name(key, words, where, head)
        if not NAME.match(key):
            raise ConfigError(f"{where}thread name {key!r} is not allowed")
        if pool == "async":
            raise ConfigError(
                f"{where}an async pool serves one queue, with a number of tasks: "
                f"'{words[0]} = 100 async', not {key!r} = {value!r}"
            )
        return [ThreadSpec(key, tuple(words), pool, fair=fair)]
    except InvalidName as exc:
        raise ConfigError(f"{where}{exc}") from exc


def check_list_name(key: str, queues: list[str], where: str, head: str = "") -> None:
    """The list form ``THREAD = QUEUE, QUEUE ...`` names a thread: a name that is a queue's
    (``default`` here; the queues of the imported tasks at the worker's start) and that the
    list leaves out reads as a mistyped count (``default = abc`` once served a
    queue named ``abc`` and left ``default`` without a thread)."""
    if key == "default" and key not in queues:
        raise ConfigError(
            f"{where}{head}'default' is a queue: give it a thread count ('default = 2'); a "
            "thread serving a list of queues is named otherwise ('fast = urgent, default')"
        )


def parse_scale_entry(
    key: str, value: str, where: str = "", *, flag: bool = False
) -> ScaleSpec | None:
    """``mail = 1..8`` / ``pdf = 0..4 process`` / ``crawl = 10..200 async`` / ``hot = 2..8
    shards=3`` → an autoscaled queue; None when ``value`` gives no range (a plain entry)."""
    words = value.replace(",", " ").split()
    found = [w for w in words if RANGE.match(w)]
    if not found:
        return None
    head, form = ("", FLAG_FORM) if flag else (f"queue entry {key} = {value.strip()!r}: ", INI_FORM)
    rest = [w for w in words if w not in found]
    shards = take_shards(rest, where, head, form)
    pool = rest.pop() if rest and rest[-1] in POOLS else "thread"
    if len(found) > 1 or rest or words.index(found[0]) != 0:
        raise ConfigError(
            f"{where}an autoscaled queue is 'QUEUE = MIN..MAX [thread|process|async] "
            f"[shards=N]', one queue a line, not {key!r} = {value.strip()!r}"
        )
    try:
        check_queue(key)
    except InvalidName as exc:
        raise ConfigError(f"{where}{exc}") from exc
    m = RANGE.match(found[0])
    assert m is not None
    low, high = int(m.group(1)), int(m.group(2))
    top = MAX_ASYNC if pool == "async" else MAX_THREADS
    if not 0 <= low <= high or not 1 <= high <= top:
        raise ConfigError(
            f"{where}autoscaled {key!r}: {found[0]} must be MIN..MAX with 0 <= MIN <= MAX and "
            f"1 <= MAX <= {top}" + (" (an async pool's tasks at once)" if pool == "async" else "")
        )
    return ScaleSpec(key, low, high, pool, shards)


def parse_queue_flag(
    value: str, default_pool: str = "thread", source: str = "--queue"
) -> list[ThreadSpec] | ScaleSpec:
    """``--queue mail`` / ``mail:2`` / ``pdf:1:process`` / ``crawl:200:async`` /
    ``hot:8:shards=3`` / ``mail:1..8`` → executor specs, or an autoscaled queue: the words of
    an ini entry, by position, each checked (issue 24: 'mail:two' once served a queue
    named 'two'). ``source`` names where the entry came from in errors (the flag, or
    ``environment variable ZTQ_QUEUES``)."""
    where = f"{source} {value!r}: "
    name, *parts = value.split(":")
    options = [p for p in parts if "=" in p]
    rest = [p for p in parts if "=" not in p]
    if len(rest) > 2 or "" in parts:
        raise ConfigError(f"{where}the form is {FLAG_FORM}")
    count, pool = (rest + ["", ""])[:2]
    if count and not (count.isdigit() or RANGE.match(count)):
        raise ConfigError(f"{where}{count!r} is not a thread count (a whole number >= 1) nor "
                          f"a range MIN..MAX; the form is {FLAG_FORM}")  # fmt: skip
    if pool and pool not in POOLS:
        raise ConfigError(f"{where}{pool!r} is not a pool ({', '.join(POOLS)}); "
                          f"the form is {FLAG_FORM}")  # fmt: skip
    words = " ".join([count or "1", pool or default_pool, *options])
    scaled = parse_scale_entry(name, words, where, flag=True)
    return parse_queue_entry(name, words, where, flag=True) if scaled is None else scaled


def check_scaled(cfg: WorkerConfig) -> None:
    """An autoscaled queue is written once, and is not also given a fixed thread count (a
    list of queues served by one thread may name it); the minima fit in
    ``autoscale_threads_max``."""
    seen: set[str] = set()
    for s in cfg.scaled:
        if s.queue in seen:
            raise ConfigError(f"autoscaled queue {s.queue!r} is given twice")
        seen.add(s.queue)
    for s in cfg.scaled:
        mine = [t for t in cfg.threads if t.queues == (s.queue,)]
        if mine != s.initial():
            raise ConfigError(
                f"queue {s.queue!r} is autoscaled ({s.low}..{s.high}) and also given a thread "
                "count: keep one of the two"
            )
    fixed = sum(s.low for s in cfg.scaled if s.pool != "async")
    if cfg.autoscale_threads_max and fixed > cfg.autoscale_threads_max:
        raise ConfigError(
            f"the autoscaled queues' minima add up to {fixed} threads, more than "
            f"autoscale_threads_max ({cfg.autoscale_threads_max})"
        )


def ztq_queue_entry(
    key: str, value: str, words: list[str], where: str, ztq_style: bool
) -> list[ThreadSpec]:
    """ZTQ's ``[queues]`` entry: one thread per number (its pause after each task)."""
    if not ztq_style:
        raise ConfigError(
            f"{where}queue entry {key} = {value.strip()!r} is ZTQ's list of threads (one per "
            "number), read so only in a file that gives ZTQ's host/port/db; here write "
            f"{key} = {len(words)}"
        )
    try:
        check_queue(key)
    except InvalidName as exc:
        raise ConfigError(f"{where}{exc}") from exc
    if len(words) > MAX_THREADS:
        raise ConfigError(
            f"{where}thread count for {key!r} must be 0-{MAX_THREADS}, not {len(words)}"
        )
    if any(int(w) for w in words):
        log.warning(
            "%s%s = %s: ZTQ's pause after each task is not kept (ztq threads never pause); "
            "%d thread(s) for %s", where, key, value.strip(), len(words), key,
        )  # fmt: skip
    return [ThreadSpec(f"{key}-{i}", (key,)) for i in range(len(words))]
