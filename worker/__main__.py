"""``python -m ztq.worker ...`` is ``ztq worker ...``."""

import sys

from ztq.worker.cli.commands import main

sys.exit(main(["worker", *sys.argv[1:]]))
