"""The wire under the engine's scripts: RESP framing and held connections (``framing``),
and the in-memory Redis of ``memory://`` URLs (``memory``: fakeredis, for tests).

May import: redis-py, fakeredis, ``ztq.core.errors`` and the standard library only; the
engine's scripts and connection modules import it.
"""
