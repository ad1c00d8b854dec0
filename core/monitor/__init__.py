"""Monitoring read models: what the console, its JSON API and the ``ztq`` command show.

Every read is a window of Redis (a page, a capped range), never a whole queue: ``queues``
(queue stats, the pending page; it imports the names of ``pages``, ``search`` and ``cron``
so that ``monitor.<name>`` reaches them all), ``pages`` (rows, pages, cursors, listings
merged across queues), ``search`` (lookup by id, search by filter), ``cron`` (the cron
table), ``streams`` (history and event pages), ``filters`` and ``groups`` (error filters
and groups), ``bulk`` (filter-wide redo and delete in batches), ``timings``, ``systems``
(several Redis systems), ``workers`` (worker counts, pages and who serves a queue, from
the contract in ``ztq.core.engine.workers``), ``overview`` (the dicts the pages and
``--json`` share) and ``fmt`` (the pure formatters of times, sizes and durations that the
console's templates and the terminal both use). Every Redis command they need is a named
read of ``ztq.core.engine.read_models``: no module here touches a client.

May import: ``ztq.core.errors``, ``ztq.core.states``, ``ztq.core.settings``, the engine
and ``ztq.core.client.calls``. Never the client's send path, the worker or the console.
"""
