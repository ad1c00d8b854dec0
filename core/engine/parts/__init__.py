"""The parts of :class:`~ztq.core.engine.storage.Storage`, one module per concern, each a
class whose methods are its typed interface and which holds a reference to the storage's
one :class:`~ztq.core.engine.transport.Transport` (it does not inherit it):

``tasks`` (enqueue, promote, redo, delete, records), ``leases`` (the worker's fetch, ack,
fail, renew, release, progress, reap), ``queues`` (registration, pause, limits, names and
lengths), ``errors`` (trash, restore, redo follow-through, error counters), ``waits`` (the
blocking waits), ``batches`` (batch records and the outbox relay) and ``key_turns`` (keyed
tasks' busiest keys, a key's pause).

May import: ``ztq.core.errors``, ``ztq.core.states``, ``ztq.core.settings``, the engine's
own modules (transport, keys, scripts, record, queue limits, waits) and redis-py. Nothing
of the client API: the facade in ``ztq.core.engine.storage`` makes the parts.
"""
