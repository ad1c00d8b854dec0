"""The Redis engine: every key name, every Lua script and every Redis command of ztq.

``keys`` spells every key (hash tags for Cluster), ``record`` encodes a task's record,
``scripts`` loads the Lua in ``scripts/`` (one ``.lua`` a state move, shared blocks in
``_lib.lua``) and calls it. ``storage`` is the :class:`Storage` facade that the client, the
worker, the console and the CLI all go through, assembled from one mixin per
responsibility: ``transport`` (the client, script calls, pipelines, errors), ``task_moves``
(enqueue, fetch, ack, fail, renew, release, reap, promote), ``reads`` (records, lengths,
queue configuration), ``queue_admin`` (registration, pause, configure) and ``blocking``
(waits on wake lists and history streams, built on ``waits``). ``connection`` builds
redis-py clients from URLs (single, Sentinel, Cluster); ``queue_limits`` holds the
back-pressure limits; ``workers`` is the worker/console contract (heartbeats, commands,
events). ``batching`` holds batches; ``features`` the reads and writes of channels,
broadcasts, sign-in records and alerts, so that their packages never touch a client.

May import: ``ztq.core.errors``, ``ztq.core.states``, ``ztq.core.settings`` and redis-py.
Nothing else of ztq: every other package builds on this one.
"""
