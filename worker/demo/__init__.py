"""``make run``: an embedded Redis, a worker, the console and demo tasks, with a one-screen
summary in the terminal. ``run`` starts and watches the processes, ``screen`` draws the
terminal, ``tasks`` are the demo's task functions (imported by the demo worker).

May import: ``ztq.core`` and ``ztq.worker``; the console runs as a process of its own
(``pserve``), never imported. Nothing else imports this package.
"""

# seconds the demo worker runs before its exit starts it again (not a crash loop); here,
# not in ``run``, so that a test can read it without importing the demo's tasks (their cron
# entry would join the default app of the test process)
RESTART_AFTER = 5.0
