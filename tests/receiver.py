"""A webhook receiver for the delivery tests: a real aiohttp server on 127.0.0.1.

(No tests here.) It records every request (headers, body, arrival time) and
answers as its ``mode`` says: ``ok`` (204), ``error`` (500), ``hang`` (sleeps
longer than any test timeout), ``gone`` (410), or ``retry_after`` (one 503 with
``Retry-After: N`` per message id, then 204). ``stop()`` and ``start()`` on the
same port simulate a receiver that is down (connection refused) and comes back.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from proxy.ports import free_port


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float
    status: int
    path: str

    @property
    def msg_id(self) -> str:
        return self.headers.get("webhook-id", "")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    port: int = field(default_factory=free_port)
    mode: str = "ok"
    retry_after: int = 1
    requests: list[Received] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _told_to_wait: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        mode = self.mode
        status = 204
        headers: dict[str, str] = {}
        if mode == "error":
            status = 500
        elif mode == "gone":
            status = 410
        elif mode == "retry_after":
            msg = request.headers.get("webhook-id", "")
            if msg not in self._told_to_wait:
                self._told_to_wait.add(msg)
                status, headers = 503, {"Retry-After": str(self.retry_after)}
        self.requests.append(Received(
            {k.lower(): v for k, v in request.headers.items()}, body, time.monotonic(),
            status if mode != "hang" else 0, request.path))
        if mode == "hang":
            await asyncio.sleep(3600)
        return web.Response(status=status, headers=headers)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Receiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def acknowledged(self) -> set[str]:
        """Message ids answered with a 2xx."""
        return {r.msg_id for r in self.requests if 200 <= r.status < 300}

    def by_id(self, msg_id: str) -> list[Received]:
        return [r for r in self.requests if r.msg_id == msg_id]
