"""``GET /api/v1/cluster`` names the lease's holder as the one leader (issue 21).

Two schedulers' heartbeats on a real store (SQLite and PostgreSQL), the lease
moving from one to the other while the first, killed, never clears its claim.
The service's wall clock is injected, so the lease expires without waiting.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx
import pytest

from proxy.api import make_app
from proxy.cluster.heartbeat import Heartbeat
from proxy.service import ProxyService
from proxy.service.leader import LOOP_LEASE
from tests.test_e2e_support import e2e_settings

T0 = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)
TTL = 10.0


class Wall:
    """The one clock of the service, the heartbeats and the leases: seconds after ``T0``."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return T0.timestamp() + self.seconds

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self(), dt.UTC)


@pytest.fixture
def wall() -> Wall:
    return Wall()


@pytest.fixture
async def service(database_url: str, wall: Wall) -> AsyncIterator[ProxyService]:
    settings = e2e_settings(database_url, heartbeat_seconds=5.0)
    the_service = ProxyService(settings, run_loop=False, housekeeping=False, wall=wall)
    await the_service.start()
    try:
        yield the_service
    finally:
        await the_service.stop()


async def test_a_killed_leader_stops_leading_the_moment_the_lease_moves(
    service: ProxyService, wall: Wall
) -> None:
    store = service.store
    _, key = await store.create_user("alice")
    app = make_app(service.settings, service=service, manage_service=False)
    a_lease = await store.acquire_lease(LOOP_LEASE, "holder-a", now=wall.now(), ttl=TTL)
    assert a_lease is not None
    leading: dict[str, int | None] = {"a": a_lease.epoch, "b": None}
    beats = {name: Heartbeat(store, role="scheduler", host=name, port=8000, every=5.0,
                             holder=f"holder-{name}", leads=partial(leading.get, name),
                             wall=wall)
             for name in ("a", "b")}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://proxy.test",
                                 headers={"Authorization": f"Bearer {key}"}) as http:

        async def listed() -> dict[str, tuple[bool, int | None]]:
            r = await http.get("/api/v1/cluster")
            assert r.status_code == 200, r.text
            body: list[dict[str, Any]] = r.json()
            return {p["host"]: (p["leads"], p["epoch"]) for p in body}

        for beat in beats.values():
            await beat.beat()
        assert await listed() == {"a": (True, 1), "b": (False, None)}

        # a is killed (SIGKILL): no more beats, its row still claims epoch 1 for three beats.
        wall.seconds = TTL  # the lease lapses; b has not campaigned yet
        assert await listed() == {"a": (False, None), "b": (False, None)}
        b_lease = await store.acquire_lease(LOOP_LEASE, "holder-b", now=wall.now(), ttl=TTL)
        assert b_lease is not None and b_lease.epoch == 2
        # At once, before b's next heartbeat: the lease names b.
        assert await listed() == {"a": (False, None), "b": (True, 2)}
        leading["b"] = b_lease.epoch
        wall.seconds += 1
        await beats["b"].beat()
        assert await listed() == {"a": (False, None), "b": (True, 2)}
