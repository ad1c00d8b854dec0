"""``ztq.core.compat``: the path documented before the packages; the module is
``ztq.core.contrib.compat``, and importing either gives the same module object."""

import sys

from ztq.core.contrib import compat as _module

sys.modules[__name__] = _module
