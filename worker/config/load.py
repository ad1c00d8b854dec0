"""``load_config``: the worker's settings from flags, the environment and one ini file."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import fields

from ztq.core import settings
from ztq.core.client.apps import connection_flags, load_app
from ztq.core.errors import ConfigError
from ztq.worker.config.queues import (
    check_scaled,
    parse_queue_entry,
    parse_queue_flag,
    parse_scale_entry,
)
from ztq.worker.config.specs import FIELD, ScaleSpec, ThreadSpec, WorkerConfig
from ztq.worker.config.table import TABLE, WORKER

log = logging.getLogger("ztq.worker.config")


def load_config(path: str | os.PathLike[str] | None = None, **overrides: object) -> WorkerConfig:
    """The worker's settings: ``overrides`` (flags) > environment > the ini at ``path`` > default.

    ``overrides`` are :class:`WorkerConfig` fields; ``None``, ``()`` and ``[]`` mean "not
    given". ``threads`` come from the flags, else ``ZTQ_QUEUES``, else ``[queues]``, else
    one thread on ``default``; ``burst`` is a flag only.
    """
    known = {f.name for f in fields(WorkerConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"load_config() got unknown settings: {', '.join(unknown)}")
    given = {k: v for k, v in overrides.items() if v is not None and v != () and v != []}
    ini = settings.read_ini(path, TABLE) if path is not None else None
    ours = {*settings.WORKER_SECTIONS, *settings.QUEUE_SECTIONS, settings.APP_SECTION}
    if ini is not None and not ini.sections & ours:
        raise ConfigError(f"{ini.path}: no [server] or [queues] section")
    flags = {name: given.get(FIELD.get(name, name)) for name in WORKER}
    got = settings.resolve(TABLE, WORKER, flags=flags, ini=ini.values if ini else None)
    if got["app"].value:  # an app's own Redis URL and prefix are flags (docs/settings.md)
        app = load_app(got["app"].value)
        url_flag, prefix_flag = flags["redis_url"], flags["prefix"]
        url, prefix = connection_flags(  # resolve() above refused any flag but a str or None
            app,
            url_flag if isinstance(url_flag, str) else None,
            prefix_flag if isinstance(prefix_flag, str) else None,
        )
        if (url, prefix) != (flags["redis_url"], flags["prefix"]):
            flags |= {"redis_url": url, "prefix": prefix}
            got = settings.resolve(TABLE, WORKER, flags=flags, ini=ini.values if ini else None)
    values: dict[str, object] = {FIELD.get(n, n): r.value for n, r in got.items()}
    threads: list[ThreadSpec] = []
    scaled: list[ScaleSpec] = []
    for entry in ini.queues if ini else ():
        scale = parse_scale_entry(entry.key, entry.raw, f"{entry.where}: ")
        if scale is not None:
            scaled.append(scale)
            threads += scale.initial()
            continue
        threads += parse_queue_entry(
            entry.key, entry.raw, f"{entry.where}: ", ztq_style=ini is not None and ini.ztq_style
        )
    listed = values.pop("queues")  # ZTQ_QUEUES: --queue's entries, which replace [queues]
    if listed:
        source = got["queues"].source
        threads, scaled = [], []
        for entry in listed:  # type: ignore[attr-defined]
            spec = parse_queue_flag(entry, source=source)
            if isinstance(spec, ScaleSpec):
                scaled.append(spec)
                threads += spec.initial()
            else:
                threads += spec
    if ini is not None and "log" in ini.sections:
        log.warning(
            "%s: [log] is ZTQ's logging section and is not read: ztq logs to stderr "
            "(--log-level, --log-format or ZTQ_LOG_LEVEL; redirect stderr to a file)",
            ini.path,
        )
    flag_threads: Sequence[ThreadSpec] = given.get("threads") or ()  # type: ignore[assignment]
    flag_scaled: Sequence[ScaleSpec] = given.get("scaled") or ()  # type: ignore[assignment]
    if flag_threads or flag_scaled:  # the flags' queues replace the file's
        threads = [*flag_threads, *(t for s in flag_scaled for t in s.initial())]
        scaled = list(flag_scaled)
    values["scaled"] = tuple(scaled)
    values["threads"] = tuple(threads) or (
        () if scaled else (ThreadSpec("default-0", ("default",)),)
    )
    values.update({k: v for k, v in given.items() if k not in values})  # burst
    cfg = WorkerConfig(**values)  # type: ignore[arg-type]
    check_scaled(cfg)
    if cfg.lease < 2 * cfg.heartbeat:
        raise ConfigError(
            f"lease ({cfg.lease:g}s, from {got['lease'].source}) must be at least twice the "
            f"heartbeat ({cfg.heartbeat:g}s, from {got['heartbeat'].source})"
        )
    return cfg
