"""``ztq.core.otel``: the path documented before the packages; the module is
``ztq.core.contrib.otel``, and importing either gives the same module object."""

import sys

from ztq.core.contrib import otel as _module

sys.modules[__name__] = _module
