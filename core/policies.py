"""``ztq.core.policies``: the path documented before the packages; the module is
``ztq.core.middleware.policies``, and importing either gives the same module object."""

import sys

from ztq.core.middleware import policies as _module

sys.modules[__name__] = _module
