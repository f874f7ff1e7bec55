"""REST API (FastAPI): ``make_app(settings, *, service=None)``; OpenAPI at ``/docs``.

Routers per resource (``routes_feeds``, ``routes_profiles``), response schemas
(``schemas``), the bearer-key dependency (``deps``). Handlers are thin: they call
the :class:`~proxy.service.ProxyService` (anything that changes the engine) or
its store (reads) and never run SQL.
"""

from proxy.api.app import make_app

__all__ = ["make_app"]
