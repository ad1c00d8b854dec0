"""ztq against its own past (issue 38): today's tree and a git ref side by side in one run.

``python -m bench.past`` (``make bench``, ``make bench-past``, ``make bench-quick``); what it
measures and how is said in docs/benchmarks.md, section "Against ztq's own past", which
``--out`` rewrites. ``venvs`` builds each side's venv, ``driver`` (with ``tasks``) is what
runs in it, ``plan`` lists the measures and ``report`` makes the tables.
"""
