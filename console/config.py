"""The console's settings: declared in :mod:`ztq.console.settings`, resolved by
:mod:`ztq.core.settings`, then checked here.

One rule for every setting: environment > ini (the Pyramid settings of ``[app:main]``) >
default; see ``docs/settings.md`` for the table. The console reads ``ztq.redis_url``,
``ztq.prefix`` and ``ztq.console.*`` (environment ``ZTQ_REDIS_URL``, ``ZTQ_PREFIX``,
``ZTQ_CONSOLE_<NAME>``). Served by ``pserve app.ini``, it also reads the worker section of
the same file (``[ztq:worker]``) and refuses a Redis URL or prefix that differs from
``[app:main]``: the console and a worker reading one file must look at the same keys.

``ztq.systems`` names more Redis systems the console watches (``NAME URL [PREFIX]`` a line,
see ``docs/systems.md``); the one of ``ztq.redis_url`` / ``ztq.prefix`` is the default
system, which also keeps the sessions, sign-in locks and API tokens.

``ztq.console.users`` holds one user a line, ``NAME ROLE HASH`` (``ZTQ_CONSOLE_USERS`` may
separate users with ``;`` too); ROLE is ``viewer`` or ``operator``; HASH comes from
``ztq hash-password``. ``ztq.console.sso_roles`` maps groups the same way, ``GROUP ROLE``.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ztq.console.settings import CONSOLE, TABLE
from ztq.core import settings as ztq_settings
from ztq.core.auth.logins import LoginPolicy
from ztq.core.auth.passwords import is_valid_hash
from ztq.core.auth.sessions import ROLES, SessionPolicy
from ztq.core.auth.tokens import StaticToken
from ztq.core.errors import ConfigError
from ztq.core.settings import ConnectionSettings, System, systems_of

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
USER_NAME = re.compile(r"^[A-Za-z0-9_.@\-]{1,64}$")
# Secrets that appear in docs, samples and tutorials: refusing them keeps a copied example
# config from signing sessions with a secret everybody knows.
KNOWN_DEFAULTS = {
    "changeme",
    "change-me",
    "change_me",
    "changethis",
    "secret",
    "seekrit",
    "itsaseekreet",
    "sosecret",
    "supersecret",
    "password",
    "development",
    "dev",
    "test",
    "ztq",
    "console",
    "default",
    "replace-me",
    "your-secret-here",
}
MIN_SECRET = 16


@dataclass(frozen=True)
class User:
    name: str
    role: str
    hash: str = field(repr=False)

    @property
    def can_operate(self) -> bool:
        return self.role == "operator"


@dataclass(frozen=True)
class SSO:
    """Trust an authenticating reverse proxy's identity headers (from trusted proxies only)."""

    header: str  # names the user, e.g. X-Forwarded-User
    groups_header: str  # the user's groups, comma separated
    roles: dict[str, str]  # group (or '*') -> role

    def role_of(self, groups: list[str]) -> str | None:
        """The highest role any of ``groups`` (or ``*``) gives; None: no access."""
        granted = {self.roles[g] for g in [*groups, "*"] if g in self.roles}
        for role in reversed(ROLES):
            if role in granted:
                return role
        return None


@dataclass(frozen=True)
class ConsoleSettings:
    redis_url: str  # the default system's
    prefix: str
    secret: str = field(repr=False)
    users: dict[str, User] = field(repr=False)
    tokens: dict[str, StaticToken] = field(default_factory=dict, repr=False)  # by token id
    secure_cookies: bool = False
    sessions: SessionPolicy = SessionPolicy()
    proxies: tuple[Network, ...] = ()
    sso: SSO | None = None
    lost_after: float = 30.0
    page_size: int = 50
    bulk_batch: int = 500
    bulk_seconds: float = 0.5
    login: LoginPolicy = LoginPolicy()
    # every system watched, the default first (see ztq.core.settings.systems_of)
    systems: tuple[System, ...] = ()

    def system(self, name: str) -> System | None:
        return next((s for s in self.systems if s.name == name), None)


def check_secret(secret: str) -> str:
    """The secret if it is usable; a :class:`ConfigError` that says what to do otherwise."""
    secret = (secret or "").strip()
    how = (
        "set ztq.console.secret in the ini or ZTQ_CONSOLE_SECRET to a long random string, "
        'e.g. python -c "import secrets; print(secrets.token_urlsafe(32))"'
    )
    if not secret:
        raise ConfigError(f"the console has no secret to sign sessions: {how}")
    if secret.lower() in KNOWN_DEFAULTS or secret.lower().startswith(("change", "replace")):
        raise ConfigError(f"ztq.console.secret is a well-known default: {how}")
    if len(secret) < MIN_SECRET:
        raise ConfigError(f"ztq.console.secret is shorter than {MIN_SECRET} characters: {how}")
    return secret


INI_LINE = re.compile(r"^(?P<path>.+):(?P<line>\d+)$")


def _locator(source: str) -> Callable[[str], str | None]:
    """Where each entry of a setting is written, in order: ``source`` is where the setting
    came from; when it is an ini file's line (``app.ini:12``, the key's), an entry is found
    on that line or after it, after the previous entry, and named by its own line. None
    otherwise (the environment, Pyramid settings without a file), or when not found."""
    match = INI_LINE.match(source)
    path = Path(match["path"]) if match else None
    if match is None or path is None or not path.is_file():
        return lambda entry: None
    lines = path.read_text(encoding="utf-8").splitlines()
    cursor = [max(int(match["line"]) - 1, 0), 0]  # line index, column

    def locate(entry: str) -> str | None:
        for index in range(cursor[0], len(lines)):
            column = lines[index].find(entry, cursor[1] if index == cursor[0] else 0)
            if column >= 0:
                cursor[:] = [index, column + len(entry)]
                return f"{path}:{index + 1}"
        return None

    return locate


def _entries(
    text: str, setting: str, shape: str, source: str = ""
) -> Iterator[tuple[str, list[str]]]:
    """The entries of a one-entry-a-line setting (``;`` separates them too; blank lines and
    ``#`` comments skipped) as (where, fields), each with as many fields as ``shape`` has.

    ``where`` names the entry's own line when ``source`` (where the setting came from) is an
    ini file (``app.ini:14: ztq.console.users``), else the source and the entry's number
    (``environment variable ZTQ_CONSOLE_USERS: ztq.console.users entry 2``).
    """
    locate = _locator(source)
    count = 0
    for line in re.split(r"[\n;]", text or ""):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        count += 1
        parts = line.split()
        at = locate(line)
        if at is not None:
            where = f"{at}: ztq.console.{setting}"
        else:
            where = f"{source + ': ' if source else ''}ztq.console.{setting} entry {count}"
        if len(parts) != len(shape.split()):
            raise ConfigError(f"{where} must be '{shape}', found {len(parts)} fields")
        yield where, parts


def _role(where: str, role: str) -> str:
    if role not in ROLES:
        raise ConfigError(f"{where}: role {role!r} must be one of {', '.join(ROLES)}")
    return role


def parse_users(text: str, source: str = "") -> dict[str, User]:
    """Parse ``NAME ROLE HASH`` lines; an error names the user and, when ``source`` is an
    ini line (the key's, as resolved), the user's own line of that file."""
    users: dict[str, User] = {}
    for at, (name, role, hashed) in _entries(text, "users", "NAME ROLE HASH", source):
        where = f"{at}, user {name!r}"
        if not USER_NAME.match(name):
            raise ConfigError(f"{at}: user name {name!r} is not allowed")
        _role(where, role)
        if not is_valid_hash(hashed):
            raise ConfigError(f"{where}: the hash is not from 'ztq hash-password'")
        if name in users:
            raise ConfigError(f"{where}: the user is listed twice")
        users[name] = User(name, role, hashed)
    return users


def parse_tokens(text: str, source: str = "") -> dict[str, StaticToken]:
    """Parse ``NAME ROLE ID SHA256`` lines (from ``static_token``) -> {id: token}."""
    tokens: dict[str, StaticToken] = {}
    for at, (name, role, token_id, digest) in _entries(text, "tokens", "NAME ROLE ID SHA256",
                                                       source):  # fmt: skip
        where = f"{at}, token {name!r}"
        _role(where, role)
        if not re.fullmatch(r"[0-9a-f]{12}", token_id):
            raise ConfigError(f"{where}: {token_id!r} is not a token id (12 hex digits)")
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ConfigError(f"{where}: {digest[:16]!r}... is not a SHA-256 (64 hex digits)")
        if token_id in tokens:
            raise ConfigError(f"{where}: the token is listed twice")
        tokens[token_id] = StaticToken(name, role, digest)
    return tokens


def parse_proxies(text: str) -> tuple[Network, ...]:
    """``10.0.0.5 10.1.0.0/16 ::1`` -> networks; a bad entry is named."""
    networks = []
    for entry in text.replace(",", " ").split():
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ConfigError(
                f"ztq.console.trusted_proxies: {entry!r} is not an address or network"
            ) from None
    return tuple(networks)


def parse_roles(text: str, source: str = "") -> dict[str, str]:
    """Parse ``GROUP ROLE`` lines -> {group: role}; errors name the group and its line."""
    return {
        group: _role(f"{where}, group {group!r}", role)
        for where, (group, role) in _entries(text, "sso_roles", "GROUP ROLE", source)
    }


def header_name(text: str) -> str:
    text = text.strip()
    if text and not HEADER_NAME.match(text):
        raise ConfigError(f"{text!r} is not an HTTP header name (letters, digits, '-')")
    return text


def make_sso(header: str, groups_header: str, roles: dict[str, str], proxies: tuple) -> SSO | None:
    if not header:
        return None
    if not proxies:
        raise ConfigError(
            "ztq.console.sso_header is set but ztq.console.trusted_proxies is empty: name the "
            "addresses of the proxy that sets it, or anybody could send the header"
        )
    if not roles:
        raise ConfigError(
            "ztq.console.sso_header is set but ztq.console.sso_roles maps no group to a role: "
            "add 'GROUP ROLE' lines ('* viewer' gives every signed-in user the viewer role)"
        )
    return SSO(header, groups_header or "X-Forwarded-Groups", roles)


def login_policy(got: Any, checked: Any) -> LoginPolicy:
    """The sign-in throttle of the settings: the wider limits (an address, a name from
    anywhere) are never below the limit of a name from one address."""
    free = got["console.login_attempts"].value

    def at_least(name: str) -> Any:
        def check(value: int) -> int:
            if value < free:
                raise ConfigError(f"{name} ({value}) must be at least console.login_attempts "
                                  f"({free}): it is the wider limit")  # fmt: skip
            return value

        return checked(name, check)

    return LoginPolicy(
        free=free,
        longest=got["console.login_lock_max"].value,
        free_addr=at_least("console.login_address_attempts"),
        free_user=at_least("console.login_user_attempts"),
    )


def load(
    settings: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
) -> ConsoleSettings:
    """Resolve and validate the console's settings; ``settings`` is the ini (Pyramid's).

    ``path`` is the ini file the settings came from (``global_config["__file__"]``): errors
    then name its lines, and its worker section must agree on the Redis URL and prefix.
    """
    file = Path(path) if path else None
    ini = ztq_settings.app_values(settings, TABLE, file)
    if file is not None and file.is_file():
        worker = ztq_settings.read_ini(file, TABLE).worker
        ini = ztq_settings.merge(
            ini, {k: worker[k] for k in ztq_settings.CONNECTION if k in worker}, TABLE
        )
    got = ztq_settings.resolve(TABLE, CONSOLE, environ=environ, ini=ini)

    def checked(name: str, check: Any) -> Any:
        resolved = got[name]
        try:
            return check(resolved.value)
        except ConfigError as exc:
            if resolved.source == "default":
                raise
            raise ConfigError(f"{resolved.source}: {exc}") from None

    def lines(name: str, parse_lines: Any) -> Any:
        """A one-entry-a-line setting: its errors name the entry's own line (or number)."""
        resolved = got[name]
        return parse_lines(resolved.value, "" if resolved.source == "default" else resolved.source)

    secret = checked("console.secret", check_secret)
    users = lines("console.users", parse_users)
    proxies = checked("console.trusted_proxies", parse_proxies)
    sso = make_sso(
        checked("console.sso_header", header_name),
        checked("console.sso_groups_header", header_name),
        lines("console.sso_roles", parse_roles),
        proxies,
    )
    if not users and sso is None:
        raise ConfigError(
            "the console has no users: add 'NAME ROLE HASH' lines to ztq.console.users "
            "(or ZTQ_CONSOLE_USERS); ROLE is viewer or operator, HASH from 'ztq hash-password'"
        )
    default = ConnectionSettings(got["redis_url"].value, got["prefix"].value)
    return ConsoleSettings(
        redis_url=default.redis_url,
        prefix=default.prefix,
        systems=systems_of(default, got["systems"]),
        secret=secret,
        users=users,
        tokens=lines("console.tokens", parse_tokens),
        secure_cookies=got["console.secure_cookies"].value,
        sessions=SessionPolicy(
            idle=got["console.session_idle_minutes"].value * 60,
            absolute=got["console.session_hours"].value * 3600,
        ),
        proxies=proxies,
        sso=sso,
        lost_after=got["console.lost_after"].value,
        page_size=got["console.page_size"].value,
        bulk_batch=got["console.bulk_batch"].value,
        bulk_seconds=got["console.bulk_seconds"].value,
        login=login_policy(got, checked),
    )
