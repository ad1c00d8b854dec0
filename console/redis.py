"""The console's Redis systems: a :class:`~ztq.core.engine.storage.Storage` per system,
in the registry.

The systems come from ``ztq.redis_url`` / ``ztq.prefix`` (the default system) and
``ztq.systems`` (see :mod:`ztq.console.config`, ``docs/systems.md``). A page of the default
system has the URL it always had (``/queues``); a page of another system has the system in
front (``/s/us/queues``): :func:`system_tween` moves that part of the path into
``SCRIPT_NAME``, so every ``route_path``, form, ``next`` and redirect of the page stays in the
system without knowing about it. An unknown system is a 404, never the default's page
(``/s/<default's name>/...`` is the default's page at its own URL).

- ``request.system``: the :class:`~ztq.core.settings.System` the URL names;
- ``request.storage``: its storage, made the first time a page of it is asked for and kept
  in ``registry.ztq_systems`` (each its own client with make_client's retries and backoff:
  a system that is down answers 503 on its own pages and slows no other);
- ``request.home_storage``: the default system's, which keeps what belongs to the console
  rather than to a system: sessions, sign-in locks, API tokens.

redis-py keeps a connection pool per client, so threads share them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from pyramid.config import Configurator
from pyramid.tweens import EXCVIEW

from ztq.core.engine.connection import make_client
from ztq.core.engine.storage import Storage
from ztq.core.settings import SYSTEM_NAME, System

PREFIX = "/s/"  # /s/<name>/...: a page of the system <name>
_SYSTEM = "ztq.system"
_ROOT = "ztq.script_name"  # SCRIPT_NAME before the system's part
MISSING = "ztq.missing_system"  # the unknown system a URL named


class Systems:
    """Every system of the console by name, with its storage once a page asked for it."""

    def __init__(self, systems: tuple[System, ...]) -> None:
        self.all = systems
        self.default = systems[0]
        self._by_name = {s.name: s for s in systems}
        self._storages: dict[str, Storage] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.all)

    def get(self, name: str) -> System | None:
        return self._by_name.get(name)

    def storage(self, system: System) -> Storage:
        """The system's storage, made on first use (no connection is opened until a command
        needs one; a down Redis fails that command, not this call)."""
        storage = self._storages.get(system.name)
        if storage is None:
            with self._lock:
                storage = self._storages.get(system.name)
                if storage is None:
                    # the console shows what any client wrote: bytes that are not UTF-8 read
                    # as U+FFFD rather than fail the page (a worker's code never sees this)
                    client = make_client(system.redis_url, encoding_errors="replace")
                    storage = Storage(client, prefix=system.prefix, url=system.redis_url)
                    self._storages[system.name] = storage
        return storage

    def base(self, system: System) -> str:
        """The path in front of the system's pages: '' for the default, '/s/<name>'."""
        return "" if system.default else PREFIX + system.name


def system_tween(handler: Callable[[Any], Any], registry: Any) -> Callable[[Any], Any]:
    """``/s/<name>/rest`` -> the page ``/rest`` of system <name>, with ``/s/<name>`` moved
    to ``SCRIPT_NAME``; an unknown name is left in the path, which no route matches: 404."""
    systems: Systems = registry.ztq_systems

    def tween(request: Any) -> Any:
        path = request.path_info
        request.environ[_SYSTEM] = systems.default
        request.environ[_ROOT] = request.script_name
        if path.startswith(PREFIX) or path == PREFIX.rstrip("/"):
            name, _, rest = path[len(PREFIX) :].partition("/")
            system = systems.get(name) if SYSTEM_NAME.match(name) else None
            if system is None:  # no route matches /s/...: the not-found page names it
                request.environ[MISSING] = name[:64]
                return handler(request)
            if not system.default:  # the default's pages keep their own URLs
                request.environ[_SYSTEM] = system
                request.script_name = request.script_name + PREFIX + name
            request.path_info = "/" + rest
        return handler(request)

    return tween


def includeme(config: Configurator) -> None:
    cfg = config.registry.ztq_settings
    systems = cfg.systems or (System("default", cfg.redis_url, cfg.prefix, default=True),)
    registry = config.registry
    registry.ztq_systems = Systems(systems)
    # the default system's storage: the alert thread and the console's own records use it
    registry.ztq_storage = registry.ztq_systems.storage(registry.ztq_systems.default)

    def get_system(request: Any) -> System:
        return request.environ.get(_SYSTEM) or registry.ztq_systems.default  # type: ignore[no-any-return]

    def get_storage(request: Any) -> Storage:
        return request.registry.ztq_systems.storage(request.system)  # type: ignore[no-any-return]

    def get_home_storage(request: Any) -> Storage:
        return request.registry.ztq_storage  # type: ignore[no-any-return]

    def system_path(request: Any, system: System, route: str = "home", **kw: Any) -> str:
        """The path of a page (``route``) of ``system``: a link from one system to another."""
        root = request.environ.get(_ROOT, request.script_name)
        return str(
            request.route_url(route, _app_url=root + registry.ztq_systems.base(system), **kw)
        )

    config.add_request_method(get_system, "system", reify=True)
    config.add_request_method(system_path, "system_path")
    config.add_request_method(get_storage, "storage", reify=True)
    config.add_request_method(get_home_storage, "home_storage", reify=True)
    config.add_tween("ztq.console.redis.system_tween", under=EXCVIEW)
