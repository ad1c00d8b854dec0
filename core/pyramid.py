"""``ztq.core.pyramid``: the path documented before the packages; the module is
``ztq.core.contrib.pyramid``, and importing either gives the same module object."""

import sys

from ztq.core.contrib import pyramid as _module

sys.modules[__name__] = _module
