"""Console sign-in state kept in Redis: password hashes, sessions, API tokens and the
login throttle. The console uses it to sign people in; the ``ztq`` command to create
users and tokens, which is why it lives in core rather than in the console.

May import: ``ztq.core.errors`` and the engine. Nothing of the client API.
"""
