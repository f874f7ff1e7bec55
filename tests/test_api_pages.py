"""Profile listing pages amended in memory by this process's changes (issue 24.4).

The invariant: whatever this process created, replaced or deleted since a page was
read, the page it answers is byte for byte the page a fresh read would answer (body
and ``Link``). Checked with Hypothesis over sequences of changes and reads on a fake
store (ids not in creation order, as PostgreSQL's sequences may commit them), then
the gate that makes it hold with changes in flight, then through the API.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any
from urllib.parse import urlencode

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.api._cache import ProfilePages
from proxy.api.paging import encode_cursor
from proxy.service import ProfileChanged, ProfileChanges
from proxy.store import Profile, Rule
from tests.test_api import Api, _feeds, api  # noqa: F401  (api is a fixture)
from tests.test_e2e_support import motivating

T0 = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
PATH = "/api/v1/profiles"


def profile(user_id: int, profile_id: int, name: str | None = None) -> Profile:
    rule = Rule(id=profile_id * 10, profile_id=profile_id, name="r", position=0,
                spec={"trigger": {"feed": "1", "every": "1h"}}, state=None, feed_ids=(1,))
    return Profile(id=profile_id, user_id=user_id, name=name or f"p{profile_id}",
                   created_at=T0, updated_at=T0, rules=(rule,))


class FakeStore:
    """Profiles by id; ``read`` is what the route's ``load`` does on the database."""

    def __init__(self) -> None:
        self.rows: dict[int, Profile] = {}
        self.reads = 0

    def loader(self, user_id: int, after: int | None, limit: int) -> Any:
        async def load() -> tuple[list[Profile], int]:
            self.reads += 1
            mine = sorted((p for p in self.rows.values() if p.user_id == user_id), key=lambda p: p.id)
            return [p for p in mine if after is None or p.id > after][:limit + 1], len(mine)
        return load


async def read(pages: ProfilePages, store: FakeStore, user_id: int, limit: int,
               after: int | None) -> tuple[bytes, str | None]:
    query = [("limit", str(limit))]
    cursor = [("cursor", encode_cursor([after]))] if after is not None else []
    return await pages.get(user_id, urlencode(query + cursor), after=after, limit=limit, path=PATH,
                           params=query, ttl=3600.0, load=store.loader(user_id, after, limit))


Op = tuple[Any, ...]
ops = st.lists(st.one_of(
    st.tuples(st.just("create"), st.integers(1, 2), st.integers(1, 10)),
    st.tuples(st.just("replace"), st.integers(1, 2), st.integers(0, 10)),
    st.tuples(st.just("delete"), st.integers(1, 2), st.integers(0, 10)),
    st.tuples(st.just("read"), st.integers(1, 2), st.integers(1, 3), st.none() | st.integers(0, 10)),
), max_size=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_an_amended_page_is_the_page_a_fresh_read_gives(script: list[Op]) -> None:
    async def run() -> None:
        store, changes = FakeStore(), ProfileChanges()
        pages = ProfilePages(changes)
        for op in script:
            kind, user = op[0], op[1]
            mine = sorted(p.id for p in store.rows.values() if p.user_id == user)
            if kind == "read":
                _, _, limit, after = op
                fresh = ProfilePages(ProfileChanges())
                assert await read(pages, store, user, limit, after) == \
                    await read(fresh, store, user, limit, after), op
                continue
            async with changes.changing(user):
                if kind == "create" and op[2] not in store.rows:
                    store.rows[op[2]] = created = profile(user, op[2])
                    changes.announce(ProfileChanged(user, "created", created.id, created))
                elif kind == "replace" and mine:
                    target = mine[op[2] % len(mine)]
                    store.rows[target] = replaced = profile(user, target, f"renamed {op}")
                    changes.announce(ProfileChanged(user, "replaced", target, replaced))
                elif kind == "delete" and mine:
                    target = mine[op[2] % len(mine)]
                    del store.rows[target]
                    changes.announce(ProfileChanged(user, "deleted", target))

    asyncio.run(run())


async def test_creates_are_amended_in_without_reading_the_page_again() -> None:
    store, changes = FakeStore(), ProfileChanges()
    pages = ProfilePages(changes)
    assert b'"total":0' in (await read(pages, store, 1, 2, None))[0]
    for profile_id in (1, 2, 3):
        async with changes.changing(1):
            store.rows[profile_id] = created = profile(1, profile_id)
            changes.announce(ProfileChanged(1, "created", profile_id, created))
    body, link = await read(pages, store, 1, 2, None)
    assert store.reads == 1 == pages.builds
    assert b'"total":3' in body and b'"name":"p3"' not in body
    assert link is not None and link == f'<{PATH}?limit=2&cursor={encode_cursor([2])}>; rel="next"'


async def test_a_page_is_read_only_once_no_change_is_between_its_commit_and_its_announcement() -> None:
    """A create stored but not yet announced: a page read now could not tell whether its
    total holds it. The read waits for the announcement; the page then counts it once."""
    store, changes = FakeStore(), ProfileChanges()
    pages = ProfilePages(changes)
    stored, announce = asyncio.Event(), asyncio.Event()

    async def create() -> None:
        async with changes.changing(1):
            store.rows[1] = created = profile(1, 1)
            stored.set()
            await announce.wait()
            changes.announce(ProfileChanged(1, "created", 1, created))

    creating = asyncio.ensure_future(create())
    await stored.wait()
    reading = asyncio.ensure_future(read(pages, store, 1, 5, None))
    for _ in range(20):
        await asyncio.sleep(0)
    assert store.reads == 0 and not reading.done()  # waits for the create's announcement
    announce.set()
    await creating
    body, _ = await reading
    assert body.count(b'"name":"p1"') == 1 and b'"total":1' in body


async def test_a_change_waits_while_a_page_is_read_and_is_amended_in_after() -> None:
    store, changes = FakeStore(), ProfileChanges()
    pages = ProfilePages(changes)
    loading, release = asyncio.Event(), asyncio.Event()
    slow = store.loader(1, None, 5)

    async def load() -> tuple[list[Profile], int]:
        loading.set()
        await release.wait()
        return await slow()

    reading = asyncio.ensure_future(pages.get(1, "limit=5", after=None, limit=5, path=PATH,
                                              params=[("limit", "5")], ttl=3600.0, load=load))
    await loading.wait()
    entered = asyncio.Event()

    async def create() -> None:
        async with changes.changing(1):
            entered.set()
            store.rows[1] = created = profile(1, 1)
            changes.announce(ProfileChanged(1, "created", 1, created))

    creating = asyncio.ensure_future(create())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not entered.is_set()  # held back while the page is read
    release.set()
    await reading
    await creating
    assert store.reads == 1  # read before the create, amended after it
    for body, _ in (await reading, await read(pages, store, 1, 5, None)):
        assert b'"total":1' in body and body.count(b'"name":"p1"') == 1


def _app(api: Api) -> Any:  # noqa: F811
    transport = api.client._transport
    assert isinstance(transport, httpx.ASGITransport)
    return transport.app


async def test_a_page_after_a_create_shows_it_at_once_without_a_read(api: Api) -> None:  # noqa: F811
    mish, cnn, money = await _feeds(api, 3)
    pages: ProfilePages = _app(api).state.profile_pages
    queries: list[dict[str, Any]] = [{}, {"limit": 2}]

    async def listing() -> list[tuple[str, str | None]]:
        answers = [await api.client.get("/api/v1/profiles", params=q, headers=api.h()) for q in queries]
        return [(r.text, r.headers.get("Link")) for r in answers]

    await listing()
    builds = pages.builds
    for name in ("a", "b", "c"):
        body: Any = motivating(mish, cnn, money) | {"name": name}
        created = (await api.client.post("/api/v1/profiles", json=body, headers=api.h())).json()
        page = (await api.client.get("/api/v1/profiles", headers=api.h())).json()
        assert page["items"][-1] == created | {"new_targets": []}  # read your own write
        assert page["total"] == len(page["items"])
    second = (await api.client.get("/api/v1/profiles", params={"limit": 2}, headers=api.h())).json()
    queries.append({"limit": 2, "cursor": second["cursor"]})
    await listing()
    await api.client.post("/api/v1/profiles", json=motivating(mish, cnn, money) | {"name": "d"},
                          headers=api.h())
    amended = await listing()
    assert pages.builds == builds + 1  # the third query's first read; no read after a create
    pages.clear()
    assert amended == await listing()  # byte for byte what a fresh read answers


async def test_each_users_pages_hold_only_their_own_creates(api: Api) -> None:  # noqa: F811
    alice_feeds = await _feeds(api, 3)
    bob_feeds = [(await api.client.post("/api/v1/feeds", json={"url": f"http://127.0.0.1:9/b/{i}.xml"},
                                        headers=api.h("bob"))).json()["id"] for i in range(3)]
    for who in ("alice", "bob"):  # both pages cached before the creates
        assert (await api.client.get("/api/v1/profiles", headers=api.h(who))).json()["total"] == 0
    mine: dict[str, list[int]] = {"alice": [], "bob": []}
    for i in range(3):
        for who, feeds in (("alice", alice_feeds), ("bob", bob_feeds)):
            body: Any = motivating(*feeds) | {"name": f"{who} {i}"}
            r = await api.client.post("/api/v1/profiles", json=body, headers=api.h(who))
            mine[who].append(r.json()["id"])
    for who in ("alice", "bob"):
        page = (await api.client.get("/api/v1/profiles", headers=api.h(who))).json()
        assert [p["id"] for p in page["items"]] == mine[who] and page["total"] == 3
        assert all(p["name"].startswith(who) for p in page["items"])

