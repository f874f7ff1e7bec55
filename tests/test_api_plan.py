"""``GET /api/v1/plan``: each user plans their own profiles only, from the running service's models."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.api import make_app
from proxy.service import ProxyService
from tests.test_e2e_support import e2e_settings


class Client:
    def __init__(self, client: httpx.AsyncClient, keys: dict[str, str]) -> None:
        self.client = client
        self.keys = keys

    async def call(self, user: str, method: str, path: str, **kw: Any) -> httpx.Response:
        return await self.client.request(method, path, headers={"Authorization": f"Bearer {self.keys[user]}"}, **kw)

    async def feed(self, user: str, url: str) -> str:
        r = await self.call(user, "POST", "/api/v1/feeds", json={"url": url})
        assert r.status_code in (200, 201), r.text
        return str(r.json()["id"])

    async def profile(self, user: str, body: dict[str, Any]) -> None:
        r = await self.call(user, "POST", "/api/v1/profiles", json=body)
        assert r.status_code == 201, r.text


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[Client]:
    settings = e2e_settings(database_url)  # budget 4, 50 ms chronons
    service = ProxyService(settings, run_loop=False, housekeeping=False)
    await service.start()
    try:
        keys = {name: (await service.store.create_user(name))[1] for name in ("alice", "bob")}
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy.test") as c:
            yield Client(c, keys)
    finally:
        await service.stop()


def _digest(name: str, trigger: str, query: str) -> dict[str, Any]:
    """A rule that fires whatever the feeds do: every 2 s (40 chronons), slack and query within 1 s."""
    return {"name": name, "trigger": {"feed": trigger, "every": "2s", "slack": "1s"},
            "query": [{"feed": query, "within": "1s"}]}


async def test_each_user_plans_their_own_profiles(api: Client) -> None:
    a1 = await api.feed("alice", "http://127.0.0.1:9/a1.xml")
    a2 = await api.feed("alice", "http://127.0.0.1:9/a2.xml")
    b1 = await api.feed("bob", "http://127.0.0.1:9/b1.xml")
    await api.profile("alice", {"name": "one", "rules": [_digest("d", a1, a2),
                                                         {"name": "w", "watch": {"feeds": [a1, a2], "within": "1s"}}]})
    await api.profile("alice", {"name": "two", "rules": [_digest("d", a2, a1)]})
    await api.profile("bob", {"name": "mine", "rules": [_digest("d", b1, b1)]})

    plans = {}
    for user in ("alice", "bob"):
        r = await api.call(user, "GET", "/api/v1/plan", params={"target": 0.9, "horizon": 200, "futures": 2})
        assert r.status_code == 200, r.text
        plans[user] = r.json()
    alice, bob = plans["alice"], plans["bob"]
    assert (alice["profiles"], alice["rules"], alice["feeds"]) == (2, 3, 2)
    assert (bob["profiles"], bob["rules"], bob["feeds"]) == (1, 1, 1)
    assert alice["unrecorded_feeds"] == 2 and bob["unrecorded_feeds"] == 1  # the loop never ran: nothing fetched
    for plan in (alice, bob):
        assert (plan["horizon"], plan["futures"], plan["seed"], plan["target"]) == (200, 2, 0, 0.9)
        assert plan["policy"] == "mrsf-p" and plan["chronon_seconds"] == 0.05
        assert plan["current"]["budget"] == 4  # the configured (shared) budget
        assert plan["current"]["ceis"] >= 5  # the digests fire every 40 chronons
        assert plan["least"]["completeness"] >= 0.9 and plan["least"] == plan["best"]
    assert bob["max_budget"] == 1 and bob["least"]["budget"] == 1
    assert bob["current"]["ceis"] == 5  # his one digest, not alice's two
    assert alice["current"]["ceis"] >= 10


async def test_plan_needs_an_api_key(api: Client) -> None:
    r = await api.client.get("/api/v1/plan")
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "params",
    [{"horizon": 100_000}, {"horizon": 0}, {"futures": 1000}, {"target": 0}, {"target": 1.5}, {"seed": -1}],
)
async def test_absurd_plans_are_refused(api: Client, params: dict[str, Any]) -> None:
    r = await api.call("alice", "GET", "/api/v1/plan", params=params)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["query", next(iter(params))]


async def test_a_user_without_profiles_gets_an_empty_plan(api: Client) -> None:
    r = await api.call("bob", "GET", "/api/v1/plan", params={"horizon": 50, "futures": 1})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["profiles"], body["rules"], body["least"], body["best"]) == (0, 0, None, None)
    assert body["current"]["completeness"] is None


async def test_plan_is_in_the_openapi_schema(api: Client) -> None:
    schema = (await api.client.get("/openapi.json")).json()
    op = schema["paths"]["/api/v1/plan"]["get"]
    assert {p["name"] for p in op["parameters"]} == {"target", "horizon", "futures", "seed"}
    assert "PlanOut" in schema["components"]["schemas"]
