"""The client API: what an application calls to define, enqueue and follow tasks.

The :class:`~ztq.core.client.app.App` (one per application, and a process-wide default)
owns a registry of task functions, its Redis connections, its middleware and its cron
table; ``options`` defines a task's options once (``TaskOptions``: ``@task``'s defaults,
each call's, checked there), ``binding`` checks a call's arguments against its function,
``calls`` builds what will be sent, ``enqueue`` sends it (blocking and asyncio
twins, one script call per batch; ``aio`` holds the asyncio connections), ``handle``
follows it, ``buffer`` and ``transaction`` hold it until commit, ``cron`` sends it on a
schedule. ``apps`` keeps the default app's slot, which ``app`` fills, so that the
modules below ``app`` reach the default without importing it, and the live apps.

May import: ``ztq.core.errors``, ``ztq.core.states``, ``ztq.core.settings``, the engine,
the middleware base and the messaging package. Never the monitor, alerts or auth packages,
nor anything of the worker, the console or the CLI.
"""
