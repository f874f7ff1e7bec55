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
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

__all__ = ["ResponseCache", "TtlMap"]

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
