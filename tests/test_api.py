"""The REST API's contract: auth, per-user isolation, 422s naming the field, pings, status codes.

The service runs without its chronon loop (``run_loop=False``) so nothing is
probed: these tests are about the API and the facade, not about scheduling.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.api import make_app
from proxy.service import ProxyService
from tests.test_e2e_support import e2e_settings, motivating, users_app

AUCTION = {"name": "auctions", "rules": [{"name": "watch 3", "watch": {"feeds": ["A", "B", "C"],
                                                                      "within": "10m"}}]}


class Api:
    def __init__(self, service: ProxyService, client: httpx.AsyncClient, keys: dict[str, str]) -> None:
        self.service = service
        self.client = client
        self.keys = keys

    def h(self, user: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[user]}"}

    async def feed(self, url: str) -> dict[str, Any]:
        r = await self.client.post("/api/v1/feeds", json={"url": url}, headers=self.h())
        assert r.status_code in (200, 201), r.text
        body: dict[str, Any] = r.json()
        return body


@pytest.fixture
async def api(sqlite_url: str) -> AsyncIterator[Api]:
    async with users_app(sqlite_url) as (service, client, keys):
        yield Api(service, client, keys)


async def _feeds(api: Api, n: int) -> list[int]:
    return [(await api.feed(f"http://127.0.0.1:9/feeds/{i}.xml"))["id"] for i in range(n)]


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({}, "missing"),
        ({"Authorization": "Bearer not-a-key"}, "unknown"),
        ({"Authorization": "Basic YWxpY2U6cHc="}, "wrong scheme"),
    ],
)
async def test_requests_without_a_valid_key_answer_401(api: Api, headers: dict[str, str], why: str) -> None:
    for method, path in [("GET", "/api/v1/feeds"), ("GET", "/api/v1/profiles"),
                         ("POST", "/api/v1/profiles"), ("GET", "/api/v1/metrics/summary")]:
        r = await api.client.request(method, path, headers=headers, json={})
        assert r.status_code == 401, (why, path, r.text)
        assert r.headers["www-authenticate"] == "Bearer"


async def test_a_key_sees_only_its_own_profiles(api: Api) -> None:
    mish, cnn, money = await _feeds(api, 3)
    r = await api.client.post("/api/v1/profiles", json=motivating(mish, cnn, money), headers=api.h())
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    assert [p["id"] for p in (await api.client.get("/api/v1/profiles", headers=api.h())).json()["items"]] == [pid]
    assert (await api.client.get("/api/v1/profiles", headers=api.h("bob"))).json()["items"] == []
    for method, path in [("GET", f"/api/v1/profiles/{pid}"), ("GET", f"/api/v1/profiles/{pid}/ceis"),
                         ("GET", f"/api/v1/profiles/{pid}/entries"), ("DELETE", f"/api/v1/profiles/{pid}")]:
        r = await api.client.request(method, path, headers=api.h("bob"))
        assert r.status_code == 404, (path, r.text)
    r = await api.client.put(f"/api/v1/profiles/{pid}", json=motivating(mish, cnn, money),
                             headers=api.h("bob"))
    assert r.status_code == 404
    # Still there for its owner.
    assert (await api.client.get(f"/api/v1/profiles/{pid}", headers=api.h())).status_code == 200


async def test_profile_crud_installs_rules_in_the_evaluator(api: Api) -> None:
    mish, cnn, money = await _feeds(api, 3)
    r = await api.client.post("/api/v1/profiles", json=motivating(mish, cnn, money), headers=api.h())
    pid = r.json()["id"]
    body = r.json()
    assert body["name"] == "business analyst"
    assert body["rules"][0]["spec"]["trigger"]["when"] == {"contains": ["oil"]}
    ev = api.service.runtime.evaluator
    assert ev.rule_ids(str(pid)) == [f"r{body['rules'][0]['id']}"]

    renamed = motivating(mish, cnn, money) | {"name": "analyst 2"}
    r = await api.client.put(f"/api/v1/profiles/{pid}", json=renamed, headers=api.h())
    assert r.status_code == 200 and r.json()["name"] == "analyst 2"
    assert ev.rule_ids(str(pid)) == [f"r{r.json()['rules'][0]['id']}"]

    assert (await api.client.delete(f"/api/v1/profiles/{pid}", headers=api.h())).status_code == 204
    assert str(pid) not in ev.profile_ids()
    assert (await api.client.get(f"/api/v1/profiles/{pid}", headers=api.h())).status_code == 404


async def test_auctionwatch_body_is_accepted_and_pings_open_its_ceis(api: Api) -> None:
    feeds = [await api.feed(f"http://127.0.0.1:9/auction/{x}.xml") for x in "ABC"]
    body: Any = {"name": AUCTION["name"], "rules": [{"name": "watch 3", "watch": {
        "feeds": [str(f["id"]) for f in feeds], "within": "10m"}}]}
    r = await api.client.post("/api/v1/profiles", json=body, headers=api.h())
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    a = feeds[0]
    # Both ways of giving the token work; no API key is needed for a ping.
    r = await api.client.post(f"/api/v1/feeds/{a['id']}/ping", headers={"X-Ping-Token": a["ping_token"]})
    assert r.status_code == 202 and r.json()["operations"] == 1
    b = feeds[1]
    r = await api.client.post(f"/api/v1/feeds/{b['id']}/ping", params={"token": b["ping_token"]})
    assert r.status_code == 202
    await api.service.flush()
    ceis = (await api.client.get(f"/api/v1/profiles/{pid}/ceis", headers=api.h())).json()["items"]
    assert len(ceis) == 1
    cei = ceis[0]
    assert cei["state"] == "pending" and cei["sealed"] is False
    assert [ei["feed"] for ei in cei["eis"]] == [a["id"], b["id"]]
    for ei in cei["eis"]:
        assert ei["state"] == "pending"
        assert ei["finish"] - ei["start"] == 10 * 60 / 0.05  # within 10m in 50 ms chronons
        assert ei["window_start"] < ei["window_end"]


@pytest.mark.parametrize("token", ["", "wrong"])
async def test_ping_with_a_wrong_token_is_refused(api: Api, token: str) -> None:
    (feed_id,) = await _feeds(api, 1)
    r = await api.client.post(f"/api/v1/feeds/{feed_id}/ping", headers={"X-Ping-Token": token})
    assert r.status_code == 401
    r = await api.client.post("/api/v1/feeds/9999/ping", headers={"X-Ping-Token": "x"})
    assert r.status_code == 404


@pytest.mark.parametrize(
    ("mutate", "loc", "reason"),
    [
        (lambda b: b["rules"][0]["query"][1].update(feed="424242"), ["body", "rules", 0, "query", 1, "feed"],
         "unknown feed"),
        (lambda b: b["rules"][0]["trigger"].update(feed="nope"), ["body", "rules", 0, "trigger", "feed"],
         "unknown feed"),
        (lambda b: b["rules"][0]["trigger"].update(every="x3m"), ["body", "rules", 0, "trigger", "every"],
         "duration"),
        (lambda b: b["rules"][0]["trigger"].update(evry="3m"), ["body", "rules", 0, "trigger", "evry"],
         "Extra inputs"),
        (lambda b: b.pop("name"), ["body", "name"], "Field required"),
    ],
)
async def test_bad_profiles_answer_422_naming_the_field_and_lose_nothing(
    api: Api, mutate: Any, loc: list[Any], reason: str
) -> None:
    mish, cnn, money = await _feeds(api, 3)
    good = motivating(mish, cnn, money)
    pid = (await api.client.post("/api/v1/profiles", json=good, headers=api.h())).json()["id"]
    before = (await api.client.get(f"/api/v1/profiles/{pid}", headers=api.h())).json()
    bad = motivating(mish, cnn, money)
    mutate(bad)
    for r in (await api.client.post("/api/v1/profiles", json=bad | {"name": "other"} if "name" in bad
                                    else bad, headers=api.h()),
              await api.client.put(f"/api/v1/profiles/{pid}", json=bad, headers=api.h())):
        assert r.status_code == 422, r.text
        detail = r.json()["errors"]
        assert any(d["loc"] == loc and reason in d["msg"] for d in detail), detail
    after = (await api.client.get(f"/api/v1/profiles/{pid}", headers=api.h())).json()
    assert after == before
    assert len((await api.client.get("/api/v1/profiles", headers=api.h())).json()["items"]) == 1


async def test_feed_registration_and_deletion(api: Api) -> None:
    r = await api.client.post("/api/v1/feeds", json={"url": "http://127.0.0.1:9/x.xml"}, headers=api.h())
    assert r.status_code == 201
    feed = r.json()
    # Bob's registration of the same feed is new to him (201, not a hint that Alice has it);
    # Alice registering it again finds her own (200).
    bobs = await api.client.post("/api/v1/feeds", json={"url": "HTTP://127.0.0.1:9/x.xml"},
                                 headers=api.h("bob"))
    assert bobs.status_code == 201 and bobs.json()["id"] == feed["id"]
    assert bobs.json()["url"] == "HTTP://127.0.0.1:9/x.xml"
    again = await api.client.post("/api/v1/feeds", json={"url": "http://127.0.0.1:9/x.xml"},
                                  headers=api.h())
    assert again.status_code == 200 and again.json() == feed
    got = (await api.client.get(f"/api/v1/feeds/{feed['id']}", headers=api.h())).json()
    assert got["ping_token"] == feed["ping_token"] and got["consecutive_errors"] == 0
    for bad in ({"url": "ftp://example.org/feed"}, {"url": ""}, {}):
        r = await api.client.post("/api/v1/feeds", json=bad, headers=api.h())
        assert r.status_code == 422, (bad, r.text)
    mish, cnn, money = feed["id"], *await _feeds(api, 2)
    pid = (await api.client.post("/api/v1/profiles", json=motivating(mish, cnn, money),
                                 headers=api.h())).json()["id"]
    r = await api.client.delete(f"/api/v1/feeds/{mish}", headers=api.h())
    assert r.status_code == 409 and "business analyst" in r.json()["detail"]
    await api.client.delete(f"/api/v1/profiles/{pid}", headers=api.h())
    assert (await api.client.delete(f"/api/v1/feeds/{mish}", headers=api.h())).status_code == 204
    assert (await api.client.get(f"/api/v1/feeds/{mish}", headers=api.h())).status_code == 404
    # Bob's registration keeps the shared feed; his deletion, the last one, removes it.
    assert (await api.client.get(f"/api/v1/feeds/{mish}", headers=api.h("bob"))).status_code == 200
    assert mish in api.service.runtime.feeds.by_id
    assert (await api.client.delete(f"/api/v1/feeds/{mish}", headers=api.h("bob"))).status_code == 204
    assert mish not in api.service.runtime.feeds.by_id
    assert [f.id for f in await api.service.store.list_feeds()] == [cnn, money]


async def test_private_addresses_are_refused_unless_allowed(sqlite_url: str) -> None:
    settings = e2e_settings(sqlite_url, allow_private_networks=False)
    async with ProxyService(settings, run_loop=False, housekeeping=False) as service:
        _, key = await service.store.create_user("carol")
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            r = await c.post("/api/v1/feeds", json={"url": "http://127.0.0.1/feed.xml"},
                             headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 422
            (detail,) = r.json()["errors"]
            assert detail["loc"] == ["body", "url"] and "refused" in detail["msg"]
            assert await service.store.list_feeds() == []


async def test_health_ready_metrics_and_docs(api: Api) -> None:
    assert (await api.client.get("/healthz")).json() == {"status": "ok"}
    ready = await api.client.get("/readyz")
    # The loop is not running in this fixture: the database answers, the loop does not tick.
    assert ready.status_code == 503
    assert ready.json()["database"] is True and ready.json()["ticking"] is False
    metrics = (await api.client.get("/metrics")).text
    for name in ("proxy_probes_total", "proxy_chronon_budget_probes", "proxy_ceis", "proxy_completeness_ratio",
                 "proxy_probe_duration_seconds_bucket", "proxy_tick_jitter_seconds_bucket",
                 "proxy_inflight_probes", "proxy_db_errors_total"):
        assert name in metrics, name
    assert (await api.client.get("/docs")).status_code == 200
    spec = (await api.client.get("/openapi.json")).json()
    for path in ("/api/v1/feeds", "/api/v1/feeds/{feed_id}/ping", "/api/v1/profiles",
                 "/api/v1/profiles/{profile_id}/ceis", "/api/v1/metrics/summary"):
        assert path in spec["paths"], path
