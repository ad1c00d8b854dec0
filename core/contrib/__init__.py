"""Integrations with other frameworks: Django and SQLAlchemy / Flask-SQLAlchemy (enqueue on
commit), Pyramid (the app from the Pyramid settings, pyramid_tm's ``request.tm``),
OpenTelemetry and Sentry (middleware) and the ZTQ compat layer.

May import anything of ``ztq.core`` and, inside the module that needs it, the framework it
integrates (an optional dependency). Nothing of ``ztq.core`` imports this package.
"""
