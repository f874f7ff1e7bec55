"""Issue 22 over the real API, two users on each backend: feeds are per-user registrations.

Alice registers a URL carrying a secret. Bob must not see it, read it, delete it,
rotate its token, ping through it or name it in a profile; nothing he gets back,
no log line and no metric may contain the secret. Two users registering the
same URL share one feed (one fetch) but keep their own registrations and tokens.
The loop does not run (``run_loop=False``): these tests are about the API.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import structlog

from proxy.service import ProxyService
from tests.test_e2e_support import users_app

SECRET = "alice-private-token"
ALICE_URL = f"http://127.0.0.1:9/feed.xml?secret={SECRET}"
PASSWORD = "pw-of-alice"
ALICE_CREDENTIALS_URL = f"http://alice:{PASSWORD}@127.0.0.1:9/private.xml"


class Users:
    def __init__(self, service: ProxyService, client: httpx.AsyncClient, keys: dict[str, str]) -> None:
        self.service = service
        self.client = client
        self.keys = keys
        self.responses: dict[str, list[httpx.Response]] = {"alice": [], "bob": []}

    async def call(self, user: str, method: str, path: str, **kw: Any) -> httpx.Response:
        r = await self.client.request(method, path, headers={"Authorization": f"Bearer {self.keys[user]}"},
                                      **kw)
        self.responses[user].append(r)
        return r

    async def register(self, user: str, url: str) -> dict[str, Any]:
        r = await self.call(user, "POST", "/api/v1/feeds", json={"url": url})
        assert r.status_code in (200, 201), r.text
        body: dict[str, Any] = r.json()
        return body


@pytest.fixture
async def users(database_url: str) -> AsyncIterator[Users]:
    async with users_app(database_url) as (service, client, keys):
        yield Users(service, client, keys)


def _watch(*feed_ids: int, name: str = "watch") -> dict[str, Any]:
    """A profile of one watch rule over these feeds (a ping opens or grows its CEI)."""
    return {"name": name, "rules": [{"name": "w", "watch": {"feeds": [str(f) for f in feed_ids],
                                                            "within": "10m"}}]}


async def test_every_feed_route_answers_404_for_another_users_feed(users: Users) -> None:
    alice = await users.register("alice", ALICE_URL)
    fid = alice["id"]
    bobs_own = await users.register("bob", "http://127.0.0.1:9/bob.xml")
    missing = 424242

    assert [f["id"] for f in (await users.call("bob", "GET", "/api/v1/feeds")).json()["items"]] == [bobs_own["id"]]
    for feed_id in (fid, missing):  # another user's feed and no feed at all answer alike
        for method, path in [("GET", f"/api/v1/feeds/{feed_id}"), ("DELETE", f"/api/v1/feeds/{feed_id}"),
                             ("POST", f"/api/v1/feeds/{feed_id}/ping-token")]:
            r = await users.call("bob", method, path)
            assert r.status_code == 404, (method, path, r.text)
            assert r.json()["detail"] == f"feed {feed_id} not found"
    # Bob's token does not open Alice's feed; a feed with no such registration is 404.
    r = await users.client.post(f"/api/v1/feeds/{fid}/ping", headers={"X-Ping-Token": bobs_own["ping_token"]})
    assert r.status_code == 401
    r = await users.client.post(f"/api/v1/feeds/{missing}/ping", headers={"X-Ping-Token": "x"})
    assert r.status_code == 404

    # A profile may not name Alice's feed: the same 422 as an unknown feed, naming field and feed.
    for feed_id in (fid, missing):
        r = await users.call("bob", "POST", "/api/v1/profiles", json=_watch(bobs_own["id"], feed_id))
        assert r.status_code == 422, r.text
        (detail,) = r.json()["errors"]
        assert detail["loc"] == ["body", "rules", 0, "watch", "feeds", 1]
        assert detail["msg"] == f"rules.0.watch.feeds.1: unknown feed '{feed_id}'"
    pid = (await users.call("bob", "POST", "/api/v1/profiles", json=_watch(bobs_own["id"]))).json()["id"]
    r = await users.call("bob", "PUT", f"/api/v1/profiles/{pid}", json=_watch(fid))
    assert r.status_code == 422 and f"unknown feed '{fid}'" in r.text
    assert (await users.call("bob", "GET", "/api/v1/metrics/summary")).status_code == 200

    # Nothing of Alice's changed.
    got = await users.call("alice", "GET", f"/api/v1/feeds/{fid}")
    assert got.status_code == 200 and got.json()["ping_token"] == alice["ping_token"]
    assert got.json()["url"] == ALICE_URL
    for r in users.responses["bob"]:
        assert SECRET not in r.text and alice["ping_token"] not in r.text, r.text


async def test_secrets_stay_out_of_other_users_responses_logs_and_metrics(
    users: Users, caplog: pytest.LogCaptureFixture
) -> None:
    # INFO: what the service logs at; driver DEBUG lines are pinned off (proxy.service.logs).
    caplog.set_level(logging.INFO)
    with structlog.testing.capture_logs() as logs:
        alice = await users.register("alice", ALICE_URL)
        alice_creds = await users.register("alice", ALICE_CREDENTIALS_URL)
        # Bob's URL differs only in its secret: another fetch, so another feed.
        bob = await users.register("bob", "http://127.0.0.1:9/feed.xml?secret=bobs")
        assert bob["id"] != alice["id"]
        assert len(await users.service.store.list_feeds()) == 3
        await users.call("alice", "GET", "/api/v1/feeds")
        await users.call("bob", "GET", "/api/v1/feeds")
        await users.call("bob", "GET", f"/api/v1/feeds/{bob['id']}")
        await users.call("bob", "POST", f"/api/v1/feeds/{bob['id']}/ping-token")
        await users.client.post(f"/api/v1/feeds/{alice['id']}/ping", headers={"X-Ping-Token": alice["ping_token"]})
        await users.call("alice", "POST", "/api/v1/profiles", json=_watch(alice["id"], alice_creds["id"]))
        await users.call("alice", "DELETE", f"/api/v1/feeds/{alice_creds['id']}")  # 409: her profile
        metrics = (await users.client.get("/metrics")).text
    # The owner sees her own URLs, secrets and all.
    mine = {f["id"]: f["url"] for f in (await users.call("alice", "GET", "/api/v1/feeds")).json()["items"]}
    assert mine == {alice["id"]: ALICE_URL, alice_creds["id"]: ALICE_CREDENTIALS_URL}
    assert [e["event"] for e in logs if e["event"] == "feed_added"] == ["feed_added"] * 3
    for secret in (SECRET, PASSWORD, alice["ping_token"]):
        for r in users.responses["bob"]:
            assert secret not in r.text
        assert secret not in metrics
        assert all(secret not in repr(entry) for entry in logs), logs
        assert secret not in caplog.text
    assert {e["url"] for e in logs if e["event"] == "feed_added"} == {
        "http://127.0.0.1:9/feed.xml?…", "http://127.0.0.1:9/private.xml"}


async def test_one_url_two_users_one_feed_and_pings_per_registration(users: Users) -> None:
    alice = await users.register("alice", "http://127.0.0.1:9/shared.xml")
    bob = await users.register("bob", "http://127.0.0.1:9/shared.xml")
    fid = alice["id"]
    assert bob["id"] == fid
    assert alice["ping_token"] != bob["ping_token"]
    assert [f.id for f in await users.service.store.list_feeds()] == [fid]
    assert list(users.service.runtime.feeds.by_id) == [fid]
    assert len(users.service.runtime.feeds.by_resource) == 1

    pa = (await users.call("alice", "POST", "/api/v1/profiles", json=_watch(fid, name="a"))).json()["id"]
    pb = (await users.call("bob", "POST", "/api/v1/profiles", json=_watch(fid, name="b"))).json()["id"]

    async def ceis(user: str, pid: int) -> int:
        await users.service.flush()
        return len((await users.call(user, "GET", f"/api/v1/profiles/{pid}/ceis")).json()["items"])

    # Each token pings for its own user only.
    r = await users.client.post(f"/api/v1/feeds/{fid}/ping", headers={"X-Ping-Token": alice["ping_token"]})
    assert r.status_code == 202 and r.json()["operations"] == 1
    assert (await ceis("alice", pa), await ceis("bob", pb)) == (1, 0)
    r = await users.client.post(f"/api/v1/feeds/{fid}/ping", params={"token": bob["ping_token"]})
    assert r.status_code == 202 and r.json()["operations"] == 1
    assert (await ceis("alice", pa), await ceis("bob", pb)) == (1, 1)

    # Rotation: the new token works, the old one is refused like any wrong token; Bob's is untouched.
    r = await users.call("alice", "POST", f"/api/v1/feeds/{fid}/ping-token")
    assert r.status_code == 200
    new = r.json()["ping_token"]
    assert new not in (alice["ping_token"], bob["ping_token"])
    assert (await users.call("alice", "GET", f"/api/v1/feeds/{fid}")).json()["ping_token"] == new
    r = await users.client.post(f"/api/v1/feeds/{fid}/ping", headers={"X-Ping-Token": alice["ping_token"]})
    assert r.status_code == 401
    r = await users.client.post(f"/api/v1/feeds/{fid}/ping", headers={"X-Ping-Token": new})
    assert r.status_code == 202
    r = await users.client.post(f"/api/v1/feeds/{fid}/ping", headers={"X-Ping-Token": bob["ping_token"]})
    assert r.status_code == 202

    # Alice's 409 names only her profile; then her deletion leaves Bob's registration working.
    r = await users.call("alice", "DELETE", f"/api/v1/feeds/{fid}")
    assert r.status_code == 409
    assert r.json()["detail"] == f"feed {fid} is still read by the rules of your profile(s): a"
    assert (await users.call("alice", "DELETE", f"/api/v1/profiles/{pa}")).status_code == 204
    assert (await users.call("alice", "DELETE", f"/api/v1/feeds/{fid}")).status_code == 204
    assert (await users.call("alice", "GET", f"/api/v1/feeds/{fid}")).status_code == 404
    assert (await users.call("alice", "GET", "/api/v1/feeds")).json()["items"] == []
    r = await users.client.post(f"/api/v1/feeds/{fid}/ping", headers={"X-Ping-Token": new})
    assert r.status_code == 401
    assert (await users.call("bob", "GET", f"/api/v1/feeds/{fid}")).status_code == 200
    r = await users.client.post(f"/api/v1/feeds/{fid}/ping", headers={"X-Ping-Token": bob["ping_token"]})
    assert r.status_code == 202
    assert fid in users.service.runtime.feeds.by_id

    # Bob's is the last registration: once his profile is gone, deleting it removes the feed.
    assert (await users.call("bob", "DELETE", f"/api/v1/profiles/{pb}")).status_code == 204
    assert (await users.call("bob", "DELETE", f"/api/v1/feeds/{fid}")).status_code == 204
    assert fid not in users.service.runtime.feeds.by_id
    assert await users.service.store.list_feeds() == []
    r = await users.client.post(f"/api/v1/feeds/{fid}/ping", headers={"X-Ping-Token": bob["ping_token"]})
    assert r.status_code == 404


@pytest.mark.parametrize(("level", "driver_level"), [("DEBUG", logging.INFO), ("WARNING", logging.WARNING)])
def test_driver_debug_logs_with_sql_parameters_stay_off(level: str, driver_level: int) -> None:
    from proxy.service.logs import DRIVER_LOGGERS, configure_logging

    saved = {name: logging.getLogger(name).level for name in DRIVER_LOGGERS}
    try:
        configure_logging(level)
        for name in DRIVER_LOGGERS:
            assert logging.getLogger(name).level == driver_level, name
    finally:
        structlog.reset_defaults()
        for name, value in saved.items():
            logging.getLogger(name).setLevel(value)
