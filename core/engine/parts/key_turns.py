"""Key turns, the part ``storage.key_turns`` of :class:`~ztq.core.engine.storage.Storage`:
the operators' side of keyed tasks (docs/queue-controls.md, "Per-key limits and fair
turns"): the busiest keys of a queue (waiting, running, held by a limit or a pause) and the
pause of one key. The state moves are the scripts' (``_keyed.lua``, ``key_pause.lua``);
what is here reads the counts they keep, bounded by ``top``: never a pass over every key.
"""

from __future__ import annotations

from dataclasses import dataclass

from ztq.core.engine.queue_limits import check_key
from ztq.core.engine.transport import Transport
from ztq.core.errors import InvalidOption

# a key's state in the rotation (_keyed.lua): why it is not taking turns now
HELD = {"c": "running limit", "t": "rate limit", "p": "paused"}


@dataclass(frozen=True)
class KeyStat:
    """One key of a queue as the pages show it."""

    key: str
    waiting: int
    running: int
    held: str  # '' (taking turns or idle), 'running limit', 'rate limit' or 'paused'
    weight: int = 1  # tasks it takes a turn (an operator's setting)


@dataclass(frozen=True)
class KeyTotals:
    """A queue's keyed tasks: the busiest keys and what the others add up to."""

    top: list[KeyStat]
    keys_waiting: int  # keys with tasks waiting
    waiting: int  # keyed tasks waiting, all keys
    running: int  # keyed leases, all keys

    @property
    def other_waiting(self) -> int:
        return self.waiting - sum(k.waiting for k in self.top)

    @property
    def other_running(self) -> int:
        return self.running - sum(k.running for k in self.top)


class KeyTurns:
    """The busiest keys of a queue, the pause of one key and its weight."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.keys = transport.keys

    def pause_key(self, queue: str, key: str, on: bool = True) -> None:
        """Pause (``on``) or resume one key of ``queue``: its tasks wait while the other
        keys take their turns; resumed, an idle executor is woken for it."""
        self.transport.call(
            "key_pause", [self.keys.tasks(queue)], ["1" if on else "0", check_key(key)]
        )

    def weigh_key(self, queue: str, key: str, weight: int) -> None:
        """Give one key of ``queue`` a weight: it takes ``weight`` tasks in a row each turn,
        the other keys one (1 clears it). Kept until changed, with or without tasks."""
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 1000:
            raise InvalidOption(f"a key's weight is an int from 1 to 1000, not {weight!r}")
        self.transport.call("key_weight", [self.keys.tasks(queue)], [weight, check_key(key)])

    def key_totals(self, queue: str, top: int = 10) -> KeyTotals:
        """The ``top`` keys by tasks waiting, then the keys running that are not among them
        (at most one per lease: bounded by the fleet's threads), with the totals. Three
        round trips at most, whatever the number of keys."""
        k = self.keys
        with self.transport.guard():
            pipe = self.transport.client.pipeline(transaction=False)
            pipe.zrevrange(k.key_wait(queue), 0, top - 1, withscores=True)
            pipe.zrange(k.key_run(queue), 0, -1, withscores=True)
            pipe.zcard(k.key_wait(queue))
            pipe.hget(k.tasks(queue), "#keyed")
            waits, runs, keys_waiting, total = pipe.execute()
            waiting = {_s(key): int(n) for key, n in waits}
            running = {_s(key): int(n) for key, n in runs}
            names = list(waiting) + sorted(set(running) - set(waiting), key=lambda x: -running[x])
            names = names[:top]
            pipe = self.transport.client.pipeline(transaction=False)
            if names:
                pipe.hmget(k.key_state(queue), names)
                pipe.hmget(k.key_weight(queue), names)
            for name in names:
                pipe.sismember(k.key_paused(queue), name)
            got = pipe.execute() if names else [[], []]
        states, weights, paused = got[0], got[1], got[2:]
        stats = []
        for i, name in enumerate(names):
            held = "paused" if paused[i] else HELD.get(_s(states[i] or ""), "")
            if held == "paused" or waiting.get(name):
                pass
            elif held:  # no task waits: nothing is held back
                held = ""
            weight = int(weights[i] or 1)
            stats.append(KeyStat(name, waiting.get(name, 0), running.get(name, 0), held, weight))
        return KeyTotals(stats, int(keys_waiting), int(total or 0), sum(running.values()))


def _s(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
