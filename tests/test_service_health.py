"""``/healthz`` is liveness (the loop ticks), ``/readyz`` readiness; both say what is wrong."""

from __future__ import annotations

import httpx

from proxy.aio import cancel_and_wait
from proxy.api import make_app
from proxy.service import ProxyService
from tests.test_e2e_support import e2e_settings, eventually


async def test_a_stuck_loop_fails_liveness_and_readiness_saying_so(sqlite_url: str) -> None:
    settings = e2e_settings(sqlite_url, lease_ttl_seconds=30)
    async with ProxyService(settings, housekeeping=False) as service:
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            async def ready() -> bool:
                return (await client.get("/readyz")).status_code == 200

            await eventually(ready, within=20, what="/readyz 200")
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            # The loop stops ticking (as if stuck) and its last tick is a minute old.
            assert service._loop_task is not None and service.loop.last_tick is not None
            await cancel_and_wait(service._loop_task)
            service.loop.last_tick -= 60
            live = await client.get("/healthz")
            assert live.status_code == 503
            assert live.headers["content-type"] == "application/problem+json"
            assert live.json()["type"].endswith(":stalled") and live.json()["status"] == 503
            assert "chronon loop: no tick for 6" in live.json()["detail"]
            body = (await client.get("/readyz")).json()
            assert body["ready"] is False and body["ticking"] is False and body["database"] is True
            assert body["detail"].startswith("chronon loop: no tick for")
