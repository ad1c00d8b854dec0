"""``python -m ztq.console`` (and ``ztq console``, which runs it): the console served by
waitress from the settings and the environment alone, no ini file needed.

``--print-config`` prints the ``app.ini`` that ships in the package (the repository's own,
``console/app.ini``) and exits: what a pip user, who has no checkout, starts from
(``ztq console --print-config > /etc/ztq/app.ini``).

``--ini FILE`` reads an ``app.ini`` as ``pserve`` would (``[app:main]``, its ``[server:main]``
waitress options and its logging sections); ``--host`` / ``--port`` override where it
listens (default ``127.0.0.1:6543``); ``--log-config FILE`` configures logging from a
.json dictConfig or an .ini fileConfig (:mod:`ztq.core.settings.logfile`), after the ini's
own logging sections. A setting the console cannot use is one line on
stderr naming it (and its ini line, where it has one), exit 2: ``pserve`` shows the same
:class:`~ztq.core.errors.ConfigError` with the traceback of the app factory.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from ztq.core.errors import ZtqError
from ztq.core.settings.logfile import load_logging_file

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 6543
LOG_FORMAT = "%(asctime)s %(levelname)-5.5s [%(name)s] %(message)s"  # app.ini's


class Refused(Exception):
    """What stops the console from starting, said in one line (exit 2)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ztq console",
        description="serve the ztq console with waitress (settings: docs/settings.md)",
    )
    parser.add_argument("--host", help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument("--ini", metavar="FILE", help="an app.ini: its [app:main] settings, "
                        "[server:main] waitress options and logging")  # fmt: skip
    parser.add_argument("--log-config", metavar="FILE", help="logging's own configuration, "
                        "after the ini's: a .json dictConfig or an .ini fileConfig")  # fmt: skip
    parser.add_argument("--print-config", action="store_true",
                        help="print a commented app.ini to start from, and exit")  # fmt: skip
    return parser


def shipped_ini() -> str:
    """The app.ini in the package: the file ``pserve`` and ``--ini`` read, with its comments."""
    from importlib import resources

    return resources.files("ztq.console").joinpath("app.ini").read_text("utf-8")


def _read_ini(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """([app:main] settings, [server:main] waitress options) of ``path``."""
    import plaster

    if not path.is_file():
        raise Refused(f"no ini file {path}")
    try:
        loader = plaster.get_loader(str(path), protocols=["wsgi"])
        app = dict(loader.get_settings("app:main"))
        server = dict(loader.get_settings("server:main"))
        if "loggers" in loader.get_sections():  # else the logging of no ini, below
            loader.setup_logging({})
    except Exception as exc:  # a file plaster or the logging config cannot read
        raise Refused(f"cannot read {path}: {type(exc).__name__}: {exc}") from exc
    server.pop("use", None)
    return app, server


def make_app(ini: Path | None, log_config: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The console's WSGI app and the waitress options of the ini (none without one); the
    logging of ``log_config`` after the ini's own, before the app reads its settings."""
    from ztq.console import main

    settings, server = _read_ini(ini) if ini is not None else ({}, {})
    if log_config:  # after the ini's logging sections: the file wins
        load_logging_file(log_config)
    if ini is None:
        return main({}), {}
    return main({"__file__": str(ini), "here": str(ini.parent)}, **settings), server


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.print_config:
        sys.stdout.write(shipped_ini())
        return 0
    ini = Path(args.ini).resolve() if args.ini else None
    try:
        app, server = make_app(ini, args.log_config)
        if not logging.getLogger().handlers:  # "Serving on ..." and errors, on stderr
            logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
        if args.host or args.port or not server.get("listen"):
            server.pop("listen", None)
            server["host"] = args.host or server.get("host") or DEFAULT_HOST
            server["port"] = args.port or server.get("port") or DEFAULT_PORT
        server.setdefault("threads", 8)
        # the console decides whom to believe (ztq.console.trusted_proxies): waitress must
        # hand X-Forwarded-* on, as app.ini's [server:main] says
        server.setdefault("clear_untrusted_proxy_headers", False)
        from waitress import create_server

        try:
            listening = create_server(app, **server)
        except OSError as exc:
            where = server.get("listen") or f"{server['host']}:{server['port']}"
            raise Refused(f"cannot listen on {where}: {exc}") from exc
        except ValueError as exc:  # waitress: an option it does not know or cannot parse
            raise Refused(f"[server:main] of {ini}: {exc}") from exc
    except (ZtqError, Refused) as exc:
        print(f"ztq console: {exc}", file=sys.stderr)
        return 2
    listening.print_listen("Serving on http://{}:{}")
    # SIGTERM (a supervisor, docker stop) ends it as Ctrl-C does: waitress closes its sockets
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    listening.run()  # returns on SystemExit and KeyboardInterrupt
    return 0


if __name__ == "__main__":
    sys.exit(run())
