"""Channels: named streams of messages that many subscribers read, each at its own pace.

Redis in Action 6.5 (pull messaging for many recipients) on Redis Streams: a channel is one
stream, every subscriber one consumer group of it. A subscriber reads every message once,
acknowledges it, and after a restart reads again what it had not acknowledged (then the
new messages): nothing is lost and its place is kept in Redis. A message is trimmed as soon
as every subscriber has acknowledged it (6.6: "deleted once all have read it"), and a
channel holds at most ``cap`` messages: a publisher that finds it full waits for room or
gets :class:`ChannelFull`. Files travel on top of this (:mod:`ztq.core.messaging.files`).

    orders = channel("orders")
    audit = orders.subscribe("audit")      # once: a consumer group, new messages from now on
    orders.publish({"order": 42})
    for msg in audit.read(block=1.0):
        ...
        audit.ack(msg)

Every state change is one call of ``scripts/channel.lua``; see docs/channels.md.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ztq.core.client.apps import app_or_default
from ztq.core.client.calls import encode_json
from ztq.core.engine.features import channel_streams as streams
from ztq.core.engine.keys import check_channel
from ztq.core.engine.storage import Storage
from ztq.core.errors import ChannelFull, InvalidName, InvalidOption

if TYPE_CHECKING:
    from ztq.core.client.app import App

DEFAULT_CAP = 10_000  # most messages a channel holds (not yet acknowledged by everyone)
SUBSCRIBER_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")
STARTS = {"new": "$", "all": "0"}
# the kinds of message, as stored in the field `k` of a stream entry
KINDS = {b"j": "json", b"fb": "file-begin", b"fc": "file-chunk", b"fe": "file-end"}


def check_subscriber(name: str) -> str:
    if not isinstance(name, str) or not SUBSCRIBER_NAME.match(name):
        raise InvalidName(
            f"subscriber name {name!r} is not allowed: 1-200 letters, digits, '_', '.', ':' or '-'"
        )
    return name


@dataclass(frozen=True)
class Message:
    """One message of a channel. ``kind`` is ``json`` (``data``: the value published) or a
    part of a file: ``file-begin`` / ``file-end`` (``data``: a dict), ``file-chunk``
    (``data``: bytes, at ``offset`` of file ``file``)."""

    id: str
    kind: str
    data: Any
    file: str = ""
    offset: int = 0


def decode_message(entry_id: bytes | str, fields: dict[bytes, bytes] | None) -> Message:
    """A stream entry, read without decoding (chunks are bytes), as a :class:`Message`."""
    mid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    if not fields:  # trimmed while it was pending: cannot happen while the group needs it
        return Message(mid, "gone", None)
    kind = KINDS.get(fields.get(b"k", b""), "unknown")
    raw = fields.get(b"d", b"")
    if kind == "file-chunk":
        data: Any = raw
    else:
        try:
            data = json.loads(raw)
        except ValueError:
            kind, data = "unknown", raw
    return Message(mid, kind, data, fields.get(b"f", b"").decode(), int(fields.get(b"o", 0)))


@dataclass(frozen=True)
class SubscriberInfo:
    """A subscriber as the console shows it. ``unread``: messages not delivered to it yet
    (None when Redis does not say: before 7.0); ``pending``: delivered, not acknowledged."""

    name: str
    consumers: int
    pending: int
    unread: int | None
    last_delivered: str
    since: float | None  # epoch seconds it subscribed

    @property
    def lag(self) -> int | None:
        """Messages it has not acknowledged yet: unread plus pending."""
        return None if self.unread is None else self.unread + self.pending


@dataclass(frozen=True)
class ChannelInfo:
    name: str
    held: int  # messages in Redis (not acknowledged by every subscriber)
    memory: int  # bytes the channel's keys use in Redis (MEMORY USAGE)
    cap: int | None
    published: int
    dropped: int  # published while nobody subscribed
    last: float | None  # epoch seconds of the last publish
    subscribers: tuple[SubscriberInfo, ...]


class Channel:
    """A named channel on one of an app's connections (default: the default app's)."""

    def __init__(
        self,
        name: str,
        *,
        app: App | None = None,
        connection: str = "default",
        cap: int = DEFAULT_CAP,
    ) -> None:
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise InvalidOption(f"cap must be an int >= 1, not {cap!r}")
        self.name = check_channel(name)
        self.app, self.connection, self.cap = app, connection, cap
        self._registered = False

    def __repr__(self) -> str:
        return f"<Channel {self.name}>"

    @property
    def storage(self) -> Storage:
        return app_or_default(self.app).connections.get(self.connection)

    def keys(self, storage: Storage | None = None) -> list[str]:
        return streams.channel_keys(storage or self.storage, self.name)

    def _register(self, storage: Storage) -> None:
        """Add the name to the channel index (the console's list), once per object."""
        if not self._registered:
            streams.register_channel(storage, self.name)
            self._registered = True

    # -- publishing --------------------------------------------------------------------------
    def publish(self, data: Any, *, timeout: float = 0.0) -> str | None:
        """Send ``data`` (any JSON value) to every subscriber; returns the message id, or
        None when the channel has no subscriber (the message is dropped: nobody would ever
        read it). A full channel raises :class:`ChannelFull` at once, or after waiting up
        to ``timeout`` seconds for a subscriber to make room."""
        text = encode_json(data, f"a message for channel {self.name}")
        return self.publish_fields([b"k", b"j", b"d", text.encode("utf-8")], timeout=timeout)

    def publish_fields(
        self, fields: Sequence[Any], *, timeout: float = 0.0, cap: int | None = None
    ) -> str | None:
        """Publish one stream entry of raw ``fields`` (name, value, ...); see :meth:`publish`.
        ``cap`` lowers the channel's cap for this call (a file's window)."""
        storage = self.storage
        self._register(storage)
        limit = min(self.cap, cap or self.cap)
        args = ["publish", limit, self.cap, len(fields) // 2, *fields]
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            mid, status = storage.call("channel", self.keys(storage), args)
            if status == "ok":
                return str(mid)
            if status == "dropped":
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelFull(
                    f"channel {self.name!r} holds {limit} messages not yet acknowledged by "
                    f"every subscriber; the slowest: {self._slowest(storage)}"
                )
            streams.wait_for_room(storage, self.name, min(left, 1.0))

    def _slowest(self, storage: Storage) -> str:
        subs = self.info(storage).subscribers
        if not subs:
            return "none (no subscriber left)"
        worst = max(subs, key=lambda s: s.lag if s.lag is not None else s.pending)
        return f"{worst.name} ({worst.pending} read but not acknowledged, {worst.unread} unread)"

    # -- subscribers -------------------------------------------------------------------------
    def subscribe(
        self, name: str, *, consumer: str | None = None, start: str = "new"
    ) -> Subscriber:
        """The subscriber ``name``, made if it does not exist: from the next message on
        (``start="new"``) or from every message the channel holds (``"all"``). An existing
        subscriber keeps its place (a restart resumes where it stopped). ``consumer``
        names this reader inside the subscriber (default: the subscriber's name); several
        processes with their own consumer names share the subscriber's messages."""
        if start not in STARTS:
            raise InvalidOption(f"start must be 'new' or 'all', not {start!r}")
        check_subscriber(name)
        storage = self.storage
        self._register(storage)
        storage.call("channel", self.keys(storage), ["subscribe", name, STARTS[start]])
        return Subscriber(self, name, check_subscriber(consumer or name))

    def unsubscribe(self, name: str) -> bool:
        """Remove a subscriber and its place; what only it still needed is trimmed.
        Returns whether it existed."""
        existed, _ = self.storage.call("channel", self.keys(), ["unsubscribe", name])
        return bool(existed)

    def info(self, storage: Storage | None = None) -> ChannelInfo:
        """The channel's size in Redis and its subscribers (one round trip)."""
        storage = storage or self.storage
        return channel_infos(storage, [self.name])[0]

    def delete(self) -> None:
        """Remove the channel, its messages and its subscribers."""
        streams.delete_channel(self.storage, self.name)


class Subscriber:
    """One subscriber of a channel, read by one consumer (this object)."""

    def __init__(self, channel: Channel, name: str, consumer: str) -> None:
        self.channel, self.name, self.consumer = channel, name, consumer
        self._backlog = "0"  # first what was delivered here before and not acknowledged

    def __repr__(self) -> str:
        return f"<Subscriber {self.name} of {self.channel.name}>"

    def read(self, count: int = 100, block: float | None = None) -> list[Message]:
        """Up to ``count`` messages, in order: first those delivered to this consumer before
        and never acknowledged (a restart resumes there), then new ones, waiting up to
        ``block`` seconds for one (None: do not wait). Acknowledge each with :meth:`ack`."""
        if self._backlog:
            got = self._read(self._backlog, count, None)
            if got:
                self._backlog = got[-1].id
                return got
            self._backlog = ""
        return self._read(">", count, block)

    def reread_after(self, message_id: str) -> None:
        """Let the next :meth:`read` give again the messages read here after
        ``message_id`` and not acknowledged (a caller that stopped in the middle of a batch)."""
        self._backlog = message_id

    def _read(self, after: str, count: int, block: float | None) -> list[Message]:
        channel = self.channel
        entries = streams.read_group(
            channel.storage, channel.name, self.name, self.consumer, after, count, block
        )
        return [decode_message(i, f) for i, f in entries]

    def ack(self, *messages: Message | str) -> int:
        """Acknowledge messages (or ids); returns how many were pending here. Messages every
        subscriber has acknowledged leave Redis in the same call."""
        ids = [m.id if isinstance(m, Message) else m for m in messages]
        if not ids:
            return 0
        acked, _ = self.channel.storage.call(
            "channel", self.channel.keys(), ["ack", self.name, *ids]
        )
        return int(acked)

    def claim(self, idle: float, count: int = 100) -> list[Message]:
        """Take over messages delivered to other consumers of this subscriber and not
        acknowledged for ``idle`` seconds (a reader that died for good), oldest first."""
        channel = self.channel
        entries = streams.claim_idle(
            channel.storage, channel.name, self.name, self.consumer, int(idle * 1000), count
        )
        return [decode_message(i, f) for i, f in entries]

    def info(self) -> SubscriberInfo | None:
        return next((s for s in self.channel.info().subscribers if s.name == self.name), None)


# -- read models: the console's channels page ----------------------------------------------
def channel_names(storage: Storage) -> list[str]:
    return streams.channel_names(storage)


def channel_infos(storage: Storage, names: Sequence[str]) -> list[ChannelInfo]:
    """Size, counters and subscribers of each channel, in two round trips (pipelines)."""
    out = []
    for name, (held, meta, memory, groups) in zip(
        names, streams.channel_stats(storage, names), strict=True
    ):
        since = {f[4:]: float(v) / 1000 for f, v in meta.items() if f.startswith("sub:")}
        subs = tuple(
            SubscriberInfo(
                name=str(g["name"]),
                consumers=int(g["consumers"]),
                pending=int(g["pending"]),
                unread=None if g.get("lag") is None else int(g["lag"]),
                last_delivered=str(g["last-delivered-id"]),
                since=since.get(str(g["name"])),
            )
            for g in groups
        )
        out.append(
            ChannelInfo(
                name=name,
                held=held,
                memory=memory,
                cap=int(meta["cap"]) if "cap" in meta else None,
                published=int(meta.get("published", 0)),
                dropped=int(meta.get("dropped", 0)),
                last=float(meta["last"]) / 1000 if "last" in meta else None,
                subscribers=subs,
            )
        )
    return out


# -- the default app's channels (what `from ztq.core import channel` gives) -----------------
def channel(
    name: str, *, app: App | None = None, connection: str = "default", cap: int = DEFAULT_CAP
) -> Channel:
    """The channel ``name`` (of the default app unless ``app`` is given)."""
    return Channel(name, app=app, connection=connection, cap=cap)


@dataclass(frozen=True)
class Subscription:
    """A task subscribed to a channel (``app.subscribe_task``): workers that serve the task's
    queue read the channel as subscriber ``name`` and turn each JSON message into a run of
    the task, called with the message's value."""

    channel: str
    task: str
    name: str
    start: str = "new"
    connection: str = "default"

    def __post_init__(self) -> None:
        check_channel(self.channel)
        check_subscriber(self.name)
        if self.start not in STARTS:
            raise InvalidOption(f"start must be 'new' or 'all', not {self.start!r}")
