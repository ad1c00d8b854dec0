"""Worker configuration: one ini file (ZTQ's ``[server]`` + ``[queues]``) plus flags.

Read in one place and passed down. The worker's settings are declared here
(:data:`SETTINGS`) and, with core's, resolved by :mod:`ztq.core.settings` with the rule
flag > environment (``ZTQ_REDIS_URL``, ``ZTQ_PREFIX``, ``ZTQ_LEASE``, ...) > ini > default.
The ini may be the console's ``app.ini``: the worker then reads ``[ztq:worker]`` /
``[ztq:queues]`` and the ``ztq.<name>`` keys of ``[app:main]`` (``ztq.redis_url``,
``ztq.prefix``, ``ztq.lease``, ...); the two must not disagree.

    [server]
    redis = redis://127.0.0.1:6379/0
    name = pdf-box-1              ; alias shown in the console (default host.pid)
    modules = myapp.tasks, myapp.mail
    active_config = true          ; the console may change the thread allocation
    lease = 15                    ; seconds; see docs/worker.md

    [queues]
    default = 2                   ; two threads for queue "default"
    pdf = 1 process               ; one killable process slot
    crawl = 200 async             ; one event loop running up to 200 async def tasks
    fast = urgent, default        ; one thread named "fast" watching urgent, then default
    mixed = a, b, c fair          ; one thread asking a, b, c in turn (a different one first)
    hot = 8 shards=3              ; eight threads over the three shards of queue "hot"
    mail = 1..8                   ; autoscaled: 1 to 8 threads as the load asks (autoscaling.md)

``specs`` holds what a worker is configured to do (:class:`WorkerConfig`), ``table`` the
worker's settings, ``queues`` the one grammar of a queue entry, ``load`` ``load_config``.

May import: ``ztq.core`` (settings, the app loader, queue names). Nothing else of the
worker imports from below this package; the worker process, the CLI and the testing
helpers import it.
"""

from ztq.worker.config.load import load_config
from ztq.worker.config.queues import (
    INI_FORM,
    MAX_ASYNC,
    MAX_THREADS,
    POOLS,
    check_scaled,
    parse_queue_entry,
    parse_queue_flag,
    parse_scale_entry,
)
from ztq.worker.config.specs import FIELD, ScaleSpec, ThreadSpec, WorkerConfig
from ztq.worker.config.table import MAX_THREADS_ALL, SETTINGS, TABLE, WORKER

__all__ = [
    "FIELD",
    "INI_FORM",
    "MAX_ASYNC",
    "MAX_THREADS",
    "MAX_THREADS_ALL",
    "POOLS",
    "SETTINGS",
    "TABLE",
    "WORKER",
    "ScaleSpec",
    "ThreadSpec",
    "WorkerConfig",
    "check_scaled",
    "load_config",
    "parse_queue_entry",
    "parse_queue_flag",
    "parse_scale_entry",
]
