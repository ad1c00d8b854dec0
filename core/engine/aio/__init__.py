"""The engine's asyncio transport, beside the blocking one (``ztq.core.engine.transport``).

:class:`~ztq.core.engine.aio.transport.AsyncStorage` talks to Redis through a
``redis.asyncio`` client with the same Lua scripts, key lists (built by a client-less
:class:`~ztq.core.engine.storage.Storage`) and error handling as the blocking side, so that
``await fn.adelay(...)``, ``await app.aping(id)`` and async worker pools never block their
event loop and no package outside the engine holds a second Redis transport (issue 37).
Which connection an app uses per event loop is the client's business
(``ztq.core.client.aio``).

May import: ``ztq.core.errors``, ``ztq.core.settings``, ``ztq.core.engine`` and redis-py.
"""
