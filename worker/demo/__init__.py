"""``make run``: an embedded Redis, a worker, the console and demo tasks, with a one-screen
summary in the terminal. ``run`` starts and watches the processes, ``screen`` draws the
terminal, ``tasks`` are the demo's task functions (imported by the demo worker).

May import: ``ztq.core`` and ``ztq.worker``; the console runs as a process of its own
(``pserve``), never imported. Nothing else imports this package.
"""
