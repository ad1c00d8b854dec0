"""The worker's settings (:data:`SETTINGS`), declared next to the code that reads them and
resolved with core's by :mod:`ztq.core.settings` (flag > environment > ini > default)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ztq.core import settings
from ztq.core.settings import (
    Setting,
    app_spec,
    boolean,
    host_port,
    module_list,
    number,
    worker_name,
)

MAX_THREADS_ALL = 100_000  # bound of autoscale_threads_max (a worker's threads in all)


def _worker(name: str, parse: Callable[[Any], Any], default: Any, doc: str) -> Setting:
    return Setting(name, parse, default, doc, worker_keys=(name,))


# the worker's own settings; with core's (redis_url, prefix, log_*) they make TABLE
SETTINGS: tuple[Setting, ...] = (
    Setting("app", app_spec, "", "the ztq.core.App (module:attribute) the worker serves; "
            "its own redis_url and prefix count as flags; default: the default app",
            worker_keys=("app",)),
    Setting("name", worker_name, "", "worker name shown in the console (default host.pid)",
            env="ZTQ_WORKER_NAME", app_key=None, worker_keys=("name", "alias")),
    Setting("modules", module_list, (), "modules with tasks the worker imports",
            app_key=None, worker_keys=("modules",)),
    Setting("queues", module_list, (), "the queues the worker serves, in --queue's form, "
            "apart by spaces or commas (mail:2 pdf:1:process crawl:1..8); --queue flags "
            "replace it, it replaces [queues]", app_key=None),
    Setting("active_config", boolean, True, "may the console change the worker's threads",
            app_key=None, worker_keys=("active_config",)),
    Setting("health", host_port, "", "serve /livez and /readyz on PORT or HOST:PORT (flag "
            "--health-port; HOST defaults to 127.0.0.1, flag --health-host); empty: no "
            "health endpoints",
            app_key=None, worker_keys=("health",)),
    _worker("lease", number(0, above=True), 15.0,
            "seconds a fetched task is held without a heartbeat renewing it"),
    _worker("heartbeat", number(0, above=True), 3.0,
            "seconds between heartbeats (lease renewals, reaper, commands)"),
    _worker("max_lost", number(1, 1000, whole=True), 3,
            "a task that lost its worker this often goes to errors (poison pill)"),
    _worker("prefetch", number(1, 10_000, whole=True), 32,
            "most tasks one executor leases in one call"),
    _worker("result_ttl", number(0), 3600.0,
            "seconds a finished record and its result are kept; 0 = dropped at once"),
    _worker("compact_finished", boolean, False,
            "keep a compact finished record (state and times; no arguments, no result) "
            "for result_ttl: for tasks whose result nobody reads"),
    _worker("history_maxlen", number(1, whole=True), 10_000,
            "cap of each queue's history stream"),
    _worker("grace", number(0, above=True), 30.0,
            "seconds running tasks get to finish on SIGTERM"),
    _worker("idle_wait", number(0, above=True), 5.0,
            "longest block of an idle executor on the wake lists"),
    _worker("retry_backoff", number(0, above=True), 1.0,
            "seconds before the first retry; doubles per attempt"),
    _worker("lost_after", number(0, above=True), 30.0,
            "read and checked, not used by the worker yet (see console.lost_after)"),
    _worker("broadcast_catch_up", number(0), 0.0,
            "seconds: at start, run the broadcasts sent that long before (0: the app's "
            "broadcast_catch_up, by default none); docs/channels.md"),
    _worker("autoscale_cpu_max", number(0, 100), 85.0,
            "host CPU % from which the autoscaler adds no thread (docs/autoscaling.md)"),
    _worker("autoscale_memory_max", number(0, 100), 90.0,
            "host memory % from which the autoscaler adds no thread and lets one go a beat"),
    _worker("autoscale_threads_max", number(0, MAX_THREADS_ALL, whole=True), 0,
            "most threads the autoscaled queues run together; 0: each queue's maximum only"),
    _worker("autoscale_idle_beats", number(1, 1000, whole=True), 3,
            "heartbeats an autoscaled queue's threads stay unneeded before some are let go"),
)  # fmt: skip
TABLE = settings.by_name(settings.SETTINGS, SETTINGS)
WORKER = (*settings.CONNECTION, *(s.name for s in SETTINGS))  # what load_config resolves
