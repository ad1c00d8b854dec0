"""ztq.console: the Pyramid monitoring console (``pserve app.ini``, ``ztq.console:main``).

Operators see workers, queues, errors, history and logs, and redo or delete tasks; every
read and write goes through ``ztq.core``. Templates live in ``templates/`` and assets in
``static/`` next to this package (``ztq.templates`` / ``ztq.static`` in a wheel).

May import: all of ``ztq.core`` (the monitor read models, auth, alerts, the engine's
``Storage``), Pyramid and Jinja2. Never ``ztq.worker``: the console sees and commands
workers through Redis (``ztq.core.engine.workers``), and nothing of ztq imports the console.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pyramid.config import Configurator

from ztq.console.config import load
from ztq.console.views.alerts import start_evaluation
from ztq.core.alerts.alerter import from_app_settings
from ztq.core.errors import ZtqError

# ztq.console.__file__: the repo root in an editable install, site-packages/ztq in a wheel
ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"
STATIC = ROOT / "static"


def paste_app(global_config: dict[str, Any] | None = None, **settings: Any) -> Any:
    """``pserve app.ini``'s entry point (``use = egg:ztq``): :func:`main`, with a
    configuration mistake (no secret, a bad users line, a role ``admin``) written as one
    line on stderr and exit 2, as ``ztq console`` says it, instead of pserve's 40-line
    traceback (issue 39). :func:`main` itself raises, for tests and WSGI servers."""
    try:
        return main(global_config, **settings)
    except ZtqError as exc:
        print(f"ztq console: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def main(global_config: dict[str, Any] | None = None, **settings: Any) -> Any:
    """The WSGI app (``paste.app_factory``); raises ``ConfigError`` on unusable settings."""
    console = load(settings, path=(global_config or {}).get("__file__"))
    alerts = from_app_settings(settings, (global_config or {}).get("__file__"))
    settings = {
        **settings,
        "jinja2.undefined": "strict",
        "jinja2.autoescape": "true",
        "jinja2.trim_blocks": "true",
        "jinja2.lstrip_blocks": "true",
        "jinja2.filters": "\n".join(
            f"{name} = ztq.core.monitor.fmt:{name}"
            for name in (
                "ts",
                "size",
                "number",
                "brief",
                "call",
                "args_cut",
                "pretty",
                "progress",
                "error_type",
            )
        )
        # in the page's language: 1m 12s on English pages, 1分12秒 on Chinese ones
        + "\nduration = ztq.console.rendering:duration\nago = ztq.console.rendering:ago",
        "jinja2.globals": "chart = ztq.core.monitor.fmt:chart",
    }
    with Configurator(settings=settings) as config:
        config.registry.ztq_settings = console
        config.registry.ztq_alerts = alerts
        config.include(".rendering")
        config.include(".redis")
        config.include(".security")
        config.include(".routes")
        config.scan(".views")
    app = config.make_wsgi_app()
    start_evaluation(config.registry)  # a daemon thread, when alert rules are set
    return app
