"""The console's views, one module per page family (found by ``config.scan``).

May import: ``ztq.core`` and the console's own modules (``web``, ``security``,
``rendering``, ...). Only the console's ``main`` imports a view module by name (to start
the alerts' evaluation); the rest are found by the scan.
"""
