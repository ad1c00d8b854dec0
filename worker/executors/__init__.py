"""How a worker runs a queue's tasks: ``threads`` (the default: executor threads that fetch
a batch, run it and ack it with the next fetch), ``process_slot`` (each run in a child
process, for CPU-bound or leaky code), ``async_pool`` (coroutines on one event loop) and
``timeouts`` (the soft and hard time limits of a run) and ``throttle`` (an executor held
back by a queue's rate limit sleeps until its next token). ``host`` is the protocol of what
an executor (and a channel reader) may ask of the worker that runs it.

May import: ``ztq.core`` and the worker's lower modules (config, context, execute, logs,
resilience). Never ``ztq.worker.worker``, not even for types: the worker hands itself to an
executor as an :class:`~ztq.worker.executors.host.ExecutorHost`.
"""
