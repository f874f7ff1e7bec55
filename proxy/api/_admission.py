"""Admission: at most N API requests in progress at once, the others wait their turn (issue 24.4).

The API shares its event loop with the chronon loop: each request in progress
puts a callback in every turn of the event loop, so twenty busy clients made
twenty callbacks for every one of a probe's, and probes crawled. Admitting a
few requests at a time keeps the API's share of each turn small whatever the
number of clients; the others wait (FIFO, costing nothing) and are served as
fast as the CPU allows. Long-lived, health and plan endpoints are never held
back (the event stream would hold a slot for ever; probes of liveness must
answer; plans wait for one another under their own lock).

What it does not do: refuse requests (no 503 on overload: they queue), or
limit per client (that is a reverse proxy's job).
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["Admission"]

# The event stream lasts for ever; health must answer at once; a plan runs for seconds in a
# worker thread, one at a time under its own lock (waiting plans must not hold every slot).
EXEMPT_PATHS = frozenset({"/api/v1/events", "/api/v1/plan", "/healthz", "/readyz", "/metrics"})


class Admission:
    """Pure ASGI middleware: ``limit`` HTTP requests through at once, except ``EXEMPT_PATHS``."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self._slots: asyncio.Semaphore | None = None  # made on the serving event loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        async with self._slots:
            await self.app(scope, receive, send)
