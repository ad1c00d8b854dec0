"""The console's Jinja2 templates compiled once per test process, not once per app.

Every test that builds the console in-process (``ztq.console.main``) gets a new Pyramid app
with a new Jinja2 environment, which compiles each template it renders again: ~0.3 s per
template, seconds per test (a process serving the console compiles each once). :func:`install`
gives every environment pyramid_jinja2 creates a bytecode cache shared in this process,
one per set of the options that change what a template compiles to; Jinja2 checks each
entry against the template's source (a template edited meanwhile compiles again).
"""

from __future__ import annotations

import threading
from typing import Any

from jinja2 import BytecodeCache
from jinja2.bccache import Bucket


class _InMemory(BytecodeCache):
    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)  # dropped by Jinja2 if the source changed

    def dump_bytecode(self, bucket: Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_caches: dict[tuple[Any, ...], _InMemory] = {}
_lock = threading.Lock()


def _signature(env: Any) -> tuple[Any, ...]:
    """What the compiled code of a template depends on besides its source."""
    return (
        env.block_start_string, env.block_end_string, env.variable_start_string,
        env.variable_end_string, env.comment_start_string, env.comment_end_string,
        env.line_statement_prefix, env.line_comment_prefix, env.trim_blocks,
        env.lstrip_blocks, env.newline_sequence, env.keep_trailing_newline,
        tuple(sorted(env.extensions)), env.optimized, env.undefined, env.finalize,
        env.autoescape, env.is_async, tuple(sorted(env.filters)), tuple(sorted(env.tests)),
    )  # fmt: skip


def install() -> None:
    """Wrap pyramid_jinja2's environment factory (once per process)."""
    import pyramid_jinja2

    create = pyramid_jinja2.create_environment_from_options
    if getattr(create, "shared_bytecode", False):
        return

    def create_with_cache(env_opts: dict[str, Any], loader_opts: dict[str, Any]) -> Any:
        env = create(env_opts, loader_opts)
        if env.bytecode_cache is None:
            with _lock:
                env.bytecode_cache = _caches.setdefault(_signature(env), _InMemory())
        return env

    create_with_cache.shared_bytecode = True  # type: ignore[attr-defined]
    pyramid_jinja2.create_environment_from_options = create_with_cache
