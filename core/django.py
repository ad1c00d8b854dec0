"""``ztq.core.django``: the path documented before the packages; the module is
``ztq.core.contrib.django``, and importing either gives the same module object."""

import sys

from ztq.core.contrib import django as _module

sys.modules[__name__] = _module
