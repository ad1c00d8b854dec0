"""Batches in Redis (docs/batches.md): the batch records, their members' ends and the relay
that applies those ends to their batch.

A member's end is written with the move that ended it, in its queue's slot (``batch_out``);
the batch lives in the global slot (``{ztq}``), so a parent and its children change in one
script. ``store`` is the :class:`BatchStore` mixin of ``Storage``: create a batch (atomic
with its members on a single Redis), apply ends (``batch.lua``, idempotent by fence), read
batches and their members, wait for one to end.

May import: ``ztq.core.errors``, ``ztq.core.engine`` (its keys, scripts, transport, record)
and redis-py. Nothing of the client: the callbacks are sent by ``ztq.core.client.batch``.
"""
