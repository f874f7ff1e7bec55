"""Response bodies of the heavy reads, reused while fresh (issue 24.4: the budget comes first).

``wrk -c20`` on ``GET /api/v1/metrics/summary`` recomputed the same aggregate
over every CEI hundreds of times a second; the API's CPU and database time
came out of the chronon loop's. Lists are paged on indexed keys
(``proxy.api.paging``), and the profile listing's pages are kept here too: a
page of 50 profiles with their rules costs three queries and the rules' JSON,
and ``wrk -c20`` on it served 60-80 requests/s uncached. Here a body is computed once per key and
version, at most once per ``ttl`` seconds, and concurrent requests for the
same key share one computation (single flight). The service bumps a user's
profile version on every create, replace and delete, so a client reads its own
writes at once; what another process changed (a standby answers reads) shows
within ``ttl``.

What it does not do: cache per-request variations it is not told about (the
key must hold every parameter of the response), or bound staleness below
``ttl`` for data the version does not cover (the summary's counts change with
every chronon: they are at most ``ttl`` old).

:class:`ProfilePages` keeps the profile listing's pages the same way, but this
process's own creates and replaces amend them in memory instead of making them
be read again (issue 24.4: with one request in five a create, every listing
was a rebuild of 100 profiles from the database, most of the mixed phase's
CPU). A page is read while no change of that user is in flight
(:meth:`~proxy.service.ProfileChanges.quiet`), so it holds
exactly the changes announced before it, and each one announced after is
applied to it once: the page a client reads after its create holds the profile
and counts it. A delete drops the user's pages (the page would need the row
after its last).
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from proxy.api.paging import Page, encode_cursor, next_url
from proxy.api.schemas import ProfileOut
from proxy.service import ProfileChanged, ProfileChanges
from proxy.store import Profile

__all__ = ["ProfilePages", "ResponseCache", "TtlMap"]

V = TypeVar("V")


@dataclass
class ResponseCache:
    """``await get(key, version, ttl, build)``: the body ``build()`` made for ``key`` and
    ``version`` less than ``ttl`` seconds ago, else a fresh one (one build at a time per key).
    A body is whatever ``build`` returns (bytes, or bytes with headers); one key, one kind."""

    max_entries: int = 4096
    clock: Callable[[], float] = time.monotonic
    _entries: OrderedDict[Hashable, tuple[float, Hashable, Any]] = field(default_factory=OrderedDict)
    _building: dict[tuple[Hashable, Hashable], asyncio.Task[Any]] = field(default_factory=dict)
    builds: int = 0  # how many times a body was computed (tests count them)

    async def get(self, key: Hashable, version: Hashable, ttl: float,
                  build: Callable[[], Awaitable[V]]) -> V:
        hit = self._entries.get(key)
        if hit is not None and hit[1] == version and self.clock() - hit[0] < ttl:
            self._entries.move_to_end(key)
            return cast(V, hit[2])
        task = self._building.get((key, version))
        if task is None:
            task = asyncio.ensure_future(self._build(key, version, build))
            self._building[(key, version)] = task
        # A client that goes away cancels its own wait, never the build the others share.
        return cast(V, await asyncio.shield(task))

    async def _build(self, key: Hashable, version: Hashable,
                     build: Callable[[], Awaitable[V]]) -> V:
        started = self.clock()  # the body is as old as the data it read
        try:
            body = await build()
            self.builds += 1
            self._entries[key] = (started, version, body)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            return body
        finally:
            self._building.pop((key, version), None)

    def clear(self) -> None:
        self._entries.clear()


@dataclass
class _ListedPage:
    """One query's page of a user's profiles: up to ``limit + 1`` items by id (one more than
    shown: there is a next page), the user's total, and what its ``next`` link is made of."""

    read_at: float
    after: int | None  # the page lists ids above this (its cursor), or from the first
    limit: int
    items: list[tuple[int, bytes]]  # (profile id, its JSON)
    total: int
    path: str
    params: tuple[tuple[str, str], ...]  # the query's parameters but the cursor
    rendered: tuple[bytes, str | None] | None = None  # body and Link, until amended


#: The body of a page with no items, to which a page's items are spliced in (``items`` is its
#: first field): the same bytes as ``Page`` with them would serialise to.
_EMPTY_ITEMS = b'{"items":[]'


def _item(profile: Profile) -> bytes:
    """A listed profile's JSON (a listing never shows the secrets its create returned)."""
    return ProfileOut.of(replace(profile, new_targets=())).model_dump_json().encode()


@dataclass
class ProfilePages:
    """``await get(user, query, …, load)``: that page of the user's profiles, read by ``load()``
    at most once per ``ttl`` seconds (one read at a time per page) and amended in between by
    this process's announced changes (``changes``), so it shows a client's own writes at once."""

    changes: ProfileChanges
    max_entries: int = 4096
    clock: Callable[[], float] = time.monotonic
    _pages: OrderedDict[tuple[int, str], _ListedPage] = field(default_factory=OrderedDict)
    _queries: dict[int, set[str]] = field(default_factory=dict)  # cached queries per user
    _building: dict[tuple[int, str], asyncio.Task[_ListedPage]] = field(default_factory=dict)
    builds: int = 0  # how many times a page was read from the database (tests count them)

    def __post_init__(self) -> None:
        self.changes.watch(self.changed)

    async def get(
        self, user_id: int, query: str, *, after: int | None, limit: int, path: str,
        params: Sequence[tuple[str, str]], ttl: float,
        load: Callable[[], Awaitable[tuple[Sequence[Profile], int]]],
    ) -> tuple[bytes, str | None]:
        """The page's body and ``Link`` header. ``query`` is the whole query string (the key);
        ``load()`` reads up to ``limit + 1`` profiles with ids above ``after`` and the total."""
        key = (user_id, query)
        page = self._pages.get(key)
        if page is None or self.clock() - page.read_at >= ttl:
            task = self._building.get(key)
            if task is None:
                task = asyncio.ensure_future(
                    self._build(key, after, limit, path, tuple(params), load))
                self._building[key] = task
            # A client that goes away cancels its own wait, never the read the others share.
            page = await asyncio.shield(task)
        else:
            self._pages.move_to_end(key)
        return _render(page)

    async def _build(
        self, key: tuple[int, str], after: int | None, limit: int, path: str,
        params: tuple[tuple[str, str], ...],
        load: Callable[[], Awaitable[tuple[Sequence[Profile], int]]],
    ) -> _ListedPage:
        try:
            # No change of the user is in flight while the page is read and stored: it holds
            # every change announced so far and none of those announced after (amended in).
            async with self.changes.quiet(key[0]):
                read_at = self.clock()  # the page is as old as the data it read
                rows, total = await load()
                page = _ListedPage(read_at, after, limit, [(p.id, _item(p)) for p in rows],
                                   total, path, params)
                self._put(key, page)
            self.builds += 1
            return page
        finally:
            self._building.pop(key, None)

    def changed(self, change: ProfileChanged) -> None:
        """Apply one of this process's announced changes to the user's cached pages."""
        queries = self._queries.get(change.user_id)
        if not queries:
            return
        pages = [self._pages[(change.user_id, q)] for q in queries]
        if change.profile is None or any(
                change.kind == "created" and _position(p, change.profile_id)[1] for p in pages):
            # A delete, or (never, with the gate) a create a page already holds: read again.
            for query in list(queries):
                self._drop((change.user_id, query))
            return
        item = _item(change.profile)
        for page in pages:
            if change.kind == "created":
                _insert(page, change.profile_id, item)
            else:
                at, held = _position(page, change.profile_id)
                if held:
                    page.items[at] = (change.profile_id, item)
                    page.rendered = None

    def _put(self, key: tuple[int, str], page: _ListedPage) -> None:
        self._pages[key] = page
        self._pages.move_to_end(key)
        self._queries.setdefault(key[0], set()).add(key[1])
        while len(self._pages) > self.max_entries:
            self._drop(next(iter(self._pages)))

    def _drop(self, key: tuple[int, str]) -> None:
        del self._pages[key]
        queries = self._queries[key[0]]
        queries.discard(key[1])
        if not queries:
            del self._queries[key[0]]

    def clear(self) -> None:
        self._pages.clear()
        self._queries.clear()


def _position(page: _ListedPage, profile_id: int) -> tuple[int, bool]:
    """Where ``profile_id`` is or would be among the page's items, and whether it is there."""
    at = bisect.bisect_left(page.items, profile_id, key=lambda item: item[0])
    return at, at < len(page.items) and page.items[at][0] == profile_id


def _insert(page: _ListedPage, profile_id: int, item: bytes) -> None:
    """A profile created after the page was read: it counts in the total, and it is listed
    here if its id falls within the items read (or they reached the end of the list)."""
    page.total += 1
    page.rendered = None
    if page.after is not None and profile_id <= page.after:
        return  # on an earlier page
    at, _ = _position(page, profile_id)
    if at < len(page.items) or len(page.items) <= page.limit:
        page.items.insert(at, (profile_id, item))
        del page.items[page.limit + 1:]


def _render(page: _ListedPage) -> tuple[bytes, str | None]:
    """The page as :func:`proxy.api.paging.page` would answer it: body and ``Link``."""
    if page.rendered is None:
        shown = page.items[:page.limit]
        more = len(page.items) > page.limit
        cursor = encode_cursor([shown[-1][0]]) if more else None
        nxt = next_url(page.path, page.params, "cursor", cursor) if cursor is not None else None
        empty = Page[Any](items=[], total=page.total, cursor=cursor, next=nxt).model_dump_json()
        body = b'{"items":[' + b",".join(item for _, item in shown) + b"]" \
            + empty.encode()[len(_EMPTY_ITEMS):]
        page.rendered = body, f'<{nxt}>; rel="next"' if more else None
    return page.rendered


@dataclass
class TtlMap:
    """A bounded map whose values expire ``ttl`` seconds after they were put (API keys)."""

    ttl: float
    max_entries: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _entries: OrderedDict[Hashable, tuple[float, int]] = field(default_factory=OrderedDict)

    def get(self, key: Hashable) -> int | None:
        hit = self._entries.get(key)
        if hit is None:
            return None
        if self.clock() - hit[0] >= self.ttl:
            del self._entries[key]
            return None
        return hit[1]

    def put(self, key: Hashable, value: int) -> None:
        self._entries[key] = (self.clock(), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget_value(self, value: int) -> None:
        """Drop every entry holding ``value`` (a user whose key was just revoked)."""
        for key in [k for k, (_, v) in self._entries.items() if v == value]:
            del self._entries[key]
