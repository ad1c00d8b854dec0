"""Pyramid integration for web apps that enqueue tasks:
``config.include("ztq.core.contrib.pyramid")``.

- Connects the app (``ztq.app = module:attribute`` in the settings, else the default app)
  through the one settings path: flag (the app's own) > environment > the ini's
  ``ztq.redis_url`` / ``ztq.prefix`` > default.
- When ``pyramid_tm`` is included, the app's enqueues join the request's transaction: they
  are written when it commits and dropped when it aborts (an error in the view, a failed
  commit of the database), with the app's own flag, not a process-wide one.
- ``request.ztq`` is the app.
"""

from __future__ import annotations

from typing import Any

from ztq.core.client.app import App, connection_flags, default_app, load_app
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
        app.use_transaction_manager(True)
