"""The budget comes first (issue 24.4): heavy reads reused, keys remembered, few requests at once.

The figures (probes per second and tick jitter under `wrk -c20`) come from
``benchmarks/machinery/bench_api_load.py``; these tests pin the behaviour that
makes them: one computation per key however many clients ask at once, reads
that see the client's own writes at once, a revoked key refused after the
remembered second, and never more than ``PROXY_API_CONCURRENCY`` requests in
progress. Clocks are driven by hand; nothing here depends on timing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from proxy.api._admission import Admission
from proxy.api._cache import ProfilePages, ResponseCache, TtlMap
from tests.test_api import Api, _feeds, api  # noqa: F401  (api is a fixture)
from tests.test_e2e_support import motivating


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_response_cache_builds_once_for_concurrent_requests() -> None:
    clock = FakeClock()
    cache = ResponseCache(clock=clock)
    gate = asyncio.Event()
    calls = 0

    async def build() -> bytes:
        nonlocal calls
        calls += 1
        await gate.wait()
        return b"[1]"

    waiters = [asyncio.ensure_future(cache.get("k", 0, 1.0, build)) for _ in range(20)]
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(*waiters) == [b"[1]"] * 20
    assert calls == 1 == cache.builds
    clock.now += 0.5
    assert await cache.get("k", 0, 1.0, build) == b"[1]" and calls == 1  # fresh: reused
    assert await cache.get("k", 1, 1.0, build) == b"[1]" and calls == 2  # new version: rebuilt
    clock.now += 1.0
    assert await cache.get("k", 1, 1.0, build) == b"[1]" and calls == 3  # too old: rebuilt


async def test_response_cache_shares_a_failure_and_builds_again_next_time() -> None:
    cache = ResponseCache(clock=FakeClock())
    attempts = 0

    async def build() -> bytes:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise RuntimeError("database away")
        return b"{}"

    with pytest.raises(RuntimeError, match="database away"):
        await cache.get("k", 0, 1.0, build)
    assert await cache.get("k", 0, 1.0, build) == b"{}"


async def test_a_cancelled_reader_does_not_cancel_the_shared_build() -> None:
    cache = ResponseCache(clock=FakeClock())
    gate = asyncio.Event()

    async def build() -> bytes:
        await gate.wait()
        return b"x"

    first = asyncio.ensure_future(cache.get("k", 0, 1.0, build))
    second = asyncio.ensure_future(cache.get("k", 0, 1.0, build))
    await asyncio.sleep(0)
    first.cancel()
    gate.set()
    assert await second == b"x"
    assert first.cancelled()


def test_ttl_map_expires_and_stays_bounded() -> None:
    clock = FakeClock()
    keys = TtlMap(1.0, max_entries=3, clock=clock)
    keys.put("a", 1)
    assert keys.get("a") == 1
    clock.now += 1.0
    assert keys.get("a") is None
    for i in range(5):
        keys.put(i, i)
    assert [keys.get(i) for i in range(5)] == [None, None, 2, 3, 4]


async def test_admission_keeps_at_most_limit_requests_in_progress() -> None:
    app = FastAPI()
    state = {"now": 0, "peak": 0}
    gate = asyncio.Event()

    @app.get("/work")
    async def work() -> dict[str, int]:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await gate.wait()
        state["now"] -= 1
        return {"ok": 1}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.add_middleware(Admission, limit=3)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        requests = [asyncio.ensure_future(client.get("/work")) for _ in range(12)]
        for _ in range(50):
            await asyncio.sleep(0)
        assert state["now"] == 3
        # Health answers while every slot is taken.
        assert (await client.get("/healthz")).status_code == 200
        gate.set()
        assert [r.status_code for r in await asyncio.gather(*requests)] == [200] * 12
    assert state["peak"] == 3


async def test_listing_and_summary_show_the_clients_own_writes_at_once(api: Api) -> None:  # noqa: F811
    mish, cnn, money = await _feeds(api, 3)
    assert (await api.client.get("/api/v1/profiles", headers=api.h())).json()["items"] == []
    assert (await api.client.get("/api/v1/metrics/summary", headers=api.h())).json()["profiles"] == []
    body: Any = motivating(mish, cnn, money)
    created = (await api.client.post("/api/v1/profiles", json=body, headers=api.h())).json()
    listed = (await api.client.get("/api/v1/profiles", headers=api.h())).json()["items"]
    assert listed == [created | {"new_targets": []}]
    summary = (await api.client.get("/api/v1/metrics/summary", headers=api.h())).json()
    assert [p["profile_id"] for p in summary["profiles"]] == [created["id"]]
    renamed = (await api.client.put(f"/api/v1/profiles/{created['id']}", json=body | {"name": "new"},
                                    headers=api.h())).json()
    assert (await api.client.get("/api/v1/profiles", headers=api.h())).json()["items"] == [renamed]
    assert (await api.client.delete(f"/api/v1/profiles/{created['id']}", headers=api.h())).status_code == 204
    assert (await api.client.get("/api/v1/profiles", headers=api.h())).json()["items"] == []
    # Another user's listing is its own.
    assert (await api.client.get("/api/v1/profiles", headers=api.h("bob"))).json()["items"] == []


async def test_a_revoked_key_is_refused_once_its_remembered_second_is_over(api: Api) -> None:  # noqa: F811
    transport = api.client._transport
    assert isinstance(transport, httpx.ASGITransport)
    app: Any = transport.app
    clock = FakeClock()
    app.state.api_keys = TtlMap(1.0, clock=clock)
    assert (await api.client.get("/api/v1/profiles", headers=api.h())).status_code == 200
    assert await api.service.store.revoke_api_key(api.keys["alice"])
    # Within the second the key was remembered for, it is still taken (no query per request)…
    assert (await api.client.get("/api/v1/profiles", headers=api.h())).status_code == 200
    clock.now += 1.0
    # …then looked up again, and refused.
    assert (await api.client.get("/api/v1/profiles", headers=api.h())).status_code == 401


async def test_a_profile_page_is_computed_once_however_many_clients_poll_it(api: Api) -> None:  # noqa: F811
    mish, cnn, money = await _feeds(api, 3)
    for name in ("a", "b", "c"):
        body: Any = motivating(mish, cnn, money) | {"name": name}
        assert (await api.client.post("/api/v1/profiles", json=body, headers=api.h())).status_code == 201
    transport = api.client._transport
    assert isinstance(transport, httpx.ASGITransport)
    cache: ProfilePages = transport.app.state.profile_pages  # type: ignore[attr-defined]
    builds = cache.builds
    pages = await asyncio.gather(*(api.client.get("/api/v1/profiles", params={"limit": 2},
                                                  headers=api.h()) for _ in range(10)))
    assert cache.builds == builds + 1
    assert {r.text for r in pages} == {pages[0].text}
    first = pages[0].json()
    assert [p["name"] for p in first["items"]] == ["a", "b"]
    assert pages[0].headers["Link"] == f'<{first["next"]}>; rel="next"'  # kept with the body
    rest = await api.client.get(first["next"], headers=api.h())  # another query: another page
    assert [p["name"] for p in rest.json()["items"]] == ["c"] and "Link" not in rest.headers
    assert cache.builds == builds + 2
