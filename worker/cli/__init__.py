"""The ``ztq`` command: ``ztq worker`` and the operator's commands (info, queues, errors,
redo, purge, users, tokens, alerts, ...), for terminals and scripts.

``main`` parses the command line and dispatches, ``ops`` holds the operator's commands,
``terminal`` the tables, colours and progress bars, ``alerts`` the ``ztq alerts`` loop.

May import: all of ``ztq.core`` and the worker process (``ztq.worker``). Never the
console: what the console and the terminal both show comes from ``ztq.core.monitor``. Nothing
of the worker process imports this package (``python -m ztq.worker`` is its entry).
"""

from ztq.worker.cli.commands import main

__all__ = ["main"]
