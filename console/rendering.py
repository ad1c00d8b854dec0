"""Templates (Jinja2, autoescaped, strict about undefined names), static assets, language.

Templates are found in ``templates/`` and assets in ``static/`` next to the package; both
are served by Pyramid, nothing comes from a CDN; under ``/static`` only the assets themselves
(a stylesheet, a script, an image or a font of that folder), not the package's
``__init__.py`` or anything else beside them. Every template gets ``_`` (translate),
``lang``, ``user``, ``can_operate``, ``csrf_token``, ``asset(name)`` and ``query(**changes)``
(the current query string with some parameters changed), and for the system switch
``all_systems`` and ``switch_route`` (``docs/systems.md``).
"""

from __future__ import annotations

import time
from typing import Any

from jinja2 import pass_context
from pyramid.config import Configurator
from pyramid.csrf import get_csrf_token
from pyramid.events import BeforeRender
from pyramid.security import NO_PERMISSION_REQUIRED

from ztq.console import STATIC, TEMPLATES
from ztq.console.i18n import HTML_LANG, LANGS, N_, NAMES, negotiate, request_translator
from ztq.console.web import query
from ztq.core.engine.storage import safe_url
from ztq.core.monitor import fmt

NAV = (
    ("workers", N_("Workers")),
    ("queues", N_("Queues")),
    ("errors", N_("Errors")),
    ("running", N_("Running")),
    ("scheduled", N_("Scheduled")),
    ("batches", N_("Batches")),
    ("history", N_("History")),
    ("events", N_("Worker log")),
    ("channels", N_("Channels")),
    ("audit", N_("Audit")),
    ("alerts", N_("Alerts")),
    ("sessions", N_("Sessions")),
)


@pass_context
def duration(context: Any, value: Any) -> str:
    """The ``duration`` filter in the page's language (``1分12秒`` on a Chinese page)."""
    return fmt.duration(value, str(context.get("lang") or "en"))


@pass_context
def ago(context: Any, value: Any) -> str:
    """The ``ago`` filter in the page's language (templates add "ago" / "in" around it)."""
    return fmt.ago(value, lang=str(context.get("lang") or "en"))


def switch_route(request: Any) -> str:
    """The page the system switch leads to in another system: this one when it names no
    id (a list: /queues, /errors), else the first page (an id of one system means nothing
    in another)."""
    route = getattr(request, "matched_route", None)
    if route is None or request.method != "GET" or "{" in route.pattern:
        return "home"
    return str(route.name)


def _globals(event: BeforeRender) -> None:
    request = event["request"]
    if request is None:
        return
    event.setdefault("_", request.t)
    event.setdefault("lang", request.lang)
    event.setdefault("langs", LANGS)
    event.setdefault("lang_names", NAMES)  # the switch: each language in itself
    event.setdefault("html_lang", HTML_LANG)
    event.setdefault("user", request.user)
    event.setdefault("can_operate", request.can_operate)
    if str(event.get("renderer_name", "")).endswith(".jinja2"):  # JSON sets no CSRF cookie
        event.setdefault("csrf_token", get_csrf_token(request))
    event.setdefault("nav", NAV)
    event.setdefault("now_ms", int(time.time() * 1000))
    event.setdefault("asset", lambda name: request.static_path(str(STATIC / name)))
    event.setdefault("storage_url", safe_url(request.storage.url))
    event.setdefault("all_systems", request.registry.ztq_systems.all)
    event.setdefault("switch_route", switch_route(request))
    event.setdefault("query", lambda **changes: query(request, **changes))


# what a file of static/ must be to be served (static/ is also a Python package)
ASSET_SUFFIXES = (".css", ".js", ".svg", ".png", ".ico", ".woff2")


class _AssetsOnly:
    """Route predicate ``assets``: the static route matches only the files of ``static/``
    named at start that are assets (anything else there is a 404, as a missing file is)."""

    def __init__(self, folder: str, config: Configurator) -> None:
        self.folder = folder
        self.names = frozenset(
            p.name for p in STATIC.iterdir() if p.is_file() and p.suffix in ASSET_SUFFIXES
        )

    def text(self) -> str:
        return f"assets of {self.folder}"

    phash = text

    def __call__(self, info: dict[str, Any], request: Any) -> bool:
        return "/".join(info["match"].get("subpath", ())) in self.names


def includeme(config: Configurator) -> None:
    config.include("pyramid_jinja2")
    config.add_jinja2_search_path(str(TEMPLATES), name=".jinja2")
    config.add_route_predicate("assets", _AssetsOnly)
    config.add_static_view(
        "static", str(STATIC), cache_max_age=3600, permission=NO_PERMISSION_REQUIRED,
        assets=str(STATIC),
    )  # fmt: skip
    config.add_request_method(negotiate, "lang", reify=True)
    config.add_request_method(request_translator, "t", reify=True)
    config.add_subscriber(_globals, BeforeRender)
