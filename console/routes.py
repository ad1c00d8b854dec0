"""Every URL of the console. Pages are GET; every state change is a POST with a CSRF token
(``POST /workers`` commands a worker, ``POST /tasks`` acts on tasks, ``POST /bulk`` runs one
step of a bulk action).

The public routes (no login) are ``login``, ``lang``, ``healthz`` (for probes and load
balancers: it tells only whether Redis answers) and the static assets; everything else
needs a signed-in user (``tests/console/test_security.py`` walks this table to check it).
"""

from __future__ import annotations

from pyramid.config import Configurator

PUBLIC = ("login", "lang", "healthz", "__static/")

ROUTES = (
    ("home", "/"),
    ("login", "/login"),
    ("logout", "/logout"),
    ("lang", "/lang"),
    ("healthz", "/healthz"),
    # workers
    ("workers", "/workers"),
    ("worker", "/workers/{id:.+}"),  # any id a heartbeat names, "/" included
    # queues and tasks
    ("queues", "/queues"),
    ("queue", "/queues/{name}"),
    ("queue_state", "/queues/{name}/state"),
    ("bulk", "/bulk"),
    ("bulk_confirm", "/bulk/confirm"),  # what a bulk action will act on, before it runs
    ("errors_selected", "/errors/selected"),
    ("redo_follow", "/redo/{batch}"),  # the tasks one redo put back, as they are now
    ("trash", "/trash"),  # deleted errors that can be restored (docs/console.md, "Undo")
    ("trash_restore", "/trash/restore"),
    ("tasks", "/tasks"),
    ("task_args", "/tasks/{id}/args"),  # a task's arguments whole, as a download
    ("task", "/tasks/{id}"),
    ("search", "/search"),
    ("errors", "/errors"),
    ("error_groups", "/errors/groups"),
    ("running", "/running"),
    ("scheduled", "/scheduled"),
    ("cron_run", "/cron/run"),
    ("cron_toggle", "/cron/toggle"),
    # logs
    ("history", "/history"),
    ("events", "/log"),
    ("audit", "/audit"),
    ("alerts", "/alerts"),
    ("channels", "/channels"),
    # batches (docs/batches.md); the POST route before the one it would match
    ("batches", "/batches"),
    ("batch_redo", "/batches/redo"),
    ("batch", "/batches/{id}"),
    # every Redis system the console watches (a page of another one is /s/<name>/...)
    ("systems", "/systems"),
    # who is signed in
    ("sessions", "/sessions"),
    ("session_end", "/sessions/end"),
    ("token_revoke", "/tokens/revoke"),
    # machine-readable
    ("api_workers", "/api/workers"),
    ("api_queues", "/api/queues"),
    ("api_errors", "/api/errors"),
    ("api_history", "/api/history"),
    ("api_running", "/api/running"),
    ("api_scheduled", "/api/scheduled"),
    ("api_log", "/api/log"),
    ("api_task", "/api/tasks/{id}"),
    ("metrics", "/metrics"),
)


def includeme(config: Configurator) -> None:
    for name, pattern in ROUTES:
        config.add_route(name, pattern)
