"""A task module whose import raises, as a project's may when a setting it reads is missing:
the worker says so in one line with this file's line (tests/bad_inputs.py)."""

import os

SMTP_HOST = os.environ["ZTQ_TEST_NO_SUCH_SMTP_HOST"]  # never set: the import raises KeyError
