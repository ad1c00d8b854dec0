"""``ztq.worker.pytest_plugin``: the plugin path documented first. The fixtures live in
``ztq.worker.testing.pytest_plugin``, which pytest loads by itself (ztq's ``pytest11`` entry
point); a conftest's ``pytest_plugins = ["ztq.worker.pytest_plugin"]`` still works, with
autoloading off too (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``): pytest loads the fixtures' module
through the line below, once. Not an alias of that module (as the other old paths are):
pytest refuses one module object registered under two names."""

pytest_plugins = ["ztq.worker.testing.pytest_plugin"]
