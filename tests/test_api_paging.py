"""Lists for clients that poll (issue 23): one page shape everywhere, keyset cursors, and
``since`` / ``after`` on a profile's CEIs and entries to read each item exactly once.

The walk tests run on SQLite and PostgreSQL without the loop; the ``since``/``after``
test runs the real loop against the local feed farm, resolving CEIs while it reads.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.farm import FeedFarm
from tests.test_e2e_support import e2e_settings, eventually, motivating, running, users_app

LISTS = ["/api/v1/feeds", "/api/v1/profiles", "/api/v1/targets", "/api/v1/deliveries",
         "/api/v1/events/recent"]


class Api:
    def __init__(self, client: httpx.AsyncClient, key: str) -> None:
        self.client = client
        self.h = {"Authorization": f"Bearer {key}"}

    async def get(self, path: str, **params: Any) -> httpx.Response:
        return await self.client.get(path, headers=self.h, params=params)

    async def post(self, path: str, body: Any) -> httpx.Response:
        return await self.client.post(path, headers=self.h, json=body)


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[Api]:
    async with users_app(database_url) as (_, client, keys):
        yield Api(client, keys["alice"])


async def _walk(api: Api, path: str, limit: int) -> tuple[list[dict[str, Any]], list[httpx.Response]]:
    """Follow ``next`` from the first page to the end."""
    pages = [await api.get(path, limit=limit)]
    while True:
        r = pages[-1]
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"items", "total", "cursor", "next"}, body
        assert len(body["items"]) <= limit
        if body["next"] is None:
            assert body["cursor"] is None and "link" not in r.headers
            break
        assert r.headers["link"] == f'<{body["next"]}>; rel="next"'
        assert f"cursor={body['cursor']}" in body["next"] and f"limit={limit}" in body["next"]
        pages.append(await api.client.get(body["next"], headers=api.h))
    return [item for p in pages for item in p.json()["items"]], pages


async def test_every_list_has_the_same_page_shape(api: Api) -> None:
    for path in LISTS:
        r = await api.get(path)
        assert r.status_code == 200, (path, r.text)
        body = r.json()
        assert body["items"] == [] and body["cursor"] is None and body["next"] is None, path
        assert "link" not in r.headers


async def test_feeds_and_profiles_walk_page_by_page_each_item_once(api: Api) -> None:
    ids = []
    for i in range(5):
        r = await api.post("/api/v1/feeds", {"url": f"http://127.0.0.1:9/{i}.xml"})
        ids.append(r.json()["id"])
    items, pages = await _walk(api, "/api/v1/feeds", 2)
    assert [f["id"] for f in items] == ids
    assert [len(p.json()["items"]) for p in pages] == [2, 2, 1]
    assert {p.json()["total"] for p in pages} == {5}

    pids = []
    for i in range(3):
        r = await api.post("/api/v1/profiles", {"name": f"p{i}", "rules": [
            {"name": "w", "watch": {"feeds": [str(ids[i])], "within": "1m"}}]})
        pids.append(r.json()["id"])
    items, pages = await _walk(api, "/api/v1/profiles", 2)
    assert [p["id"] for p in items] == pids and pages[0].json()["total"] == 3

    # Keyset: a feed registered between two pages neither repeats nor shifts the rest.
    first = (await api.get("/api/v1/feeds", limit=2)).json()
    late = (await api.post("/api/v1/feeds", {"url": "http://127.0.0.1:9/late.xml"})).json()["id"]
    rest = (await api.client.get(first["next"], headers=api.h)).json()
    assert [f["id"] for f in rest["items"]] == ids[2:4] and rest["total"] == 6
    tail = (await api.client.get(rest["next"], headers=api.h)).json()
    assert [f["id"] for f in tail["items"]] == [ids[4], late] and tail["next"] is None

    # A CEI list of a profile: its own (release, id) cursor.
    r = await api.get(f"/api/v1/profiles/{pids[0]}/ceis")
    assert r.json() == {"items": [], "total": 0, "cursor": None, "next": None}


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/api/v1/feeds", {"cursor": "not-a-cursor"}, "cursor"),
        ("/api/v1/feeds", {"cursor": "WyJ4Il0"}, "cursor"),  # ["x"]: not a feed id
        ("/api/v1/feeds", {"cursor": "Wy0xXQ"}, "cursor"),  # [-1]
        ("/api/v1/profiles", {"cursor": "WzEsMl0"}, "cursor"),  # [1, 2]: another list's
        ("/api/v1/profiles", {"limit": 0}, "limit"),
        ("/api/v1/profiles", {"limit": 1001}, "limit"),
        ("/api/v1/deliveries", {"cursor": "W3RydWVd"}, "cursor"),  # [true]
        ("/api/v1/events/recent", {"cursor": "WzE4NDQ2NzQ0MDczNzA5NTUxNjE2XQ"}, "cursor"),  # [2**64]
    ],
)
async def test_bad_paging_parameters_answer_422_naming_them(
    api: Api, path: str, params: dict[str, Any], field: str
) -> None:
    r = await api.get(path, **params)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["query", field]


@pytest.mark.parametrize(
    "since",
    ["yesterday", "2026-11-25", "2026-11-25T14:00:00", "2026-11-25T25:00:00Z",
     "0001-01-01T00:00:00+01:00", "2026-11-25T14:00:00Z garbage"],
)
async def test_since_must_be_rfc3339_with_an_offset(api: Api, since: str) -> None:
    r = await api.post("/api/v1/feeds", {"url": "http://127.0.0.1:9/a.xml"})
    pid = (await api.post("/api/v1/profiles", {"name": "p", "rules": [
        {"name": "w", "watch": {"feeds": [str(r.json()["id"])], "within": "1m"}}]})).json()["id"]
    for what in ("ceis", "entries"):
        r = await api.get(f"/api/v1/profiles/{pid}/{what}", since=since)
        assert r.status_code == 422, r.text
        body = r.json()
        assert body["errors"][0]["loc"] == ["query", "since"] and "RFC 3339" in body["detail"]
    for what, after in (("ceis", "WyJ4Il0"), ("entries", "WzFd")):
        r = await api.get(f"/api/v1/profiles/{pid}/{what}", after=after)
        assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["query", "after"]


async def _read_new(px: Any, path: str, cursor: str | None, since: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """Everything after ``cursor`` (or from ``since``), 2 per page, and the cursor to store."""
    got: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 2, **({"after": cursor} if cursor else {"since": since})}
    while True:
        r = await px.get(path, params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["cursor"] and f"after={body['cursor']}" in body["next"]
        got.extend(body["items"])
        if "link" in r.headers:  # a next page already waits
            assert r.headers["link"] == f'<{body["next"]}>; rel="next"'
        if len(body["items"]) < 2:
            return got, body["cursor"]
        params = {"limit": 2, "after": body["cursor"]}


async def test_a_client_polling_with_after_reads_each_resolution_and_entry_once(sqlite_url: str) -> None:
    settings = e2e_settings(sqlite_url)
    async with FeedFarm(["mish", "cnn", "money"], prefill=1) as farm, running(settings) as px:
        ids = [(await px.post("/api/v1/feeds", {"url": farm.url(n)})).json()["id"]
               for n in ("mish", "cnn", "money")]
        start = dt.datetime.now(dt.UTC).isoformat()
        body = motivating(*ids, every="1s", slack="1s", within="1s")
        pid = (await px.post("/api/v1/profiles", body)).json()["id"]
        ceis_path, entries_path = f"/api/v1/profiles/{pid}/ceis", f"/api/v1/profiles/{pid}/entries"

        seen: list[dict[str, Any]] = []
        entries: list[dict[str, Any]] = []
        cursor = entries_cursor = None
        published = []
        for i in range(4):
            farm.publish("mish", title=f"Oil {i}", summary="oil")
            published.append(f"Oil {i}")

            async def more(n: int = len(seen) + 2) -> bool:
                nonlocal cursor
                new, cursor = await _read_new(px, ceis_path, cursor, since=start)
                seen.extend(new)
                return len(seen) >= n

            await eventually(more, within=60, what="two more resolutions")
            new, entries_cursor = await _read_new(px, entries_path, entries_cursor, since=start)
            entries.extend(new)

        # Caught up: everything resolved so far, read once, in the order it was resolved.
        async def caught_up() -> bool:
            nonlocal cursor
            resolved = {c["id"] for state in ("captured", "missed") for c in
                        (await px.get(ceis_path, params={"state": state, "limit": 1000})).json()["items"]}
            new, cursor = await _read_new(px, ceis_path, cursor)
            seen.extend(new)
            return resolved <= {c["id"] for c in seen}

        await eventually(caught_up, within=30, what="the poller caught up")
        ids_seen = [c["id"] for c in seen]
        assert len(ids_seen) == len(set(ids_seen)), "a resolution was read twice"
        assert all(c["state"] in ("captured", "missed") for c in seen)
        chronons = [c["resolved_chronon"] for c in seen]
        assert chronons == sorted(chronons)

        async def all_entries() -> bool:
            nonlocal entries_cursor
            listed = (await px.get(entries_path, params={"limit": 1000})).json()["items"]
            new, entries_cursor = await _read_new(px, entries_path, entries_cursor)
            entries.extend(new)
            return {(e["id"], e["cei_id"]) for e in listed} <= {(e["id"], e["cei_id"]) for e in entries}

        await eventually(all_entries, within=30, what="every captured entry read")
        assert any(e["title"] in published for e in entries), entries
        keys = [(e["id"], e["cei_id"]) for e in entries]
        assert len(keys) == len(set(keys)), "an entry was read twice"
        assert [e["id"] for e in entries] == sorted(e["id"] for e in entries)

        # since: only from then on. A future `since` is an empty page that still hands
        # out a cursor; a `since` before everything reads the same items as the poller.
        future = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()
        r = (await px.get(ceis_path, params={"since": future})).json()
        assert r["items"] == [] and r["cursor"]
        everything, _ = await _read_new(px, ceis_path, None, since=start)
        assert [c["id"] for c in everything][: len(ids_seen)] == ids_seen
        # The CEIs' since compares resolution times: a CEI resolved before is left out.
        mid = seen[len(seen) // 2]
        later, _ = await _read_new(px, ceis_path, None, since=_resolved_at(px, mid))
        assert later and mid["id"] in {c["id"] for c in later}
        # (2 s of margin: a resolution is written a little after its chronon starts.)
        early = [c for c in seen if c["resolved_chronon"] <= mid["resolved_chronon"] - 40]
        assert not {c["id"] for c in early} & {c["id"] for c in later}


def _resolved_at(px: Any, cei: dict[str, Any]) -> str:
    """The wall time of the chronon the CEI was resolved in (the resolution's record is
    written at or after it)."""
    at: dt.datetime = px.service.clock.start_of(cei["resolved_chronon"])
    return at.isoformat()
