"""The Redis side of the read models (``ztq.core.monitor``): what the console, ``ztq info``
and /metrics read, as named reads of the engine.

``ztq.core.monitor`` decides what a page shows (merging, cursors, budgets, folding shards,
formatting); every Redis command it needs is a function here, one module per thing read:
``task_reads`` (task records, the ready lists and their leftovers), ``listing_reads`` (the
sorted sets and streams the listings merge, the audit stream), ``queue_reads`` (counts,
limits, stats hashes, memory, the cron table) and ``fleet_reads`` (worker summaries,
heartbeats, states and command lists). Each takes the batch of keys a page needs and reads
it in one pipeline, so a page costs the same round trips as when the read models held the
client themselves (issue 37: no module outside the engine touches a client).

May import: ``ztq.core.engine`` (transport, keys, workers) and ``ztq.core.states``. Nothing
of the client API or of the monitor it serves.
"""
