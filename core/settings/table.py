"""Core's own settings (the Redis connection, the systems, the log, and what ztq.core itself
reads), and the ini keys of the tables that live above this package.

The other components declare their tables next to their code: the worker's in
:mod:`ztq.worker.config`, the console's in :mod:`ztq.console.settings`, the alerts' in
:mod:`ztq.core.alerts.settings`.
"""

from __future__ import annotations

from ztq.core.settings.parsers import (
    choice,
    key_prefix,
    number,
    redis_url,
    system_list,
    system_name,
    text,
)
from ztq.core.settings.resolver import Setting, by_name

# seconds an enqueue's answer is kept for the same call sent again after a lost reply:
# longer than a client's own retries take (4 tries of up to a 10 s socket timeout, 0.5 s
# backoff: about 42 s), short enough that the keys cost little (docs/design.md)
REQUEST_WINDOW = 120.0

SETTINGS: tuple[Setting, ...] = (
    Setting("redis_url", redis_url, "redis://127.0.0.1:6379/0",
            "Redis URL (redis+cluster://host:port for a Cluster; memory://NAME for the "
            "in-memory engine of one process: docs/testing.md)", worker_keys=("redis",)),
    Setting("prefix", key_prefix, "ztq", "prefix of every Redis key", worker_keys=("prefix",)),
    Setting("systems", system_list, (), "more Redis systems the console and the ztq "
            "commands can watch: one 'NAME URL [PREFIX]' a line (';' separates them too; "
            "PREFIX defaults to prefix); docs/systems.md", app_key="ztq.systems"),
    Setting("system", system_name, "", "the system of ztq.systems a ztq command works on "
            "(flag --system); default: the one redis_url and prefix give", app_key=None),
    Setting("log_level", choice("debug", "info", "warning", "error", "critical"), "info",
            "level of the worker's and the ztq commands' log: info writes one line per run, "
            "debug a start line too", worker_keys=("log_level",)),
    Setting("log_format", choice("text", "json"), "text",
            "text lines, or JSON lines with the running task's id, name, queue and attempt",
            worker_keys=("log_format",)),
    Setting("log_config", text, "", "a logging configuration file instead of log_level and "
            "log_format: .json (dictConfig) or .ini (fileConfig), with the running task's "
            "fields on every record (docs/worker.md, Logs)", worker_keys=("log_config",)),
    Setting("request_window", number(1, 86400), REQUEST_WINDOW,
            "seconds an enqueue's answer is kept, so that the same call sent again after a "
            "lost reply gets it and enqueues nothing more (docs/design.md, Lost replies)",
            app_key=None),
    Setting("max_payload", number(262144, 512 * 1024 * 1024, whole=True), 4 * 1024 * 1024,
            "most bytes of one task's payload (its arguments as JSON): a bigger one is "
            "refused with PayloadError before it is written, one over a quarter of it logs "
            "a WARNING; the producer's (App(max_payload=...) wins)", app_key=None),
    # the console's, but read in core too: the alerts' worker_lost rule and the read models
    Setting("console.lost_after", number(1, 86400), 30.0,
            "seconds without a heartbeat before the console shows a worker as lost"),
)  # fmt: skip
BY_NAME = by_name(SETTINGS)
CONNECTION = ("redis_url", "prefix")
PRODUCER = ("request_window",)  # read where a connection is made (connect())
LOGGING = ("log_level", "log_format", "log_config")  # read by the ztq command before it runs one

# app.ini is one file for the worker and the console, and neither imports the other; core
# reads it too (``ztq -c FILE``). Each reader must still tell a key of another component's
# table from a typo, so the ini keys of the tables above this package are listed here
# (tests/core/test_settings.py checks them against those tables).
ELSEWHERE_APP_KEYS = frozenset({
    # ztq.core.alerts.settings
    "ztq.alerts.rules", "ztq.alerts.webhook", "ztq.alerts.every", "ztq.alerts.repeat_minutes",
    "ztq.alerts.timeout", "ztq.alerts.attempts",
    # ztq.worker.config
    "ztq.app", "ztq.lease", "ztq.heartbeat", "ztq.max_lost", "ztq.prefetch", "ztq.result_ttl",
    "ztq.compact_finished", "ztq.history_maxlen", "ztq.grace", "ztq.idle_wait",
    "ztq.retry_backoff", "ztq.lost_after",
    "ztq.broadcast_catch_up", "ztq.autoscale_cpu_max", "ztq.autoscale_memory_max",
    "ztq.autoscale_threads_max", "ztq.autoscale_idle_beats",
    # ztq.console.settings
    "ztq.console.secret", "ztq.console.users", "ztq.console.tokens", "ztq.console.secure_cookies",
    "ztq.console.session_hours", "ztq.console.session_idle_minutes",
    "ztq.console.trusted_proxies", "ztq.console.sso_header", "ztq.console.sso_groups_header",
    "ztq.console.sso_roles", "ztq.console.page_size", "ztq.console.bulk_batch",
    "ztq.console.bulk_seconds", "ztq.console.login_attempts", "ztq.console.login_lock_max",
    "ztq.console.login_address_attempts", "ztq.console.login_user_attempts",
})  # fmt: skip
ELSEWHERE_WORKER_KEYS = frozenset({
    # ztq.worker.config
    "app", "name", "alias", "modules", "active_config", "health", "lease", "heartbeat",
    "max_lost", "prefetch", "result_ttl", "compact_finished", "history_maxlen", "grace",
    "idle_wait",
    "retry_backoff", "lost_after", "broadcast_catch_up", "autoscale_cpu_max",
    "autoscale_memory_max", "autoscale_threads_max", "autoscale_idle_beats",
})  # fmt: skip
