"""Every Redis key name ztq uses, and the only place that spells one.

Keys of a queue carry the hash tag ``{queue}`` and global keys ``{ztq}``, so every Lua script
touches keys of one cluster slot and the same code runs on a single Redis and on Cluster.
"""

from __future__ import annotations

import hashlib
import re
import zlib

from ztq.core.errors import InvalidName
from ztq.core.settings.parsers import PREFIX_NAME  # the prefix setting's rule
from ztq.core.states import PRIORITIES, Priority

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def check_queue(name: str) -> str:
    """Return ``name`` if it is a usable queue name, else raise :class:`InvalidName`."""
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise InvalidName(
            f"queue name {name!r} is not allowed: use 1-64 letters, digits, '_', '.' or '-'"
        )
    return name


SHARD_MARK = "~"  # ``mail~2``: shard 2 of queue ``mail`` (a queue name cannot hold "~")
MAX_SHARDS = 64
SHARD_NAME = re.compile(r"^([A-Za-z0-9_.\-]{1,64})~([1-9][0-9]?)$")


def check_shards(n: object) -> int:
    """Return ``n`` if it is a usable shard count (1-64), else raise :class:`InvalidName`."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SHARDS:
        raise InvalidName(f"shards must be an int from 1 to {MAX_SHARDS}, not {n!r}")
    return n


def shard_name(queue: str, index: int) -> str:
    """The physical queue of shard ``index``: shard 0 is the queue itself, so a queue that
    gains shards keeps its keys, and ``shards=1`` is exactly an unsharded queue."""
    return queue if index == 0 else f"{queue}{SHARD_MARK}{index}"


def shard_names(queue: str, shards: int) -> list[str]:
    return [shard_name(queue, i) for i in range(shards)]


def shard_for(queue: str, task_id: str, shards: int) -> str:
    """The shard a task id lives in: a hash of the id, so one id always lands in the same
    shard (dedup holds) as long as every producer of the queue gives the same count."""
    if shards <= 1:
        return queue
    return shard_name(queue, zlib.crc32(task_id.encode("utf-8", "surrogatepass")) % shards)


def split_shard(name: str) -> tuple[str, int]:
    """``mail~2`` → (``mail``, 2); ``mail`` → (``mail``, 0)."""
    m = SHARD_NAME.match(name)
    return (m.group(1), int(m.group(2))) if m else (name, 0)


def check_channel(name: str) -> str:
    """Return ``name`` if it is a usable channel name (as a queue name), else raise."""
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise InvalidName(
            f"channel name {name!r} is not allowed: use 1-64 letters, digits, '_', '.' or '-'"
        )
    return name


def check_physical(name: str) -> str:
    """Return ``name`` if it is a queue or one of its shards (``mail~2``), else raise."""
    m = SHARD_NAME.match(name) if isinstance(name, str) else None
    if m and int(m.group(2)) < MAX_SHARDS:
        return name
    return check_queue(name)


# how long the stats keys live (_lib.lua: 2 h a minute, 25 h a 5-minute slot), in their units
STATS_MINUTES, STATS_SLOTS = 122, 302


class Keys:
    """Builds key names under one prefix (default ``ztq``)."""

    def __init__(self, prefix: str = "ztq") -> None:
        if not PREFIX_NAME.match(prefix):
            raise InvalidName(f"key prefix {prefix!r} is not allowed")
        self.prefix = prefix
        self.queues = f"{prefix}:{{ztq}}:queues"
        self.workers = f"{prefix}:{{ztq}}:workers"  # hash: worker id -> heartbeat JSON
        self.seen = f"{prefix}:{{ztq}}:seen"  # zset: worker id -> last report (ms)
        # what the console counts and pages workers by, kept by the heartbeat script
        self.worker_summaries = f"{prefix}:{{ztq}}:workers:summary"  # hash: id -> summary
        self.worker_states = f"{prefix}:{{ztq}}:workers:state"  # zset: id -> band, report
        self.worker_totals = f"{prefix}:{{ztq}}:workers:totals"  # hash: busy, t:<q>, p:<q>
        self.worker_names = f"{prefix}:{{ztq}}:workers:names"  # zset: id -> 0 (name order)
        self.events = f"{prefix}:{{ztq}}:events"
        # string: a token naming this Redis's data set, written once by the first worker;
        # gone means Redis lost its data (restarted empty, flushed): worker/resilience
        self.marker = f"{prefix}:{{ztq}}:marker"
        self.cron = f"{prefix}:{{ztq}}:cron"  # hash: entry name -> JSON, as workers publish it
        self.cron_off = f"{prefix}:{{ztq}}:cron:off"  # hash: disabled entry -> who, when
        self.audit = f"{prefix}:{{ztq}}:audit"
        self.login_stats = f"{prefix}:{{ztq}}:login:stats"  # hash: failures, locks, unlocks
        self.sessions = f"{prefix}:{{ztq}}:sessions"  # zset: session handle -> deadline (ms)
        self.tokens = f"{prefix}:{{ztq}}:tokens"  # zset: API token id -> expiry (ms)
        self.alerts = f"{prefix}:{{ztq}}:alerts"  # hash: rule TAB subject -> alert state JSON
        self.alerts_log = f"{prefix}:{{ztq}}:alerts:log"  # stream: firing, resolved, sent, failed
        self.alerts_lock = f"{prefix}:{{ztq}}:alerts:lock"  # string: one evaluation round at once

    # -- per queue ---------------------------------------------------------------------------
    def _q(self, queue: str, suffix: str) -> str:
        return f"{self.prefix}:{{{queue}}}:{suffix}"

    def tasks(self, queue: str) -> str:
        return self._q(queue, "tasks")

    def ready(self, queue: str, priority: Priority | str) -> str:
        level = priority.value if isinstance(priority, Priority) else priority
        return self._q(queue, f"ready:{level}")

    def ready_all(self, queue: str) -> list[str]:
        return [self.ready(queue, p) for p in PRIORITIES]

    def delayed(self, queue: str) -> str:
        return self._q(queue, "delayed")

    def running(self, queue: str) -> str:
        return self._q(queue, "running")

    def errors(self, queue: str) -> str:
        return self._q(queue, "errors")

    def done(self, queue: str) -> str:
        return self._q(queue, "done")

    def history(self, queue: str) -> str:
        return self._q(queue, "history")

    def wake(self, queue: str) -> str:
        return self._q(queue, "wake")

    def schedule(self, queue: str) -> str:
        """Wake-up tokens for schedulers: a delayed task (maybe due sooner) arrived."""
        return self._q(queue, "schedule")

    def fence(self, queue: str) -> str:
        """The queue's lease counter: every lease takes the next fencing token from it."""
        return self._q(queue, "fence")

    def paused(self, queue: str) -> str:
        return self._q(queue, "paused")

    def config(self, queue: str) -> str:
        """Queue-wide settings the scripts enforce (``max_running``, ``max_pending``,
        ``when_full``, ``block_timeout``, ``rate_limit``, ``rate_burst``), set by
        ``configure_queue``."""
        return self._q(queue, "config")

    def rate(self, queue: str) -> str:
        """The queue's rate limit state (GCRA, on Redis's clock): ``tat``, the theoretical
        arrival time of the next start (ms), and ``slot`` / ``who``, the one executor
        registered to fetch at the next token (see _lib.lua)."""
        return self._q(queue, "rate")

    def waiter(self, queue: str) -> str:
        """The queue's registered idle executor (``worker TAB thread TAB lease_ms TAB until
        ms``): an enqueue that finds the queue empty leases the task straight to it."""
        return self._q(queue, "waiter")

    def hand(self, queue: str) -> str:
        """Leases an enqueue handed to the registered executor (at most one entry: ``worker
        TAB thread TAB token TAB failures TAB id TAB payload``); it blocks on this list."""
        return self._q(queue, "hand")

    def fetched(self, queue: str, worker_id: str) -> str:
        """One executor's last fetch that took tasks (``worker_id``: worker id ``/`` thread):
        ``request id TAB id TAB token ...``, kept as long as the lease, so that the same
        request sent again (its reply lost) gets the same leases (docs/design.md, "Lost
        replies")."""
        return self._q(queue, f"fetched:{worker_id}")

    def request(self, queue: str, request_id: str) -> str:
        """String: what one enqueue call (``request_id``, made by the client once per call)
        answered, its outcomes space-separated; kept for the request window (Redis TTL), so
        that the same call sent again after a lost reply gets that answer and changes
        nothing (docs/design.md, "Lost replies")."""
        return f"{self.prefix}:{{{queue}}}:req:{request_id}"

    # -- keyed tasks (scripts/_keyed.lua names these after the tasks key, in its slot) ------
    def key_turns(self, queue: str) -> str:
        """List: the rotation of the keys that have tasks ready (each once, state 'r')."""
        return self._q(queue, "k:turns")

    def key_state(self, queue: str) -> str:
        """Hash: key -> 'r' (taking turns), 'c' / 't' / 'p' (parked: its running limit, its
        next token, a pause); absent: no task ready."""
        return self._q(queue, "k:state")

    def key_wait(self, queue: str) -> str:
        """Zset: key -> its tasks waiting (the busiest keys first)."""
        return self._q(queue, "k:wait")

    def key_run(self, queue: str) -> str:
        """Zset: key -> the leases it holds now (its running limit's count)."""
        return self._q(queue, "k:run")

    def key_due(self, queue: str) -> str:
        """Zset: key -> when its next token is due (ms): a key parked by its rate limit."""
        return self._q(queue, "k:due")

    def key_rate(self, queue: str) -> str:
        """Hash: ``k:<key>`` -> the key's GCRA arrival time; ``slot`` / ``who``: the executor
        registered to fetch at the next token of a key."""
        return self._q(queue, "k:rate")

    def key_paused(self, queue: str) -> str:
        """Set: the keys an operator paused."""
        return self._q(queue, "k:paused")

    def key_weight(self, queue: str) -> str:
        """Hash: key -> its weight W > 1, tasks it takes a turn (an operator's; absent: 1)."""
        return self._q(queue, "k:weight")

    def key_used(self, queue: str) -> str:
        """Hash: key -> tasks a weighted key took in its current turn."""
        return self._q(queue, "k:used")

    def key_ready(self, queue: str, priority: Priority | str, key: str) -> str:
        """List: one key's entries ready at one level (``<id>#k<n>``)."""
        level = priority.value if isinstance(priority, Priority) else priority
        return self._q(queue, f"k:r:{level}:{key}")

    def overflow(self, queue: str) -> str:
        """A full queue's buffer (``when_full = buffer``): ids that wait to enter the ready
        lists, moved in (oldest first) as the queue drains."""
        return self._q(queue, "overflow")

    def room(self, queue: str) -> str:
        """Wake-up tokens for producers blocked on a full queue (``when_full = block``)."""
        return self._q(queue, "room")

    def cronlast(self, queue: str) -> str:
        return self._q(queue, "cronlast")

    def stats(self, queue: str, minute: int) -> str:
        """Counters of one minute (``done``, ``failed``, time histograms: see _lib.lua);
        ``minute`` is epoch seconds // 60."""
        return self._q(queue, f"stats:{minute}")

    def stats5(self, queue: str, slot: int) -> str:
        """The same counters for 5 minutes; ``slot`` is epoch seconds // 300."""
        return self._q(queue, f"stats5:{slot}")

    def totals(self, queue: str) -> str:
        """The same counters since the queue began (Prometheus counters and histograms)."""
        return self._q(queue, "totals")

    # -- undo and follow-through of the console's bulk actions (docs/console.md) -----------
    def trash(self, queue: str, batch: str) -> str:
        """Hash: the errors one delete took off the queue (``batch``), id -> failed-at (ms)
        TAB the record as it was; it expires with the trash window (Redis TTL)."""
        return self._q(queue, f"trash:{batch}")

    def trash_index(self, queue: str) -> str:
        """Zset: the queue's trash batches -> when each expires (ms); expires with them."""
        return self._q(queue, "trash")

    def redo(self, queue: str, batch: str) -> str:
        """Zset: the tasks one redo (``batch``) put back, id -> when (ms), for following
        them (capped); it expires after the follow window (Redis TTL)."""
        return self._q(queue, f"redo:{batch}")

    # -- batches (docs/batches.md): a member's end goes to its queue's outbox first --------
    def batch_out(self, queue: str) -> str:
        """List: the ends of batch members in this queue not applied to their batch yet
        (``batch TAB member TAB outcome TAB fence [TAB result]``), written by the script
        that ended each (ack, fail, reap, remove) and emptied by the relay."""
        return self._q(queue, "batch_out")

    def once(self, queue: str, call_id: str) -> str:
        """String: a batch callback ``call_id`` was enqueued in this queue (``SET NX``, kept
        for the batch TTL): a replayed send is refused even after the callback ran."""
        return self._q(queue, f"once:{call_id}")

    def batch(self, batch_id: str) -> str:
        """Hash: one batch's record (description, created, total, done, failed, parent,
        callbacks, flags)."""
        return f"{self.prefix}:{{ztq}}:batch:{batch_id}"

    def batch_members(self, batch_id: str) -> str:
        """Hash: member (``queue:id``, or ``@<child batch>``) -> its last applied outcome
        and fence (``outcome TAB fence``; empty while it has not ended)."""
        return f"{self.prefix}:{{ztq}}:batch:{batch_id}:m"

    def batch_order(self, batch_id: str) -> str:
        """List: the members in enqueue order (pages of members, results of a chord)."""
        return f"{self.prefix}:{{ztq}}:batch:{batch_id}:o"

    def batch_results(self, batch_id: str) -> str:
        """Hash: member -> its result JSON (``pass_results`` batches only)."""
        return f"{self.prefix}:{{ztq}}:batch:{batch_id}:r"

    def batch_complete(self, batch_id: str) -> str:
        """List: holds ``complete`` once every member ended: what ``wait()`` blocks on."""
        return f"{self.prefix}:{{ztq}}:batch:{batch_id}:complete"

    def batch_success(self, batch_id: str) -> str:
        """List: holds ``success`` once every member is done (``wait(success=True)``)."""
        return f"{self.prefix}:{{ztq}}:batch:{batch_id}:success"

    @property
    def batches(self) -> str:
        """Zset: batch id -> created (ms): the listing of batches."""
        return f"{self.prefix}:{{ztq}}:batches"

    @property
    def batches_expiry(self) -> str:
        """Zset: finished batch id -> when its keys expire (ms): trims ``batches``."""
        return f"{self.prefix}:{{ztq}}:batches:expiry"

    @property
    def batch_send(self) -> str:
        """List: what the relay still has to do in the global slot: a callback to enqueue
        (``cb TAB batch TAB kind``) or a child batch's end to apply to its parent
        (``up TAB parent TAB member TAB outcome TAB fence``)."""
        return f"{self.prefix}:{{ztq}}:batches:send"

    # -- console logins ----------------------------------------------------------------------
    def login_pair(self, digest: str) -> str:
        """Failed sign-ins of one user name from one client address (``digest``: see
        :func:`login_digest`, of the name and the address)."""
        return f"{self.prefix}:{{ztq}}:login:pair:{digest}"

    def login_user(self, digest: str) -> str:
        """Failed sign-ins of one user name from any address."""
        return f"{self.prefix}:{{ztq}}:login:user:{digest}"

    def login_addr(self, digest: str) -> str:
        """Failed sign-ins from one client address."""
        return f"{self.prefix}:{{ztq}}:login:addr:{digest}"

    def session(self, handle: str) -> str:
        """One console session (``handle``: a digest of its cookie, see
        ``ztq.core.auth.sessions``)."""
        return f"{self.prefix}:{{ztq}}:session:{handle}"

    def token(self, token_id: str) -> str:
        """One console API token (its public id; the secret part is stored as a digest)."""
        return f"{self.prefix}:{{ztq}}:token:{token_id}"

    # -- per worker --------------------------------------------------------------------------
    def worker_cmd(self, worker_id: str) -> str:
        return f"{self.prefix}:{{ztq}}:w:{worker_id}:cmd"

    # -- broadcasts (docs/channels.md): a queue's keys, so they share its slot --------------
    def broadcasts(self, queue: str) -> str:
        """Stream of the broadcasts sent to the queue's workers, capped: each worker reads it
        from its own position (held in the worker), so every worker runs every entry."""
        return self._q(queue, "broadcasts")

    def broadcast(self, queue: str, broadcast_id: str) -> str:
        """One broadcast: when it was sent, the workers it was meant for, each one's run."""
        return self._q(queue, f"broadcast:{broadcast_id}")

    def broadcast_runs(self, queue: str) -> str:
        """Stream of broadcast runs starting and ending (what a waiting sender blocks on)."""
        return self._q(queue, "broadcast-runs")

    def listeners(self, queue: str) -> str:
        """Zset: worker id -> until when (ms) it is known to read the queue's broadcasts."""
        return self._q(queue, "listeners")

    def listeners_joined(self, queue: str) -> str:
        """Hash: worker id -> the newest broadcast when it joined (it runs later ones)."""
        return self._q(queue, "listeners:joined")

    # -- channels (docs/channels.md): each channel is a slot of its own ---------------------
    @property
    def channels(self) -> str:
        """Set of the channel names published to or subscribed to (the console's list)."""
        return f"{self.prefix}:{{ztq}}:channels"

    def _ch(self, channel: str, suffix: str) -> str:
        return f"{self.prefix}:{{ch:{channel}}}:{suffix}"

    def messages(self, channel: str) -> str:
        """A channel's stream; every subscriber is a consumer group of it."""
        return self._ch(channel, "messages")

    def channel_meta(self, channel: str) -> str:
        """A channel's counters and settings: cap, published, dropped, sub:<name> (since)."""
        return self._ch(channel, "meta")

    def channel_room(self, channel: str) -> str:
        """Wake-up tokens for publishers waiting for room in a full channel (a hint, <= 16)."""
        return self._ch(channel, "room")


def login_digest(text: str) -> str:
    """A fixed-size stand-in for a user name or address in a key: any text a client sends
    makes a key of bounded size."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


# -- forgetting a queue (``ztq queue forget``: forget_queue.lua) -----------------------------
def forget_checked(keys: Keys, queue: str) -> list[tuple[str, str]]:
    """(key, what it holds) of every list of a queue's live tasks: all empty, or the queue
    is not forgotten."""
    return [*((keys.ready(queue, p), f"ready tasks ({p.value})") for p in PRIORITIES),
            (keys.delayed(queue), "delayed tasks"), (keys.running(queue), "running tasks"),
            (keys.errors(queue), "errors"), (keys.trash_index(queue), "deletes in the trash"),
            (keys.overflow(queue), "tasks in its overflow"), (keys.hand(queue), "handed tasks"),
            (keys.batch_out(queue), "batch ends not applied"),
            (keys.key_wait(queue), "keys with tasks waiting"),
            (keys.key_run(queue), "keys with tasks running")]  # fmt: skip


def forget_deleted(keys: Keys, queue: str, now_s: float) -> list[str]:
    """The keys a forgotten queue's settings and stats live in (its tasks hash: the finished
    records and error counters; the stats of the minutes and 5-minute slots still kept).
    The rest (a redo's follow set, request ids, a fetch's ids) expire on their own."""
    minute, slot = int(now_s) // 60, int(now_s) // 300
    return [keys.tasks(queue), keys.done(queue), keys.history(queue), keys.wake(queue),
            keys.schedule(queue), keys.fence(queue), keys.paused(queue), keys.config(queue),
            keys.rate(queue), keys.waiter(queue), keys.room(queue), keys.cronlast(queue),
            keys.totals(queue), keys.key_turns(queue), keys.key_state(queue),
            keys.key_due(queue), keys.key_rate(queue), keys.key_paused(queue),
            keys.key_weight(queue), keys.key_used(queue),
            *(keys.stats(queue, minute - i) for i in range(STATS_MINUTES)),
            *(keys.stats5(queue, slot - i) for i in range(STATS_SLOTS))]  # fmt: skip
