"""``ztq enqueue``: one call of a task, by name, as the application's code would send it.

A task the CLI can find (registered on the app, or ``module.function`` that imports) is
sent through its own :class:`~ztq.core.client.registry.TaskFunction`: its queue, priority,
retries and other options, hence the same task id as ``fn.delay(*args, **kwargs)`` gives in
the code, so the CLI and the code dedup together. A name it cannot find is sent by name
only when ``--queue`` says where (nothing else would know the task's queue); otherwise it is
a usage error (exit 2). See docs/cli.md, "Enqueueing".
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ztq.core.client.app import App
from ztq.core.client.apps import import_module
from ztq.core.client.calls import TaskCall
from ztq.core.client.registry import TaskFunction
from ztq.core.errors import ConfigError, UnknownTask, ZtqError


def find_task(app: App, name: str) -> TaskFunction[Any, Any] | None:
    """The task ``name`` names: registered on ``app`` under that name, or the task at
    ``module.function`` (the module imported, from the current directory too). None when
    neither; :class:`ConfigError` when a module of the name exists but fails to import."""
    try:
        return app.registry.lookup(name)
    except UnknownTask:
        pass
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            found: Any = import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                continue  # no such module: a shorter one may hold the task
            raise ConfigError(f"cannot import {module_name} for task {name}: {exc}") from exc
        except Exception as exc:  # the module is there but broken: say so, in one line
            raise ConfigError(
                f"cannot import {module_name} for task {name}: {type(exc).__name__}: {exc}"
            ) from exc
        for attr in parts[cut:]:
            found = getattr(found, attr, None)
        if isinstance(found, TaskFunction):
            return found
        try:  # the import registered it (a task given name=... in that module)
            return app.registry.lookup(name)
        except UnknownTask:
            return None
    return None


def cmd_enqueue(args: argparse.Namespace, app: App) -> int:
    """Enqueue ``args.task`` on ``app`` (already connected); prints ``ID OUTCOME``."""
    try:
        call_args, call_kwargs = json.loads(args.args), json.loads(args.kwargs)
    except ValueError as exc:
        print(f"ztq: --args/--kwargs must be JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(call_args, list):
        raise ZtqError(f"--args must be a JSON list, not {args.args}")
    options = {k: v for k, v in (("queue", args.queue), ("delay", args.delay),
               ("priority", args.priority), ("expires", getattr(args, "expires", None)))
               if v is not None}  # fmt: skip
    fn = find_task(app, args.task)
    if fn is not None:
        if fn.app is not app:  # its own app would send it to that app's Redis, not ours
            raise ZtqError(f"task {args.task} is registered on another app than the one "
                           "this command uses: give --app module:attribute")  # fmt: skip
        handle = fn.enqueue(call_args, call_kwargs, **options)
    elif args.queue is None:
        raise ZtqError(
            f"cannot find task {args.task} (not registered, and no module.function of that "
            "name imports): give --queue QUEUE to enqueue it by name"
        )
    else:
        handle = TaskCall(args.task, tuple(call_args), call_kwargs, app=app, **options).enqueue()
    print(f"{handle.id} {handle.outcome}")
    return 0
