"""Response bodies of the heavy reads, reused while fresh (issue 24.4: the budget comes first).

``wrk -c20`` on ``GET /api/v1/metrics/summary`` recomputed the same aggregate
over every CEI hundreds of times a second, and listing profiles rebuilt and
re-serialised the same objects per request; the API's CPU and database time
came out of the chronon loop's. Here a body is computed once per key and
version, at most once per ``ttl`` seconds, and concurrent requests for the
same key share one computation (single flight). The service bumps a user's
profile version on every create, replace and delete, so a client reads its own
writes at once; what another process changed (a standby answers reads) shows
within ``ttl``.

What it does not do: cache per-request variations it is not told about (the
key must hold every parameter of the response), or bound staleness below
``ttl`` for data the version does not cover (the summary's counts change with
every chronon: they are at most ``ttl`` old).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

__all__ = ["ListCache", "ResponseCache", "TtlMap"]


@dataclass
class ResponseCache:
    """``await get(key, version, ttl, build)``: the body ``build()`` made for ``key`` and
    ``version`` less than ``ttl`` seconds ago, else a fresh one (one build at a time per key)."""

    max_entries: int = 4096
    clock: Callable[[], float] = time.monotonic
    _entries: OrderedDict[Hashable, tuple[float, Hashable, bytes]] = field(default_factory=OrderedDict)
    _building: dict[tuple[Hashable, Hashable], asyncio.Task[bytes]] = field(default_factory=dict)
    builds: int = 0  # how many times a body was computed (tests count them)

    async def get(self, key: Hashable, version: Hashable, ttl: float,
                  build: Callable[[], Awaitable[bytes]]) -> bytes:
        hit = self._entries.get(key)
        if hit is not None and hit[1] == version and self.clock() - hit[0] < ttl:
            self._entries.move_to_end(key)
            return hit[2]
        task = self._building.get((key, version))
        if task is None:
            task = asyncio.ensure_future(self._build(key, version, build))
            self._building[(key, version)] = task
        # A client that goes away cancels its own wait, never the build the others share.
        return await asyncio.shield(task)

    async def _build(self, key: Hashable, version: Hashable,
                     build: Callable[[], Awaitable[bytes]]) -> bytes:
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
class _List:
    built_at: float
    items: dict[int, bytes]
    body: bytes | None = None


@dataclass
class ListCache:
    """Per key (a user's listing), each item's JSON by id, joined in id order on demand.

    The writes of this process amend it (:meth:`put`, :meth:`drop`) instead of
    invalidating it, so a client creating profiles while others list them does not make
    every listing reload every profile. Once older than ``ttl`` it is reloaded in the
    background (for what other processes changed) while the amended listing is still
    served: a long listing's reload never holds a request up. Writes that land while
    a load runs are applied to its result, so a client always reads its own writes.
    """

    max_keys: int = 4096
    clock: Callable[[], float] = time.monotonic
    _lists: OrderedDict[Hashable, _List] = field(default_factory=OrderedDict)
    _building: dict[Hashable, asyncio.Task[bytes]] = field(default_factory=dict)
    _pending: dict[Hashable, list[tuple[int, bytes | None]]] = field(default_factory=dict)
    builds: int = 0

    async def get(self, key: Hashable, ttl: float,
                  load: Callable[[], Awaitable[list[tuple[int, bytes]]]]) -> bytes:
        entry = self._lists.get(key)
        if entry is None:
            task = self._building.get(key) or self._start(key, load)
            return await asyncio.shield(task)
        if self.clock() - entry.built_at >= ttl and key not in self._building:
            self._start(key, load)
        self._lists.move_to_end(key)
        if entry.body is None:
            entry.body = _joined(entry.items)
        return entry.body

    def _start(self, key: Hashable, load: Callable[[], Awaitable[list[tuple[int, bytes]]]]
               ) -> asyncio.Task[bytes]:
        task = asyncio.ensure_future(self._build(key, load))
        # A background refresh nobody awaits may fail (database away): its error is the
        # next waiting request's to report, not the event loop's to log as unretrieved.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self._building[key] = task
        self._pending[key] = []
        return task

    async def _build(self, key: Hashable, load: Callable[[], Awaitable[list[tuple[int, bytes]]]]) -> bytes:
        started = self.clock()  # the listing is as old as the data it read
        try:
            items = dict(await load())
            for item_id, item in self._pending.get(key, ()):  # written while it loaded
                if item is None:
                    items.pop(item_id, None)
                else:
                    items[item_id] = item
            self.builds += 1
            entry = _List(started, items, _joined(items))
            self._lists[key] = entry
            self._lists.move_to_end(key)
            while len(self._lists) > self.max_keys:
                self._lists.popitem(last=False)
            assert entry.body is not None
            return entry.body
        finally:
            self._building.pop(key, None)
            self._pending.pop(key, None)

    def put(self, key: Hashable, item_id: int, item: bytes) -> None:
        """This process created or replaced item ``item_id`` of ``key``'s listing."""
        self._amend(key, item_id, item)

    def drop(self, key: Hashable, item_id: int) -> None:
        """This process deleted item ``item_id`` of ``key``'s listing."""
        self._amend(key, item_id, None)

    def _amend(self, key: Hashable, item_id: int, item: bytes | None) -> None:
        entry = self._lists.get(key)
        if entry is not None:
            if item is None:
                entry.items.pop(item_id, None)
            else:
                entry.items[item_id] = item
            entry.body = None
        pending = self._pending.get(key)
        if pending is not None:
            pending.append((item_id, item))


def _joined(items: dict[int, bytes]) -> bytes:
    return b"[" + b",".join(items[i] for i in sorted(items)) + b"]"


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
