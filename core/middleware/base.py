"""Middleware: the seam every policy of ztq plugs into (dramatiq's middleware).

A middleware is an object with some of the hooks of :class:`Middleware`; an app calls the
hooks of its middleware in order (``App(middleware=[...])``, ``app.add_middleware(m)``).
Retries, time limits, callbacks, progress callbacks, result storage and batch commits are
built-in middleware (:mod:`ztq.core.middleware.policies`); the executor only calls the hooks.

Enqueue hooks run in the process that enqueues; the others in the worker (in a process
slot's child for ``on_progress``). A hook that raises a :class:`~ztq.core.errors.ZtqError`
(Redis unreachable) lets it through: the run is not acknowledged and runs again (at least
once). Any other exception in a worker hook is logged with the middleware's name and does
not change the run's outcome; in ``before_enqueue`` it refuses the enqueue with a
:class:`MiddlewareError` naming the middleware and the task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ztq.core.errors import ZtqError

if TYPE_CHECKING:
    from ztq.core.client.app import App
    from ztq.core.client.calls import TaskCall
    from ztq.core.client.handle import TaskHandle

log = logging.getLogger(__name__)

NO_RETRY = -1.0  # a retry_delay answer: decided, this run is not retried


class MiddlewareError(ZtqError):
    """A middleware refused or failed an enqueue; the message names it and the task."""


@dataclass
class Outcome:
    """How a run ended, as the worker classified it."""

    ok: bool
    task: str = "?"
    result: str = ""  # JSON of the return value; '' for None (or when it is not kept)
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    retry_delay: float | None = None  # set when the task raised Retry (-1: its backoff)
    permanent: bool = False  # retrying cannot help: bad payload, unknown task, bad arguments
    # what the task's code raised, with its traceback, for the failure hooks (Sentry, say);
    # None for a failure that raised nothing here (a process slot's child died or was
    # killed) and after a trip over a process slot's pipe, which carries the text only
    exception: BaseException | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the exception: one that cannot be rebuilt in the parent (an
        ``__init__`` with other arguments) would break the pipe, not just the report."""
        return {**self.__dict__, "exception": None}

    @property
    def error(self) -> str:
        return f"{self.error_type}: {self.message}" if self.message else self.error_type


@dataclass
class Run:
    """One run of a task in a worker, as the hooks see it."""

    app: App
    worker: Any  # the ztq.worker.worker.Worker running it
    queue: str
    id: str
    token: int  # the lease's fencing token
    task: str
    failures: int  # failed runs before this one in the series (what `retries` counts)
    thread: str = ""  # the executor thread running it
    opts: dict[str, Any] = field(default_factory=dict)  # retries, timeout, callbacks
    started: float = 0.0  # epoch seconds
    deadline: float | None = None  # soft timeout (epoch seconds), set by TimeLimit
    retry_in: float | None = None  # decided by the retry policy: seconds, None = no retry
    result_ttl: float | None = None  # seconds the finished record is kept (None: the worker's)
    carry: dict[str, str] = field(default_factory=dict)  # for a process slot's child (child_start)
    # the task's arguments as decoded from its payload (empty when it could not be decoded)
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)


class Middleware:
    """Hooks, each a no-op here; override the ones a policy needs."""

    # -- enqueue side ------------------------------------------------------------------------
    def before_enqueue(self, app: App, call: TaskCall) -> TaskCall | None:
        """Called before a call is sent or buffered; return a changed call (e.g. with a
        trace context in its options) or None to keep it; raise to refuse the enqueue."""
        return None

    def after_enqueue(self, app: App, call: TaskCall, handle: TaskHandle) -> None:
        """Called after the call was written to Redis (for a transaction: at its end)."""

    # -- worker side -------------------------------------------------------------------------
    def worker_start(self, worker: Any) -> None:
        """The worker set up (modules imported, heartbeat written), before any task runs."""

    def worker_stop(self, worker: Any) -> None:
        """The worker is stopping, after its executors finished or gave their tasks back."""

    def before_run(self, run: Run) -> None:
        """Before the task's code runs (set ``run.deadline`` for a soft timeout)."""

    def after_run(self, run: Run, outcome: Outcome) -> None:
        """After every run, successful or not, once the outcome was settled."""

    def on_success(self, run: Run, outcome: Outcome) -> None:
        """The run succeeded; called before its ack is sent (``outcome.result`` is what
        the ack stores)."""

    def retry_delay(self, run: Run, outcome: Outcome) -> float | None:
        """Decide whether a failed run is retried: seconds to wait, :data:`NO_RETRY`, or None
        for no opinion. The first middleware (in order) that answers decides; with no
        answer, no retry."""
        return None

    def on_retry(self, run: Run, outcome: Outcome, delay: float) -> None:
        """The failed run will run again in ``delay`` seconds."""

    def on_failure(self, run: Run, outcome: Outcome) -> None:
        """The run failed for good: the task goes to its queue's error list."""

    def on_progress(self, run_context: Any, data: dict[str, Any]) -> None:
        """The running task reported progress (``report_progress``), stored on its record."""

    def child_start(self, run_context: Any, carry: dict[str, str]) -> None:
        """In a process slot's child, before the task's code runs; ``carry`` is what the
        worker-side hooks put in ``run.carry`` (e.g. the run's trace context)."""

    def child_end(self, run_context: Any, outcome: Outcome) -> None:
        """In a process slot's child, after the task's code ran."""

    def on_lease_lost(self, worker: Any, queue: str, task_id: str) -> None:
        """This worker held a task whose lease expired and went to another run."""

    def on_idle(self, worker: Any, thread: str) -> None:
        """An executor found its queues empty (e.g. commit partial batches)."""


HOOKS = tuple(
    name for name, value in vars(Middleware).items() if callable(value) and not name.startswith("_")
)


class Chain:
    """The middleware of an app, with each hook bound to the middleware that implement it,
    so that a hook nobody overrides costs nothing on the hot path."""

    def __init__(self, middleware: Sequence[Middleware] = ()) -> None:
        self.middleware = list(middleware)
        self._by_hook: dict[str, list[Callable[..., Any]]] = {}
        self.rebuild()

    def rebuild(self) -> None:
        self._by_hook = {
            hook: [
                getattr(m, hook)
                for m in self.middleware
                if getattr(type(m), hook, None) is not getattr(Middleware, hook)
            ]
            for hook in HOOKS
        }

    def add(self, m: Middleware, *, before: type[Middleware] | None = None) -> None:
        """Append ``m`` (or put it before the first middleware of class ``before``)."""
        at = len(self.middleware)
        if before is not None:
            at = next((i for i, x in enumerate(self.middleware) if isinstance(x, before)), at)
        self.middleware.insert(at, m)
        self.rebuild()

    def remove(self, m: Middleware) -> None:
        self.middleware = [x for x in self.middleware if x is not m]
        self.rebuild()

    def has(self, hook: str) -> bool:
        return bool(self._by_hook[hook])

    def before_enqueue(self, app: App, call: TaskCall) -> TaskCall:
        for hook in self._by_hook["before_enqueue"]:
            try:
                changed = hook(app, call)
            except ZtqError:
                raise
            except Exception as exc:
                raise MiddlewareError(
                    f"middleware {_name(hook)} refused to enqueue {call.task}: {exc}"
                ) from exc
            if changed is not None:
                call = changed
        return call

    def retry_delay(self, run: Run, outcome: Outcome) -> float | None:
        for hook in self._by_hook["retry_delay"]:
            delay = self._guarded(hook, run, outcome)
            if delay is not None:
                return None if delay < 0 else float(delay)  # NO_RETRY decides too
        return None

    def notify(self, hook_name: str, *args: Any) -> None:
        """Call every implementation of a notification hook, in order (``_guarded``
        inlined: three notifications a run, two hooks each, on the worker's hot path)."""
        for hook in self._by_hook[hook_name]:
            try:
                hook(*args)
            except ZtqError:
                raise  # Redis unreachable: the run is not acknowledged and runs again
            except Exception:
                log.exception("middleware %s failed in %s", _name(hook), hook.__name__)

    @staticmethod
    def _guarded(hook: Callable[..., Any], *args: Any) -> Any:
        try:
            return hook(*args)
        except ZtqError:
            raise  # Redis unreachable: the run is not acknowledged and runs again
        except Exception:
            log.exception("middleware %s failed in %s", _name(hook), hook.__name__)
            return None


def _name(hook: Callable[..., Any]) -> str:
    owner = getattr(hook, "__self__", None)
    return type(owner).__name__ if owner is not None else getattr(hook, "__qualname__", "?")
