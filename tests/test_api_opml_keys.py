"""Issue 20 over the real API on both backends: OPML import/export, API key rotation, feed ids.

The service does not tick (``run_loop=False``); the SSRF guard is ON (private networks
refused) so the report's ``refused`` reasons are the real guard's. URLs are IP literals:
no DNS is needed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import listparser
import pytest

from proxy.api import make_app
from proxy.service import ProxyService
from tests.test_e2e_support import e2e_settings

PUBLIC = "http://93.184.216.34"  # a public address literal: accepted without a lookup

NESTED = f"""<?xml version="1.0" encoding="UTF-8"?>
<opml version="2.0">
  <head><title>mine</title></head>
  <body>
    <outline text="news">
      <outline text="A" type="rss" xmlUrl="{PUBLIC}/a.xml"/>
      <outline text="deeper">
        <outline text="B" type="rss" xmlUrl="{PUBLIC}/b.xml"/>
      </outline>
    </outline>
    <outline text="A again" type="rss" xmlUrl="{PUBLIC}/a.xml"/>
    <outline text="ftp" type="rss" xmlUrl="ftp://93.184.216.34/c.xml"/>
    <outline text="lan" type="rss" xmlUrl="http://10.1.2.3/feed.xml"/>
    <outline text="broken" type="rss" xmlUrl="http://[::1/x"/>
  </body>
</opml>
""".encode()


@asynccontextmanager
async def _api(database_url: str) -> AsyncIterator[tuple[ProxyService, httpx.AsyncClient, dict[str, str]]]:
    settings = e2e_settings(database_url, allow_private_networks=False)
    service = ProxyService(settings, run_loop=False, housekeeping=False)
    await service.start()
    try:
        keys = {name: (await service.store.create_user(name))[1] for name in ("alice", "bob")}
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy.test") as client:
            yield service, client, keys
    finally:
        await service.stop()


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[tuple[ProxyService, httpx.AsyncClient, dict[str, str]]]:
    async with _api(database_url) as triple:
        yield triple


async def _urls(service: ProxyService, key: str) -> list[str]:
    """The user's registered URLs, read from the store (not from a list answer, whose shape
    pagination may change)."""
    user = await service.store.authenticate(key)
    assert user is not None
    return [r.registration.url for r in await service.store.list_registered_feeds(user)]


async def test_opml_import_reports_each_outline_and_flattens_folders(api: Any) -> None:
    service, client, keys = api
    r = await client.post("/api/v1/feeds/opml", content=NESTED,
                          headers={**_auth(keys["alice"]), "Content-Type": "text/x-opml"})
    assert r.status_code == 200, r.text
    report = r.json()
    lines = [(o["url"], o["status"]) for o in report["outlines"]]
    assert lines == [
        (f"{PUBLIC}/a.xml", "added"),
        (f"{PUBLIC}/b.xml", "added"),
        ("ftp://93.184.216.34/c.xml", "refused"),
        ("http://10.1.2.3/feed.xml", "refused"),
        ("http://[::1/x", "refused"),
    ]
    # A URL listed twice (in two folders) is one feed: listparser merges it, reported once.
    assert (report["added"], report["known"], report["refused"]) == (2, 0, 3)
    reasons = [o["reason"] for o in report["outlines"][2:]]
    assert "scheme" in reasons[0]
    assert "private" in reasons[1] or "10.1.2.3" in reasons[1]
    assert reasons[2]  # malformed: a reason, whatever the parser's words
    assert len({o["feed_id"] for o in report["outlines"][:2]}) == 2
    assert await _urls(service, keys["alice"]) == [f"{PUBLIC}/a.xml", f"{PUBLIC}/b.xml"]

    # The same file again, as the multipart field a browser sends: all known, nothing added.
    r = await client.post("/api/v1/feeds/opml", files={"file": ("subs.opml", NESTED, "text/x-opml")},
                          headers=_auth(keys["alice"]))
    assert r.status_code == 200, r.text
    assert (r.json()["added"], r.json()["known"]) == (0, 2)


async def test_opml_export_is_opml_2_with_only_the_callers_feeds(api: Any) -> None:
    _, client, keys = api
    for user, path in (("alice", "/a.xml?token=alice-secret"), ("alice", "/b.xml"), ("bob", "/bob.xml")):
        r = await client.post("/api/v1/feeds", json={"url": PUBLIC + path}, headers=_auth(keys[user]))
        assert r.status_code == 201, r.text
    r = await client.get("/api/v1/feeds/opml", headers=_auth(keys["alice"]))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/x-opml")
    assert b'<opml version="2.0">' in r.content
    parsed = listparser.parse(r.content)
    assert [f["url"] for f in parsed["feeds"]] == [PUBLIC + "/a.xml?token=alice-secret", PUBLIC + "/b.xml"]
    # Bob's export names only his feed: Alice's secret URL never reaches him.
    bob = await client.get("/api/v1/feeds/opml", headers=_auth(keys["bob"]))
    assert b"alice-secret" not in bob.content
    assert [f["url"] for f in listparser.parse(bob.content)["feeds"]] == [PUBLIC + "/bob.xml"]
    # Round trip: Bob imports Alice's export; both of her feeds become his registrations.
    r = await client.post("/api/v1/feeds/opml", content=r.content,
                          headers={**_auth(keys["bob"]), "Content-Type": "application/xml"})
    assert r.json()["added"] == 2


@pytest.mark.parametrize(
    ("body", "content_type", "words"),
    [
        (b"", "text/x-opml", "empty"),
        (b"<opml><body>", "text/x-opml", "not well-formed"),
        (b"<rss version='2.0'/>", "application/xml", "not <opml>"),
        (b'<!DOCTYPE x [<!ENTITY a "aaaa">]><opml><body/></opml>', "text/x-opml", "entities"),
        (b"<opml/>", "application/json", "is not OPML"),
    ],
)
async def test_opml_import_refuses_bad_documents_and_keeps_stored_feeds(
    api: Any, body: bytes, content_type: str, words: str
) -> None:
    service, client, keys = api
    r = await client.post("/api/v1/feeds", json={"url": PUBLIC + "/kept.xml"}, headers=_auth(keys["alice"]))
    assert r.status_code == 201
    r = await client.post("/api/v1/feeds/opml", content=body,
                          headers={**_auth(keys["alice"]), "Content-Type": content_type})
    assert r.status_code == 422, r.text
    assert words in r.text
    assert await _urls(service, keys["alice"]) == [PUBLIC + "/kept.xml"]


async def test_opml_multipart_without_file_field_is_named(api: Any) -> None:
    _, client, keys = api
    r = await client.post("/api/v1/feeds/opml", data={"other": "x"}, files={"not_file": ("a", b"x")},
                          headers=_auth(keys["alice"]))
    assert r.status_code == 422
    assert "'file'" in r.text


async def test_key_rotation_revokes_old_key_when_asked(api: Any) -> None:
    _, client, keys = api
    old = keys["alice"]
    r = await client.post("/api/v1/keys", headers=_auth(old))
    assert r.status_code == 201, r.text
    second = r.json()["key"]
    assert second and second != old
    # Both work until the old one is revoked.
    assert (await client.get("/api/v1/feeds", headers=_auth(old))).status_code == 200
    listed = (await client.get("/api/v1/keys", headers=_auth(second))).json()
    assert [k["current"] for k in listed] == [False, True]
    assert all(k["key"] is None for k in listed)  # never shown again
    old_id = listed[0]["id"]

    # One-step rotation from the second key: a third key, the second revoked.
    r = await client.post("/api/v1/keys", json={"revoke_current": True}, headers=_auth(second))
    third = r.json()["key"]
    assert (await client.get("/api/v1/feeds", headers=_auth(second))).status_code == 401
    assert (await client.get("/api/v1/feeds", headers=_auth(third))).status_code == 200

    r = await client.delete(f"/api/v1/keys/{old_id}", headers=_auth(third))
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    assert (await client.get("/api/v1/feeds", headers=_auth(old))).status_code == 401
    # Bob cannot revoke Alice's key: 404 exactly like a missing one.
    alice_keys = (await client.get("/api/v1/keys", headers=_auth(third))).json()
    r = await client.delete(f"/api/v1/keys/{alice_keys[-1]['id']}", headers=_auth(keys["bob"]))
    assert r.status_code == 404
    assert (await client.get("/api/v1/feeds", headers=_auth(third))).status_code == 200


async def test_rules_accept_feed_ids_as_numbers_and_strings(api: Any) -> None:
    _, client, keys = api
    ids = []
    for path in ("/t.xml", "/q.xml"):
        r = await client.post("/api/v1/feeds", json={"url": PUBLIC + path}, headers=_auth(keys["alice"]))
        ids.append(r.json()["id"])
    assert all(isinstance(i, int) for i in ids)
    spec = {"name": "numbers", "rules": [{"name": "r", "trigger": {"feed": ids[0], "every": "1m"},
                                          "query": [{"feed": str(ids[1]), "within": "1m"}]},
                                         {"name": "w", "watch": {"feeds": [ids[0], str(ids[1])], "within": "1m"}}]}
    r = await client.post("/api/v1/profiles", json=spec, headers=_auth(keys["alice"]))
    assert r.status_code == 201, r.text
    rules = r.json()["rules"]
    # Stored in the canonical form: the id's digits as a string.
    assert rules[0]["spec"]["trigger"]["feed"] == str(ids[0])
    assert rules[1]["spec"]["watch"]["feeds"] == [str(ids[0]), str(ids[1])]
    # Numbers and strings name the same feed: listing it twice is still a duplicate.
    dup = {"name": "dup", "rules": [{"name": "w", "watch": {"feeds": [ids[0], str(ids[0])], "within": "1m"}}]}
    r = await client.post("/api/v1/profiles", json=dup, headers=_auth(keys["alice"]))
    assert r.status_code == 422 and "listed twice" in r.text
    # A boolean is not an id.
    bad = {"name": "b", "rules": [{"name": "w", "watch": {"feeds": [True], "within": "1m"}}]}
    assert (await client.post("/api/v1/profiles", json=bad, headers=_auth(keys["alice"]))).status_code == 422


async def test_openapi_ids_are_consistent(api: Any) -> None:
    """Every id a response gives as a number can be sent back as one (issue 20)."""
    _, client, _ = api
    spec = (await client.get("/openapi.json")).json()
    for path, ops in spec["paths"].items():
        for op in ops.values():
            for param in op.get("parameters", []):
                if param["name"].endswith("_id") and param["in"] == "path":
                    assert param["schema"]["type"] == "integer", (path, param)
    schemas = spec["components"]["schemas"]
    for out in ("FeedOut", "ProfileOut", "TargetOut", "DeliveryOut", "KeyOut", "OpmlOutlineOut"):
        props = schemas[out]["properties"]
        assert "integer" in str(props.get("id", props.get("feed_id"))), out
    # Feed references inside rules take the integer the feed routes give, or its string.
    for name, field in (("TriggerSpec", "feed"), ("QuerySpec", "feed")):
        kinds = {s["type"] for s in schemas[name]["properties"][field]["anyOf"]}
        assert kinds == {"string", "integer"}, name
    kinds = {s["type"] for s in schemas["WatchSpec"]["properties"]["feeds"]["items"]["anyOf"]}
    assert kinds == {"string", "integer"}
    assert schemas["EiOut"]["properties"]["feed"]["type"] == "integer"


async def test_opml_import_shares_feeds_and_counts_one_feed_once(api: Any) -> None:
    service, client, keys = api
    before = (await client.post("/api/v1/feeds", json={"url": PUBLIC + "/old.xml"},
                                headers=_auth(keys["alice"]))).json()
    doc = (f'<opml version="2.0"><body><outline xmlUrl="{PUBLIC}/old.xml"/>'
           f'<outline xmlUrl="{PUBLIC}/x.xml"/><outline xmlUrl="HTTP://93.184.216.34/x.xml"/>'
           f'<outline xmlUrl="{PUBLIC}/y.xml"/></body></opml>').encode()
    headers = {"Content-Type": "text/x-opml"}
    alice = (await client.post("/api/v1/feeds/opml", content=doc, headers={**_auth(keys["alice"]), **headers})).json()
    assert [(o["status"], o["feed_id"]) for o in alice["outlines"]][:1] == [("known", before["id"])]
    statuses = [o["status"] for o in alice["outlines"]]
    assert statuses == ["known", "added", "known", "added"]  # the upper-case URL is the same feed
    assert alice["outlines"][1]["feed_id"] == alice["outlines"][2]["feed_id"]
    # Bob's import of the same document: his own registrations over the same shared feeds.
    bob = (await client.post("/api/v1/feeds/opml", content=doc, headers={**_auth(keys["bob"]), **headers})).json()
    assert [o["status"] for o in bob["outlines"]] == ["added", "added", "known", "added"]
    assert [o["feed_id"] for o in bob["outlines"]] == [o["feed_id"] for o in alice["outlines"]]
    resources = [f.resource for f in await service.store.list_feeds()]
    assert sorted(resources) == list(range(len(resources)))  # dense, none reused
    # The engine knows every imported feed: a profile can name them at once.
    spec = {"name": "p", "rules": [{"name": "w", "watch": {"feeds": [alice["outlines"][3]["feed_id"]], "within": "1m"}}]}
    assert (await client.post("/api/v1/profiles", json=spec, headers=_auth(keys["alice"]))).status_code == 201
