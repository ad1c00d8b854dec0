"""How the packed path puts a script call on the wire: RESP framing of its arguments and
key lists, and the connections it holds per thread (``scripts.Scripts`` sends them).

Kept apart from the script registry because it is about bytes and sockets, not about which
scripts exist or how a lost script cache is reloaded.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import redis

Op = tuple[str, Sequence[str], Sequence[Any]]  # a script call: (script name, keys, args)


class Unpackable(Exception):
    """An argument the packed path does not frame (redis-py's own path does)."""


def bulk(value: Any) -> bytes:
    """One RESP bulk string (str as UTF-8, int as its digits)."""
    data = value.encode("utf-8") if type(value) is str else str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def frame(args: Sequence[Any]) -> bytes:
    """The arguments as RESP bulk strings: each str as is, each int in decimal (anything
    else: :class:`Unpackable`). They are framed as one str, encoded once when all ASCII
    (ids, JSON payloads as ztq writes them: a batch of 500 tasks frames 3,500 arguments,
    and this halves its cost); else each is encoded, as a bulk string's length counts
    bytes."""
    for value in args:
        if type(value) is not str and type(value) is not int:
            raise Unpackable
    text = "".join([f"${len(v)}\r\n{v}\r\n" if type(v) is str else
                    f"${len(d := str(v))}\r\n{d}\r\n" for v in args])  # fmt: skip
    if text.isascii():
        return text.encode("ascii")
    return b"".join(bulk(v) for v in args)


class KeyList(list[str]):
    """A script's KEYS built once and kept (one per queue and script: ``Tasks._enqueue_keys``):
    the packed path frames it once. Any other key list is framed at each call, so that the
    cache stays as small as the number of queues (a list built per call, cached by its id,
    grew it by one entry per call)."""

    def __init__(self, queue: str, keys: Iterable[str]) -> None:
        super().__init__(keys)
        self.queue = queue  # whose keys (merge_enqueues groups one queue's enqueues by it)


class TailedKeys(Sequence[str]):
    """A :class:`KeyList` followed by keys of one call (an enqueue's request key), without a
    copy of the list: the packed path frames the kept list once and only the tail at each
    call; the other paths read it as the one sequence of keys it is."""

    __slots__ = ("base", "tail")

    def __init__(self, base: KeyList, tail: list[str]) -> None:
        self.base, self.tail = base, tail

    def __len__(self) -> int:
        return len(self.base) + len(self.tail)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        return [*self.base, *self.tail][i]

    def __iter__(self) -> Iterator[str]:
        yield from self.base
        yield from self.tail


# connection classes that speak RESP on their own socket (not fakeredis, a subclass of
# redis.Connection); ztq's own (engine.connection) say so with a class attribute `ztq_resp`
_CONNECTIONS = (
    redis.Connection,
    redis.SSLConnection,
    redis.UnixDomainSocketConnection,
    redis.sentinel.SentinelManagedConnection,
    redis.sentinel.SentinelManagedSSLConnection,
)


class HeldConnections:
    """One connection of each pool per thread, held for the thread's life: the packed path's.

    Taking a connection from a redis-py pool and giving it back costs more client time than
    framing an enqueue (the pool's lock, fork checks, metrics, and a poll of the socket to
    make sure nothing is left to read): measured here, that was a fifth of a one-by-one
    enqueue. A held connection needs none of it: only its own thread uses it, and a call on
    it that did not read every reply (an error, an interrupt) drops it, so it never holds a
    stale reply. A thread's connections close when the thread ends or its pool is collected,
    all of a pool's on :meth:`drop` (``Storage.close``); a forked child starts with none.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._local = threading.local()
        # every thread's held connections, by pool (for drop); weak: a thread's go with it
        self._all: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Any]] = (
            weakref.WeakKeyDictionary()
        )

    def connection(self, pool: Any) -> Any:
        """The calling thread's connection of ``pool`` (connected on its first command)."""
        mine = getattr(self._local, "conns", None)
        if mine is None:
            mine = self._local.conns = weakref.WeakKeyDictionary()
        conn = mine.get(pool)
        if conn is None:
            conn = mine[pool] = pool.connection_class(**pool.connection_kwargs)
            with self._lock:
                self._all.setdefault(pool, weakref.WeakSet()).add(conn)
        return conn

    def drop(self, pool: Any) -> None:
        """Close every thread's held connection of ``pool`` (a thread using one reconnects)."""
        with self._lock:
            conns = list(self._all.get(pool, ()))
        for conn in conns:
            conn.disconnect()


HELD = HeldConnections()


def retries(client: Any) -> bool:
    """The client retries a command after a connection error: a packed call that met one
    is sent again by redis-py's path (which retries further), as redis-py would; a client
    made not to retry sees the error."""
    retry = client.get_retry()
    return retry is None or retry.get_retries() > 0


def plain(client: Any) -> bool:
    """A ``redis.Redis`` on a pool of plain RESP connections, no single shared connection."""
    pool = getattr(client, "connection_pool", None)
    return (
        isinstance(client, redis.Redis)
        and client.connection is None
        and pool is not None
        and (
            getattr(pool.connection_class, "ztq_resp", False)
            or pool.connection_class in _CONNECTIONS
        )
    )
