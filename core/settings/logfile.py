"""``--log-config FILE``: logging's own configuration, as Python reads it, for the worker,
the ``ztq`` commands and the console: a ``.json`` file is a ``logging.config.dictConfig``
dict, any other file an ``.ini`` of ``logging.config.fileConfig``. No other format (YAML
would be a dependency for one file).

ztq's loggers exist before the file is read, so ``disable_existing_loggers`` defaults to
false here (logging's own default, true, would silence ``ztq.runs`` unless the file names
it); a file that says true keeps it. Whatever is wrong with the file (missing, not JSON, a
class that does not import, a handler that cannot open its file) is one
:class:`ConfigError` naming the file, never a traceback.
"""

from __future__ import annotations

import configparser
import json
import logging.config
from pathlib import Path

from ztq.core.errors import ConfigError


def load_logging_file(path: str | Path) -> None:
    """Configure logging from ``path`` (see the module header); ConfigError when it fails."""
    file = Path(path)
    try:
        if file.suffix.lower() == ".json":
            config = json.loads(file.read_text("utf-8"))
            if not isinstance(config, dict):
                raise ValueError("a dictConfig file holds one JSON object")
            config.setdefault("disable_existing_loggers", False)
            logging.config.dictConfig(config)
        else:
            if not file.is_file():  # fileConfig says only that no [formatters] section exists
                raise FileNotFoundError(f"no such file: {file}")
            logging.config.fileConfig(file, disable_existing_loggers=False)
    except (OSError, ValueError, TypeError, KeyError, ImportError, AttributeError,
            configparser.Error, RuntimeError) as exc:  # fmt: skip
        raise ConfigError(f"--log-config {file}: {type(exc).__name__}: {exc}") from exc
