"""The console's views, one module per page family (found by ``config.scan``)."""
