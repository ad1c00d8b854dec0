"""ztq benchmarks against RQ, huey, dramatiq, Celery and arq: ``make bench`` (see run.py)."""
