"""The console's settings (``console.*``): declared next to the console that reads them and
resolved by :func:`ztq.core.settings.resolve`; :mod:`ztq.console.config` checks the values
further (secrets, users, proxies, SSO) and builds :class:`~ztq.console.config.ConsoleSettings`.

``console.lost_after`` is core's (the alerts read it too): see :mod:`ztq.core.settings.table`.
"""

from __future__ import annotations

from ztq.core.settings import CONNECTION, Setting, boolean, by_name, number, text
from ztq.core.settings import SETTINGS as CORE

SETTINGS: tuple[Setting, ...] = (
    Setting("console.secret", text, "", "keys the session handles in Redis (changing it ends "
            "every session); the console refuses to start without a long random one",
            secret=True),
    Setting("console.users", text, "", "one 'NAME ROLE HASH' a line (';' separates them "
            "too); the console refuses to start without users unless SSO is set",
            secret=True),
    Setting("console.tokens", text, "", "API tokens declared here (one 'NAME ROLE ID "
            "SHA256' a line, ';' separates them too): they survive a Redis that restarts "
            "empty; docs/console.md says how to make one", secret=True),
    Setting("console.secure_cookies", boolean, False, "cookies over HTTPS only"),
    Setting("console.session_hours", number(0.1, 24 * 30), 12.0,
            "a session ends this long after its sign-in (hours)"),
    Setting("console.session_idle_minutes", number(1, 24 * 60 * 30), 60.0,
            "a session ends after this long without a request (minutes)"),
    Setting("console.trusted_proxies", text, "", "addresses or networks of reverse proxies "
            "(space separated): only they may send X-Forwarded-For and the SSO headers"),
    Setting("console.sso_header", text, "", "header naming the user that the authenticating "
            "proxy sets, e.g. X-Forwarded-User (empty: no SSO)"),
    Setting("console.sso_groups_header", text, "X-Forwarded-Groups",
            "header with the user's groups (comma separated)"),
    Setting("console.sso_roles", text, "", "one 'GROUP ROLE' a line (';' separates them "
            "too): the role of SSO users in GROUP; '*' matches every user"),
    Setting("console.page_size", number(5, 500, whole=True), 50, "rows per page"),
    Setting("console.bulk_batch", number(1, 10_000, whole=True), 500,
            "tasks per script call of a bulk action"),
    Setting("console.bulk_seconds", number(0, 30), 0.5,
            "seconds a bulk request works before it shows progress"),
    Setting("console.login_attempts", number(1, 100, whole=True), 5,
            "failed logins of a user name from one client address before the first lock "
            "of that name at that address"),
    Setting("console.login_address_attempts", number(1, 10_000, whole=True), 20,
            "failed logins from one client address, any names, before the address is "
            "locked (at least login_attempts)"),
    Setting("console.login_user_attempts", number(1, 10_000, whole=True), 50,
            "failed logins of a user name from all addresses together before the name is "
            "locked everywhere (at least login_attempts)"),
    Setting("console.login_lock_max", number(1, 86400), 900.0,
            "the longest login lock (seconds; locks start at 1 s and double per failure)"),
)  # fmt: skip
TABLE = by_name(CORE, SETTINGS)  # the console's and core's
# what the console resolves (its order: the connection, the systems, then its own)
CONSOLE = (*CONNECTION, "systems", *(s for s in TABLE if s.startswith("console.")))
