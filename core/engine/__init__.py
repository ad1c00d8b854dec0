"""The Redis engine: every key name, every Lua script and every Redis command of ztq.

``keys`` spells every key (hash tags for Cluster), ``record`` encodes a task's record,
``scripts`` loads the Lua in ``scripts/`` (one ``.lua`` a state move, shared blocks in
``_lib.lua``) and calls it. ``storage`` is the :class:`Storage` facade that the client, the
worker, the console and the CLI all go through: the ``transport`` (the client, script calls,
round trips, errors) and its ``parts``, one object per concern (``tasks``, ``leases``,
``queues``, ``errors``, ``waits``, ``batches``, ``key_turns``). ``waits`` holds the Cluster
watchers and the bound of blocking reads; ``connection`` builds redis-py clients from URLs
(single, Sentinel, Cluster); ``queue_limits`` holds the back-pressure limits; ``workers`` is
the worker/console contract (heartbeats, commands, events). ``features`` holds the reads and
writes of channels, broadcasts, sign-in records and alerts, so that their packages never
touch a client.

May import: ``ztq.core.errors``, ``ztq.core.states``, ``ztq.core.settings`` and redis-py.
Nothing else of ztq: every other package builds on this one.
"""
