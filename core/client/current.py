"""The process-wide default app's slot: the one piece of global state ztq keeps.

``fn.delay()``, ``TaskHandle`` and ``channel()`` work without an app: they use the default
app, made on first use. The modules that need it sit below :mod:`ztq.core.client.app` (the
app imports them), so they reach the default through this slot instead of importing the
app: ``client.app`` fills the slot with the way to make one when it is imported, which
``import ztq.core`` always does first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ztq.core.client.app import App

_make: Callable[[], App] | None = None
_default: App | None = None
_lock = threading.Lock()


def provide(make: Callable[[], App]) -> None:
    """Say how the default app is made (``client.app`` calls this once, on import)."""
    global _make
    _make = make


def default_app() -> App:
    """The app the module-level functions act on, made on first use."""
    global _default
    if _default is None:
        with _lock:
            if _default is None:
                if _make is None:  # only when ztq.core.client.app was never imported
                    raise RuntimeError("import ztq.core before using the default app")
                _default = _make()
    return _default


def app_or_default(app: App | None) -> App:
    """``app``, or the default app when None."""
    return default_app() if app is None else app
