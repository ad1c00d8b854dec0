"""Pyramid integration for web apps that enqueue tasks:
``config.include("ztq.core.contrib.pyramid")``.

- Connects the app (``ztq.app = module:attribute`` in the settings, else the default app)
  through the one settings path: flag (the app's own) > environment > the ini's
  ``ztq.redis_url`` / ``ztq.prefix`` > default.
- When ``pyramid_tm`` is included, the app's enqueues join the request's transaction
  (``request.tm``, whatever ``tm.manager_hook`` makes it: the thread's manager or
  ``pyramid_tm.explicit_manager``'s): they are written when it commits and dropped when it
  aborts (an error in the view, a failed vote of the database), with the app's own flag,
  not a process-wide one. Outside a request pyramid_tm manages (a script, a thread, a
  finished callback), an enqueue joins the transaction begun on ``request.tm`` (or on the
  thread's ``transaction.manager`` outside any request), ``with request.tm:``, and is
  written at once when none is begun: never into a transaction that nobody will end.
- ``request.ztq`` is the app.
"""

from __future__ import annotations

from typing import Any

from ztq.core.client.app import App, default_app
from ztq.core.client.apps import connection_flags, load_app
from ztq.core.settings import SETTINGS, app_values, resolve


def includeme(config: Any) -> None:
    settings = config.get_settings()
    spec = str(settings.get("ztq.app") or "").strip()
    app: App = load_app(spec) if spec else default_app()
    url, prefix = connection_flags(app, None, None)
    got = resolve(
        SETTINGS,
        ("redis_url", "prefix"),
        flags={"redis_url": url, "prefix": prefix},
        ini=app_values(
            {k: v for k, v in settings.items() if k in ("ztq.redis_url", "ztq.prefix")}, SETTINGS
        ),
    )
    app.connect(got["redis_url"].value, prefix=got["prefix"].value)
    # pyramid_tm may be included before or after us: decide once the configuration is done
    config.action(("ztq.core.contrib.pyramid", "tm"), lambda: _join_tm(config, app), order=10)
    config.add_request_method(lambda request: app, "ztq", reify=True)
    config.registry.ztq_app = app


def _join_tm(config: Any, app: App) -> None:
    """pyramid_tm adds ``request.tm``; when it is there, the app joins its transactions."""
    from pyramid.interfaces import IRequestExtensions

    extensions = config.registry.queryUtility(IRequestExtensions)
    if extensions is not None and "tm" in extensions.descriptors:
        app.use_transaction_manager(True, manager=request_manager)


def request_manager() -> Any | None:
    """The transaction manager an enqueue joins now, or None to write it at once."""
    import transaction
    from pyramid.threadlocal import get_current_request

    request = get_current_request()
    manager = getattr(request, "tm", None) if request is not None else None
    if manager is None:
        manager = transaction.manager
    elif request.environ.get("tm.active"):
        return manager  # pyramid_tm's tween began it and will end it
    return manager if _begun(manager) else None


def _begun(manager: Any) -> bool:
    """Whether ``manager`` has a transaction open, without beginning one (``get()`` of an
    implicit manager would begin one that nobody ends)."""
    if manager.explicit:
        from transaction.interfaces import NoTransaction

        try:
            manager.get()
        except NoTransaction:
            return False
        return True
    inner = getattr(manager, "manager", manager)  # a ThreadTransactionManager wraps one
    return getattr(inner, "_txn", None) is not None
