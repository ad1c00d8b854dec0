"""Messaging beside tasks: channels (capped streams with consumer groups), files sent in
chunks over a channel, and broadcasts (one task run by every worker of a queue).

May import: ``ztq.core.errors``, the engine and ``ztq.core.client`` below ``app``
(calls, handle, current). The worker's side of each lives in ``ztq.worker.channels``.
"""
