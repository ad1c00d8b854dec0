"""``ztq.worker.pytest_plugin``: the documented plugin path; the module is
``ztq.worker.testing.pytest_plugin``, and importing either gives the same module object."""

import sys

from ztq.worker.testing import pytest_plugin as _module

sys.modules[__name__] = _module
