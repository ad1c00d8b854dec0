"""The Redis side of the features built above the task queue: channels, broadcasts, the
console's sign-in records and alerts.

``ztq.core.messaging``, ``ztq.core.auth`` and ``ztq.core.alerts`` hold what those features
mean (messages, runs, sessions, rules); the reads and writes of their keys live here, one
module per concern, so that no package outside the engine touches a Redis client
(docs/architecture.md, issue 37). The state changes are the Lua scripts of ``scripts/``
(``channel``, ``broadcast``, ``session``, ``token``, ``login``, ``alerts``), which those
packages call through ``Storage.call``; the modules here hold the plain reads, blocking
waits and single-command writes.

May import: ``ztq.core.errors``, ``ztq.core.engine`` (keys, transport, blocking) and
redis-py. Nothing of the client API or of the packages it serves.
"""
