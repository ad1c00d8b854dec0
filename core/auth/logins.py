"""Console login throttling, shared by every console process through Redis.

Failed logins are counted per user name and per client address. The first ``free``
failures cost nothing; each later one locks that name (and that address) for ``first``
seconds, doubling per failure up to ``longest``. While either is locked every attempt is
refused before its password is checked — a correct one too — so a guessing run gets one
try per lock. A counter is forgotten after ``4 * longest`` seconds without a failure
(longer than the longest lock, so waiting one out does not buy a fresh set of free
failures: a steady guesser gets one try per ``longest``); a successful login clears its
user's counter (not its address's: one good account must not launder guesses at others).
One Lua script per step (``login.lua``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ztq.core.engine.keys import login_digest
from ztq.core.engine.storage import Storage


@dataclass(frozen=True)
class LoginPolicy:
    free: int = 5  # failures before the first lock
    first: float = 1.0  # seconds of the first lock; doubles with each further failure
    longest: float = 900.0  # the longest lock; counters are remembered 4 times as long

    def guesses(self, within: float) -> int:
        """The most passwords one user name (or one client address) can try in ``within``
        seconds from a clean start, each try made the moment the last lock ran out."""
        at, tried = 0.0, 0
        while at <= within:
            tried += 1
            if tried > self.free:
                at += min(self.longest, self.first * 2 ** (tried - self.free - 1))
        return tried

    def args(self, mode: str) -> list[object]:
        return [mode, self.free, int(self.first * 1000), int(self.longest * 1000),
                int(self.longest * 4000)]  # fmt: skip


class Locks(NamedTuple):
    user: float  # seconds the user name is locked from now (0: not)
    addr: float  # seconds the client address is locked from now


def _keys(storage: Storage, user: str, addr: str) -> list[str]:
    k = storage.keys
    return [k.login_user(login_digest(user)), k.login_addr(login_digest(addr)), k.login_stats]


def login_wait(storage: Storage, policy: LoginPolicy, user: str, addr: str) -> tuple[float, int]:
    """Seconds before ``user`` may try again from ``addr`` (0: now), and how many locks of
    the two ran out since the last look (the caller records each unlock once)."""
    wait_ms, ended = storage.call("login", _keys(storage, user, addr), policy.args("check"))
    return int(wait_ms) / 1000, int(ended)


def login_failed(storage: Storage, policy: LoginPolicy, user: str, addr: str) -> Locks:
    """Count a failed login; the locks it started (seconds, 0 for none)."""
    user_ms, addr_ms = storage.call("login", _keys(storage, user, addr), policy.args("fail"))
    return Locks(int(user_ms) / 1000, int(addr_ms) / 1000)


def login_succeeded(storage: Storage, policy: LoginPolicy, user: str, addr: str) -> bool:
    """Clear the user's counter after a successful login; True if that ended a lock."""
    [ended] = storage.call("login", _keys(storage, user, addr), policy.args("ok"))
    return bool(ended)


def login_stats(storage: Storage) -> dict[str, int]:
    """Totals since the counters began: ``failures``, ``locks``, ``unlocks``."""
    with storage.guard():
        raw = storage.client.hgetall(storage.keys.login_stats)
    return {name: int(raw.get(name, 0)) for name in ("failures", "locks", "unlocks")}
