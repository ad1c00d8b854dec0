"""The live apps of this process, as the checks that look across them need them: a task
name two apps give to two functions on one Redis and prefix (refused), and the tasks a
worker's modules define on apps other than the one it serves (it says so when it starts).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ztq.core.client.registry import origin
from ztq.core.errors import ConfigError

if TYPE_CHECKING:
    from ztq.core.client.app import App

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
