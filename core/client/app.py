"""The application object: one ztq app owns its Redis connections, its task registry, its
cron schedule and its transaction policy (the role of huey's ``Huey``, Celery's ``Celery``).

    from ztq.core import App

    app = App("shop", redis_url="redis://cache:6379/2", prefix="shop")

    @app.task(queue="mail", retries=3)
    def send_mail(to: str) -> None: ...

Two apps with different prefixes or Redis URLs live in one process without seeing each
other's tasks. The module-level ``task``, ``connect``, ``ping``, ``transaction``,
``add_cron`` ... act on the *default app*, made on first use: code written without an app
keeps working, and the default app is the only process-wide state ztq keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from ztq.core.client import apps
from ztq.core.client.batch import Batch
from ztq.core.client.calls import TaskCall
from ztq.core.client.cron import DEFAULT_GRACE, CronEntry, CronSchedule, check_cron_call
from ztq.core.client.enqueue import send as _send
from ztq.core.client.handle import TaskHandle
from ztq.core.client.handle import aping as _aping
from ztq.core.client.handle import ping as _ping
from ztq.core.client.options import (
    TaskOptions,
    check_expires,
    check_priority,
    refuse_unknown_options,
    task_keying,
)
from ztq.core.client.registry import Registry, TaskFunction
from ztq.core.engine.connection import Connections
from ztq.core.engine.queue_limits import KEEP, Keep
from ztq.core.engine.storage import Storage
from ztq.core.errors import ConfigError, ZtqError
from ztq.core.messaging.channels import Subscription
from ztq.core.middleware.base import Chain, Middleware
from ztq.core.middleware.policies import default_middleware
from ztq.core.settings.resolver import parse, resolve
from ztq.core.settings.table import BY_NAME
from ztq.core.states import Priority

P = ParamSpec("P")
R = TypeVar("R")


class App:
    """One ztq application.

    ``redis_url`` and ``prefix`` are the app's own settings; they count as flags (see
    ``docs/settings.md``): when not given, ``ZTQ_REDIS_URL`` / ``ZTQ_PREFIX`` then the
    defaults are used, resolved when the app first talks to Redis (never at import time).
    """

    def __init__(
        self,
        name: str = "ztq",
        *,
        redis_url: str | None = None,
        prefix: str | None = None,
        middleware: list[Middleware] | None = None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
        max_payload: int | None = None,
    ) -> None:
        if max_payload is not None:
            max_payload = int(parse(BY_NAME["max_payload"], max_payload, "App()", "max_payload"))
        # most bytes of a payload (None: the setting, ZTQ_MAX_PAYLOAD or 4 MB, read at first use)
        self._max_payload = max_payload
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ConfigError(f"replicas must be an int >= 0, not {replicas!r}")
        if not 0 < replica_timeout <= 60:
            raise ConfigError(f"replica_timeout must be > 0 and <= 60 s, not {replica_timeout!r}")
        self.name = name
        # durable enqueue (docs/scaling.md): wait for this many replicas to confirm each
        # enqueue, up to replica_timeout seconds; a call's own replicas= wins
        self.replicas, self.replica_timeout = replicas, replica_timeout
        self.connections = Connections(redis_url, prefix)
        self.async_connections: dict[tuple[str, int], Any] = {}  # (name, event loop) -> conn
        self.registry = Registry()
        self.cron = CronSchedule()
        # what the app's workers do with channels (docs/channels.md): the tasks subscribed
        # to channels, and how many seconds of broadcasts sent before it started a worker
        # runs (0: none; float("inf"): every one still kept)
        self.subscriptions: dict[tuple[str, str], Subscription] = {}
        self.broadcast_catch_up = 0.0
        self.joins_transactions = False  # see use_transaction_manager()
        # which transaction manager an enqueue joins (None: the thread's transaction.manager)
        self.transaction_manager: Callable[[], Any] | None = None
        # the built-in policies (docs/middleware.md), unless the list is given whole
        self.middleware = Chain(default_middleware() if middleware is None else middleware)
        apps.LIVE.add(self)

    def __repr__(self) -> str:
        return f"<ztq.App {self.name!r}>"

    @property
    def redis_url(self) -> str | None:
        """The URL given to the app, if any (None: resolved from the settings)."""
        return self.connections.url

    @property
    def prefix(self) -> str | None:
        """The key prefix given to the app, if any (None: resolved from the settings)."""
        return self.connections.prefix

    def add_middleware(
        self, middleware: Middleware, *, before: type[Middleware] | None = None
    ) -> None:
        """Add a middleware after the others (or before the first of class ``before``)."""
        self.middleware.add(middleware, before=before)

    # -- Redis -------------------------------------------------------------------------------
    def connect(
        self,
        url: str | None = None,
        *,
        name: str = "default",
        prefix: str | None = None,
        cluster: bool | None = None,
        client: Any = None,
        request_window: float | None = None,
    ) -> Storage:
        """Set (or replace) one of the app's connections (see :class:`Connections`)."""
        return self.connections.connect(
            url, name=name, prefix=prefix, cluster=cluster, client=client,
            request_window=request_window,
        )  # fmt: skip

    @property
    def max_payload(self) -> int:
        """Most bytes of one task's payload: ``App(max_payload=...)``, else the setting
        (``ZTQ_MAX_PAYLOAD``, default 4 MB), read when first needed, not at import."""
        if self._max_payload is None:
            got = resolve(BY_NAME, ["max_payload"])["max_payload"]
            self._max_payload = int(got.value)
        return self._max_payload

    def storage(self, name: str = "default") -> Storage:
        """The named connection; the default one is made from the settings on first use."""
        return self.connections.get(name)

    def disconnect_all(self) -> None:
        """Close the blocking connections and forget the async ones (they close with their
        event loop's clients)."""
        self.connections.close_all()
        self.async_connections.clear()

    # -- tasks -------------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> TaskFunction[P, R]: ...
    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        queue: str = "default",
        name: str | None = None,
        connection: str = "default",
        priority: Priority | str = Priority.NORMAL,
        retries: int = 0,
        timeout: float | None = None,
        unique: bool = True,
        cron: str | None = None,
        batch_size: int | None = None,
        on_batch: Callable[[], Any] | None = None,
        result_ttl: float | None = None,
        shards: int | None = None,
        expires: float | timedelta | None = None,
        rate_limit: str | None = None,
        key: str | Callable[[tuple[Any, ...], dict[str, Any]], str] | None = None,
        concurrency: int | None = None,
    ) -> Callable[[Callable[P, R]], TaskFunction[P, R]]: ...

    @refuse_unknown_options("task")  # @task(retires=3): "did you mean 'retries'?"
    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        queue: str = "default",
        name: str | None = None,
        connection: str = "default",
        priority: Priority | str = Priority.NORMAL,
        retries: int = 0,
        timeout: float | None = None,
        unique: bool = True,
        cron: str | None = None,
        batch_size: int | None = None,
        on_batch: Callable[[], Any] | None = None,
        result_ttl: float | None = None,
        shards: int | None = None,
        expires: float | timedelta | None = None,
        rate_limit: str | None = None,
        key: str | Callable[[tuple[Any, ...], dict[str, Any]], str] | None = None,
        concurrency: int | None = None,
    ) -> Any:
        """Register a function as a task of this app, by default as ``module.qualname`` on
        queue ``default``.

        ``cron="*/5 * * * *"`` also schedules it (no arguments); ``batch_size`` with
        ``on_batch`` calls ``on_batch()`` after that many runs or when the queue runs dry;
        ``result_ttl`` (seconds) keeps its results that long instead of the worker's setting;
        ``expires`` (seconds or a ``timedelta``, each call may override it) drops a call
        not started that long after its enqueue (docs/queue-controls.md, "Expiry");
        ``shards=N`` spreads the queue over N sub-queues in N hash slots, so one busy queue
        can use several Redis Cluster masters (docs/scaling.md); every task of the queue must
        give the same N. ``rate_limit="20/s"`` bounds its starts across the fleet
        (docs/queue-controls.md, "A task's rate limit"). ``key="account"`` (an argument's
        name, or a callable of ``(args, kwargs)``) gives each call a key: the keys take
        turns, at most ``concurrency`` run per key, ``rate_limit="5/s per key"`` bounds each
        key's starts (docs/queue-controls.md, "Per-key limits and fair turns").
        """

        key_of, key_rate, rate = task_keying(key, rate_limit)
        # a priority's name and a timedelta made the types TaskOptions keeps
        priority, expires = check_priority(priority), check_expires(expires)
        options = TaskOptions(
            queue=queue, connection=connection, priority=priority, retries=retries,
            timeout=timeout, unique=unique, result_ttl=result_ttl, shards=shards,
            expires=expires, key_concurrency=concurrency, key_rate=key_rate,
        )  # fmt: skip

        def register(f: Callable[..., Any]) -> TaskFunction[Any, Any]:
            tf = TaskFunction(
                f, app=self, options=options, name=name, key=key_of, rate_limit=rate,
                batch_size=batch_size, on_batch=on_batch,
            )  # fmt: skip
            self.registry.add(tf)
            try:
                apps.check_shared_names(self, [tf.name])
            except ConfigError:
                self.registry.remove(tf.name)
                raise
            if cron is not None:
                try:
                    self.add_cron(tf.prepare(), cron, name=tf.name)
                except ZtqError:  # a function that cannot run on a tick is not registered
                    self.registry.remove(tf.name)
                    raise
            return tf

        return register(fn) if fn is not None else register

    def lookup(self, name: str) -> TaskFunction[Any, Any]:
        """The task called ``name`` in this app, or :class:`~ztq.core.errors.UnknownTask`."""
        return self.registry.lookup(name)

    def registered(self) -> dict[str, TaskFunction[Any, Any]]:
        return self.registry.all()

    # -- cron --------------------------------------------------------------------------------
    def add_cron(
        self, call: Any, spec: str, *, name: str | None = None, grace: float = DEFAULT_GRACE
    ) -> CronEntry:
        """Schedule ``call`` (a prepared task, or a task to call without arguments). A call
        whose arguments do not bind to its task's signature (a function that needs arguments
        the entry does not give) is refused with :class:`~ztq.core.errors.WrongArguments`:
        every tick of it would fail (issue 39). A task of another process is not checked."""
        if not isinstance(call, TaskCall) and hasattr(call, "prepare"):
            call = call.prepare()
        if isinstance(call, TaskCall) and call.task in self.registry.all():
            check_cron_call(name or call.task, spec, call, self.registry.lookup(call.task))
        return self.cron.add(call, spec, name=name, grace=grace)

    def remove_cron(self, name: str) -> None:
        self.cron.remove(name)

    def cron_entries(self) -> list[CronEntry]:
        return self.cron.entries()

    # -- queues ------------------------------------------------------------------------------
    @refuse_unknown_options("configure_queue")
    def configure_queue(
        self,
        queue: str,
        *,
        max_running: int | None | Keep = KEEP,
        max_pending: int | None | Keep = KEEP,
        when_full: str | Keep = KEEP,
        block_timeout: float | Keep = KEEP,
        rate_limit: str | None | Keep = KEEP,
        key_concurrency: int | None | Keep = KEEP,
        connection: str = "default",
    ) -> None:
        """Queue-wide settings, kept in Redis and enforced by the scripts for every producer
        and worker (docs/queue-controls.md); settings not given are kept, None lifts a limit.

        ``max_running=1`` makes a queue serial (a single-writer index is never written by
        two runs at once, however many workers serve it). ``max_pending=N`` bounds the tasks
        waiting to run; an enqueue that finds N waiting raises :class:`QueueFull`
        (``when_full="raise"``), waits up to ``block_timeout`` seconds for room
        (``"block"``), or puts the task in the queue's overflow buffer, fed in as the queue
        drains (``"buffer"``: the producer never waits and nothing is lost).
        ``rate_limit="20/s"`` (or ``"N/m"``, ``"N/h"``, optionally ``" burst B"``) bounds
        the tasks started per second across every worker, on Redis's clock; a throttled
        task waits in its queue."""
        self.connections.get(connection).queues.configure(
            queue, max_running=max_running, max_pending=max_pending, when_full=when_full,
            block_timeout=block_timeout, rate_limit=rate_limit, key_concurrency=key_concurrency,
        )  # fmt: skip

    # -- channels ----------------------------------------------------------------------------
    def subscribe_task(
        self,
        channel: str,
        task: TaskFunction[Any, Any] | str,
        *,
        name: str | None = None,
        start: str = "new",
        connection: str = "default",
    ) -> Subscription:
        """Subscribe a task to a channel: the workers serving the task's queue read the
        channel as subscriber ``name`` (default: the task's name) and turn each JSON message
        into a run of the task, called with the message's value. The subscriber is made
        when the first such worker starts (``start="all"``: with the messages held then)."""
        task_name = task if isinstance(task, str) else task.name
        sub = Subscription(channel, task_name, name or task_name, start, connection)
        self.subscriptions[(channel, sub.name)] = sub
        return sub

    # -- enqueue side ------------------------------------------------------------------------
    def ping(
        self, task: TaskHandle | str, queue: str | None = None, *, connection: str = "default"
    ) -> str:
        """The state of a task of this app: queued, delayed, running, error, done, expired
        or none."""
        return _ping(task, queue, connection=connection, app=self)

    async def aping(
        self, task: TaskHandle | str, queue: str | None = None, *, connection: str = "default"
    ) -> str:
        """:meth:`ping` from a coroutine (``redis.asyncio``; never blocks the event loop)."""
        return await _aping(self, task, queue, connection=connection)

    def send(self, call: TaskCall) -> TaskHandle:
        """Enqueue ``call`` now, or buffer it in the open transaction: what
        ``TaskCall.enqueue()`` asks of the call's app (the calls module sits below the send
        path, so the app, which owns both, does the sending)."""
        return _send(call)

    def batch(self, **options: Any) -> Batch:
        """A batch of this app's tasks: :func:`ztq.core.batch`'s options (docs/batches.md)."""
        return Batch(self, **options)

    def use_transaction_manager(
        self, enabled: bool = True, manager: Callable[[], Any] | None = None
    ) -> None:
        """Make this app's enqueues join the ``transaction`` package's current transaction
        (``pyramid_tm``): they are written when it commits, and dropped when it aborts.

        ``manager`` says which manager an enqueue joins, asked at each enqueue: it returns
        a transaction manager, or None to write at once (no transaction is open). Without
        it, the thread's ``transaction.manager``. The Pyramid integration passes one that
        answers ``request.tm`` (docs/integrations.md), since under pyramid_tm's explicit
        manager the request's transaction is not the thread's."""
        self.joins_transactions = enabled
        self.transaction_manager = manager if enabled else None


apps.provide(lambda: App("default"))
default_app = apps.default_app


# -- the default app, module-level (what `from ztq.core import connect, task, ...` gives) --
def _of_default_app(path: str) -> Callable[..., Any]:
    """``path`` (a method of the app, or of its connections) called on the default app,
    made on first use: the module-level API passes its arguments through as they are."""
    owner, _, name = path.rpartition(".")

    def call(*args: Any, **kwargs: Any) -> Any:
        app = default_app()
        return getattr(app.connections if owner else app, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f":meth:`{'Connections' if owner else 'App'}.{name}` of the default app."
    return call


if TYPE_CHECKING:  # the signatures and overloads of the default app's methods
    _app = App()
    connect, get_storage = _app.connections.connect, _app.connections.get
    disconnect_all = _app.connections.close_all
    task, configure_queue, subscribe_task = _app.task, _app.configure_queue, _app.subscribe_task
    add_cron, remove_cron, cron_entries = _app.add_cron, _app.remove_cron, _app.cron_entries
    lookup, registered = _app.lookup, _app.registered
    use_transaction_manager = _app.use_transaction_manager
else:
    connect, get_storage, disconnect_all = map(
        _of_default_app, ["connections.connect", "connections.get", "connections.close_all"]
    )
    task, configure_queue, subscribe_task, add_cron, remove_cron, cron_entries = map(
        _of_default_app,
        ["task", "configure_queue", "subscribe_task", "add_cron", "remove_cron", "cron_entries"],
    )
    lookup, registered, use_transaction_manager = map(
        _of_default_app, ["lookup", "registered", "use_transaction_manager"]
    )
