"""Alerts: rules over the monitoring read models, evaluated by the console or ``ztq
alerts``, with state shared in Redis so that several consoles send each alert once.

``rules`` parses and checks the rule text, ``webhook`` posts what fires, ``alerter``
evaluates a round and holds the reads of the alerts page, ``settings`` declares the
``alerts.*`` settings (resolved by ``ztq.core.settings`` like every other).

May import: ``ztq.core.errors``, ``ztq.core.settings``, the engine and the monitor package.
"""
