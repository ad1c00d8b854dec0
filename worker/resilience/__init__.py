"""How a worker lives through a Redis that refuses it (issue 28): ``faults`` (every thread's
Redis errors logged once per kind and thread, backed off, the reason ``/readyz`` gives, the
counters of ``/metrics``) and ``identity`` (which Redis and data set the worker talks to:
a Redis back without its data is reported once, with what the worker held).

May import: ``ztq.core`` and the worker's lower modules (config, logs). Never
``ztq.worker.worker``: the worker hands itself to these when it starts.
"""
