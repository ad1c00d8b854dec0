"""Middleware: each policy around a task's send and run is one class the executor calls.

``base`` holds :class:`Middleware` (the hooks), :class:`Chain` (how an app calls its
middleware in order) and the :class:`Run`/:class:`Outcome` a hook sees; ``policies`` the
built-in ones every app gets (retries with backoff, time limits, callbacks, history).
A policy written by an application subclasses :class:`Middleware` the same way.

May import: ``ztq.core.errors``, ``ztq.core.states``, the engine and
``ztq.core.client.calls`` (a policy builds the callback it sends). Never ``client.app``:
the app hands itself to a hook.
"""

from ztq.core.middleware.base import Chain, Middleware, Outcome, Run

__all__ = ["Chain", "Middleware", "Outcome", "Run"]
