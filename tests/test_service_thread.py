"""The chronon loop on a thread of its own (issue 24.4: the budget comes first).

The real service (loop, fetcher, store, API) against the feed farm. The loop
ticks on the host's thread, never on the API's; an API handler that keeps the
API's event loop busy for many chronons does not stop the ticks (with
``PROXY_LOOP_THREAD=false`` it does: the same test, the other way round);
users' changes made over the API reach the engine and the evaluator on the
loop's thread, concurrent creates included.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest

from proxy.api import make_app
from proxy.farm import FeedFarm
from proxy.service import ProxyService
from tests.test_e2e_support import CHRONON, e2e_settings, eventually, running

pytestmark = pytest.mark.slow

#: How long the blocking handler holds its event loop, in chronons.
STALL_CHRONONS = 40


def _spin(seconds: float) -> None:
    """Hold the GIL's share of a busy handler: pure Python work, no I/O, no sleep."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(200))


async def _until(check: Any, within: float = 20.0) -> None:
    async def ok() -> bool:
        return bool(check())

    await eventually(ok, within=within)


async def test_the_loop_ticks_on_a_thread_of_its_own(sqlite_url: str) -> None:
    settings = e2e_settings(sqlite_url, lease_ttl_seconds=30)
    async with ProxyService(settings, housekeeping=False) as service:
        loop = service.loop
        seen: list[int] = []
        tick = loop.tick

        def recording(t: int, jitter: float) -> list[int]:
            seen.append(threading.get_ident())
            return tick(t, jitter)

        loop.tick = recording  # type: ignore[method-assign]
        await _until(lambda: len(seen) >= 5)
        assert service.host.threaded
        assert service.host.thread_id is not None
        assert service.host.thread_id != threading.get_ident()
        assert set(seen) == {service.host.thread_id}
    assert service.host.thread_id is None  # stopped: the thread was joined
    assert not any(t.name == "proxy-chronon-loop" for t in threading.enumerate())


@pytest.mark.parametrize("loop_thread", [True, False], ids=["own-thread", "shared-loop"])
async def test_a_handler_holding_the_apis_event_loop_does_not_stop_the_ticks(
    sqlite_url: str, loop_thread: bool
) -> None:
    settings = e2e_settings(sqlite_url, lease_ttl_seconds=30, loop_thread=loop_thread)
    async with ProxyService(settings, housekeeping=False) as service:
        app = make_app(settings, service=service, manage_service=False)
        during: list[int] = []

        @app.get("/test/stall")
        async def stall() -> dict[str, int]:
            # A handler that never awaits: the API's event loop runs nothing else meanwhile.
            before = service.loop.ticks
            _spin(STALL_CHRONONS * CHRONON)
            during.append(service.loop.ticks - before)
            return {"ticks": during[-1]}

        await _until(lambda: service.loop.ticks >= 3)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy.test") as client:
            assert (await client.get("/test/stall")).status_code == 200
        assert service.host.threaded is loop_thread
        if loop_thread:
            # Most of the stall's chronons ticked (a loaded machine may skip a few: the loop
            # jumps to the current chronon when late, it does not tick twice).
            assert during[0] >= STALL_CHRONONS // 4, during
        else:
            assert during[0] == 0


async def test_changes_over_the_api_reach_the_loops_thread(sqlite_url: str) -> None:
    """Concurrent creates, a replace, a ping, deletes: the evaluator holds what the database
    holds once each request has answered."""
    settings = e2e_settings(sqlite_url, lease_ttl_seconds=30)
    async with FeedFarm(["a", "b"], prefill=1) as farm, running(settings) as px:
        assert px.service.host.threaded
        ids = []
        for name in ("a", "b"):
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        token = r.json()["ping_token"]
        assert set(ids) <= set(px.service.runtime.feeds.by_id)

        def body(i: int, feed: int) -> dict[str, Any]:
            return {"name": f"p{i}", "rules": [
                {"name": "w", "watch": {"feeds": [str(feed)], "within": "1h"}}]}

        created = await asyncio.gather(*(px.post("/api/v1/profiles", body(i, ids[0]))
                                         for i in range(20)))
        assert [r.status_code for r in created] == [201] * 20, [r.text for r in created]
        pids = {str(r.json()["id"]) for r in created}
        evaluator = px.service.runtime.evaluator
        assert pids <= set(evaluator.profile_ids())

        first = created[0].json()["id"]
        r = await px.client.put(f"/api/v1/profiles/{first}", json=body(99, ids[1]),
                                headers=px.auth)
        assert r.status_code == 200, r.text
        r = await px.client.post(f"/api/v1/feeds/{ids[1]}/ping", headers={"X-Ping-Token": token})
        assert r.status_code == 202, r.text
        assert r.json()["operations"] >= 1  # the replaced profile's rule heard it

        for pid in list(pids)[:5]:
            r = await px.client.delete(f"/api/v1/profiles/{pid}", headers=px.auth)
            assert r.status_code == 204, r.text
        stored = {str(p.id) for p in await px.service.store.all_profiles()}
        assert set(evaluator.profile_ids()) == stored
        await px.service.flush()
