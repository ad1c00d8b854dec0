"""``python -m ztq.worker.demo`` (what ``make run`` calls)."""

import sys

from ztq.worker.demo.run import main

sys.exit(main())
