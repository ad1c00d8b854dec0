"""Console login throttling, shared by every console process through Redis.

Failed logins are counted three ways: per user name *from one client address* (the lock a
guesser or a typing operator meets), per client address (any names: one address trying
many names) and per user name from *any* address (a guess spread over many addresses).
Each counter has its own free failures — ``free`` for a name from one address, the higher
``free_addr`` and ``free_user`` for the two wider ones — and each later failure locks what
that counter counts for ``first`` seconds, doubling per failure up to ``longest``. While
any lock that covers an attempt holds, the attempt is refused before its password is
checked — a correct one too — so a guessing run gets one try per lock.

So an outsider who fails from one address locks that name *at that address* (and soon
that address), not the operator signing in from elsewhere: only ``free_user`` failures
of the name from everywhere together lock it everywhere, the price of stopping a guess
spread over many addresses. A counter is forgotten after ``4 * longest`` seconds without
a failure (longer than the longest lock, so waiting one out does not buy a fresh set of
free failures); a successful login clears its name's counters (not its address's: one
good account must not launder guesses at others). One Lua script per step (``login.lua``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ztq.core.engine.features import sign_in
from ztq.core.engine.keys import login_digest
from ztq.core.engine.storage import Storage


@dataclass(frozen=True)
class LoginPolicy:
    free: int = 5  # failures of a name from one address before its first lock
    first: float = 1.0  # seconds of the first lock; doubles with each further failure
    longest: float = 900.0  # the longest lock; counters are remembered 4 times as long
    free_addr: int = 20  # failures from one address (any names) before it is locked
    free_user: int = 50  # failures of a name (any addresses) before it is locked everywhere

    def guesses(self, within: float, free: int | None = None) -> int:
        """The most passwords one counter lets through in ``within`` seconds from a clean
        start, each try made the moment the last lock ran out: with ``free`` failures (by
        default :attr:`free`, one name from one address)."""
        free = self.free if free is None else free
        at, tried = 0.0, 0
        while at <= within:
            tried += 1
            if tried > free:
                at += min(self.longest, self.first * 2 ** (tried - free - 1))
        return tried

    def args(self, mode: str) -> list[object]:
        return [mode, self.free, int(self.first * 1000), int(self.longest * 1000),
                int(self.longest * 4000), self.free_addr, self.free_user]  # fmt: skip


class Locks(NamedTuple):
    pair: float  # seconds the name is locked at this address from now (0: not)
    addr: float  # seconds the client address is locked (any names)
    user: float  # seconds the name is locked at every address

    def describe(self, addr: str) -> str:
        """For the audit log: what this failure locked."""
        return (f"address {addr}: name locked here {self.pair:g}s, address locked "
                f"{self.addr:g}s, name locked everywhere {self.user:g}s")  # fmt: skip


def _keys(storage: Storage, user: str, addr: str) -> list[str]:
    k = storage.keys
    return [k.login_pair(login_digest(f"{user}\n{addr}")), k.login_addr(login_digest(addr)),
            k.login_user(login_digest(user)), k.login_stats]  # fmt: skip


def login_wait(storage: Storage, policy: LoginPolicy, user: str, addr: str) -> tuple[float, int]:
    """Seconds before ``user`` may try again from ``addr`` (0: now), and how many locks of
    the three ran out since the last look (the caller records each unlock once)."""
    wait_ms, ended = storage.call("login", _keys(storage, user, addr), policy.args("check"))
    return int(wait_ms) / 1000, int(ended)


def login_failed(storage: Storage, policy: LoginPolicy, user: str, addr: str) -> Locks:
    """Count a failed login; the locks it started (seconds, 0 for none)."""
    pair, by_addr, by_user = storage.call("login", _keys(storage, user, addr), policy.args("fail"))
    return Locks(int(pair) / 1000, int(by_addr) / 1000, int(by_user) / 1000)


def login_succeeded(storage: Storage, policy: LoginPolicy, user: str, addr: str) -> bool:
    """Clear the name's counters after a successful login; True if that ended a lock."""
    [ended] = storage.call("login", _keys(storage, user, addr), policy.args("ok"))
    return bool(ended)


def login_stats(storage: Storage) -> dict[str, int]:
    """Totals since the counters began: ``failures``, ``locks``, ``unlocks``."""
    raw = sign_in.login_totals(storage)
    return {name: int(raw.get(name, 0)) for name in ("failures", "locks", "unlocks")}
