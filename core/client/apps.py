"""The apps of this process: the default app's slot, the one piece of global state ztq
keeps, and the live apps, as the checks that look across them need them.

``fn.delay()``, ``TaskHandle`` and ``channel()`` work without an app: they use the default
app, made on first use. The modules that need it sit below :mod:`ztq.core.client.app` (the
app imports them), so they reach the default through this slot instead of importing the
app: ``client.app`` fills the slot with the way to make one when it is imported, which
``import ztq.core`` always does first.

Across the live apps: a task name two apps give to two functions on one Redis and prefix
(refused), and the tasks a worker's modules define on apps other than the one it serves
(it says so when it starts). And the app a command names (``--app module:attribute``).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from ztq.core.errors import ConfigError

if TYPE_CHECKING:
    from ztq.core.client.app import App

_make: Callable[[], App] | None = None
_default: App | None = None
_lock = threading.Lock()


def provide(make: Callable[[], App]) -> None:
    """Say how the default app is made (``client.app`` calls this once, on import)."""
    global _make
    _make = make


def default_app() -> App:
    """The app the module-level functions act on, made on first use."""
    global _default
    if _default is None:
        with _lock:
            if _default is None:
                if _make is None:  # only when ztq.core.client.app was never imported
                    raise RuntimeError("import ztq.core before using the default app")
                _default = _make()
    return _default


def app_or_default(app: App | None) -> App:
    """``app``, or the default app when None."""
    return default_app() if app is None else app


# every App alive in the process, only to find two that share a Redis and a prefix and give
# one task name two functions (check_shared_names); not a registry of anything else
LIVE: weakref.WeakSet[App] = weakref.WeakSet()


def check_shared_names(app: App, names: list[str] | None = None) -> None:
    """Refuse a task name that two apps of this process give to two functions while they
    share a Redis and a key prefix: their queues are one, so a worker of either would run
    the other's payloads with its own function. Apps with their own prefix (or Redis) may
    reuse names freely. Called when a task is registered and when a worker starts."""
    mine = app.registered()
    wanted = names if names is not None else list(mine)
    where = app.connections.namespace()
    for other in list(LIVE):
        if other is app:
            continue
        theirs = other.registered()
        clash = [n for n in wanted if n in theirs and origin(theirs[n].fn) != origin(mine[n].fn)]
        if clash and other.connections.namespace() == where:
            name = clash[0]
            raise ConfigError(
                f"task name {name!r} of app {app.name!r} ({origin(mine[name].fn)}) is a task "
                f"of app {other.name!r} too ({origin(theirs[name].fn)}), on the same Redis and "
                f"prefix {where[1]!r}: a worker of either would run the other's tasks with its "
                "own function; give one app its own prefix=..., or the task another name=..."
            )


def tasks_elsewhere(app: App, modules: Iterable[str]) -> list[tuple[str, App, list[str], str]]:
    """The tasks that ``modules`` (or their submodules) define on live apps other than
    ``app``, under names ``app`` does not know: ``(module, that app, task names, where that
    app is as module:attribute or '')``, by module then app name. A worker serving ``app``
    would fail every run of them with UnknownTask; it says so when it starts."""
    mine = app.registered()
    out: list[tuple[str, App, list[str], str]] = []
    for module in modules:
        for other in sorted((a for a in list(LIVE) if a is not app), key=lambda a: a.name):
            theirs = other.registered()
            names = sorted(
                name
                for name, tf in theirs.items()
                if name not in mine
                and (tf.fn.__module__ == module or tf.fn.__module__.startswith(module + "."))
            )
            if not names:
                continue
            homes = dict.fromkeys([module, *(theirs[n].fn.__module__ for n in names)])
            found = (f"{m}:{attr}" for m in homes if m in sys.modules
                     for attr, value in vars(sys.modules[m]).items() if value is other)  # fmt: skip
            spec = next(found, "")
            out.append((module, other, names, spec))
    return out


def origin(f: Callable[..., Any]) -> str:
    code = getattr(f, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code else ""
    return f"{f.__module__}.{getattr(f, '__qualname__', f)} {where}".strip()


# -- the app a command names -----------------------------------------------------------------
def import_module(name: str) -> Any:
    """Import a module of the user's project, from the current directory too (as rq and
    celery do: ``ztq worker`` is started in the project's folder)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(name)


def load_app(spec: str) -> App:
    """The app named by ``module:attribute`` (``ztq worker --app myproj.tasks:app``)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"app {spec!r} must be given as module:attribute, e.g. myproj.tasks:app")
    try:
        module = import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import the module of app {spec!r}: {exc}") from exc
    app = getattr(module, attr, None)
    if app not in LIVE:  # every App is, from its __init__ on
        raise ConfigError(f"{spec} is not a ztq.core.App (found {type(app).__name__})")
    return cast("App", app)  # in LIVE: an App


def connection_flags(
    app: App | None, url: str | None, prefix: str | None
) -> tuple[str | None, str | None]:
    """The Redis URL and prefix flags: those given (command line), else the app's own."""
    if app is None:
        return url, prefix
    return url or app.redis_url, prefix or app.prefix
