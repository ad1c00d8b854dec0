"""How a worker runs a queue's tasks: ``threads`` (the default: executor threads that fetch
a batch, run it and ack it with the next fetch), ``process_slot`` (each run in a child
process, for CPU-bound or leaky code), ``async_pool`` (coroutines on one event loop) and
``timeouts`` (the soft and hard time limits of a run) and ``throttle`` (an executor held
back by a queue's rate limit sleeps until its next token).

May import: ``ztq.core`` and the worker's lower modules (config, context, execute, logs).
Never ``ztq.worker.worker``: the worker hands itself to an executor when it starts one.
"""
