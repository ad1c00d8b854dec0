"""Every ztq setting, resolved in one place by one rule: flag > environment > ini > default.

The worker (``ztq.worker.config.load_config``), the console (``ztq.console.config.load``),
the ``ztq`` commands and :func:`ztq.core.connect` all resolve through :func:`resolve`, so a
worker and a console started with the same environment and ini look at the same Redis keys.

- **flag**: an explicit argument (a command-line flag, ``connect(url, prefix=...)``,
  ``load_config(path, lease=...)``). ``None`` or ``""`` means "not given".
- **environment**: ``ZTQ_<NAME>`` (``ZTQ_REDIS_URL``, ``ZTQ_PREFIX``, ``ZTQ_LEASE``, ...;
  the console's keep ``ZTQ_CONSOLE_<NAME>``), read when resolving, never at import time. An
  empty variable counts as unset.
- **ini**: ``ztq.<name>`` in ``[app:main]`` of ``app.ini`` (for the console these are the
  Pyramid settings), and the worker's short keys in ``[server]`` or ``[ztq:worker]``
  (``redis``, ``prefix``, ``lease``, ``name``/``alias``, ``modules``, ...). A setting given in
  both places with different values is a :class:`ConfigError` naming both: a worker and a
  console reading one ``app.ini`` must never disagree. An empty value counts as unset.
- **default**: the ``default`` of the setting's table.

Every bad value raises :class:`ConfigError` naming the setting and where the value came
from: ``flag lease``, ``environment variable ZTQ_LEASE``, ``worker.ini:5``.

The package holds the mechanism and core's own table; each component declares its table
next to its code and hands it in (``resolve(table, names, ...)``, ``read_ini(path, table)``).
``parsers`` checks values, ``resolver`` holds :class:`Setting` and :func:`resolve`, ``ini``
reads the files, ``table`` is core's table, ``redis_systems`` the default Redis and the
others of ``systems``, ``redis_urls`` the Sentinel URL form and password masking,
``logfile`` the ``--log-config`` file (logging's dictConfig or fileConfig).

May import: ``ztq.core.errors`` only: the engine, the alerts, the worker and the console
all build on it.
"""

from __future__ import annotations

from ztq.core.settings.ini import (
    APP_SECTION,
    QUEUE_SECTIONS,
    WORKER_SECTIONS,
    ZTQ_REDIS_KEYS,
    IniFile,
    app_values,
    by_app_key,
    by_worker_key,
    line_of,
    merge,
    read_ini,
    worker_values,
    ztq_redis_url,
)
from ztq.core.settings.parsers import (
    NAME,
    PREFIX_NAME,
    SYSTEM_NAME,
    app_spec,
    boolean,
    choice,
    host_port,
    key_prefix,
    module_list,
    number,
    redis_url,
    system_list,
    system_name,
    text,
    webhook_url,
    worker_name,
)
from ztq.core.settings.redis_systems import (
    DEFAULT_SYSTEM,
    ConnectionSettings,
    System,
    command_connection,
    connection,
    systems,
    systems_of,
)
from ztq.core.settings.resolver import IniValue, Resolved, Setting, Table, by_name, parse, resolve
from ztq.core.settings.table import BY_NAME, CONNECTION, LOGGING, SETTINGS

__all__ = [
    "APP_SECTION", "BY_NAME", "CONNECTION", "DEFAULT_SYSTEM", "LOGGING", "NAME", "PREFIX_NAME",
    "QUEUE_SECTIONS", "SETTINGS", "SYSTEM_NAME", "WORKER_SECTIONS", "ZTQ_REDIS_KEYS",
    "ConnectionSettings", "IniFile", "IniValue", "Resolved", "Setting", "System", "Table",
    "app_spec", "app_values", "boolean", "by_app_key", "by_name", "by_worker_key", "choice",
    "command_connection", "connection", "host_port", "key_prefix", "line_of", "merge",
    "module_list", "number", "parse", "read_ini", "redis_url", "resolve", "system_list",
    "system_name", "systems", "systems_of", "text", "webhook_url", "worker_name",
    "worker_values", "ztq_redis_url",
]  # fmt: skip
