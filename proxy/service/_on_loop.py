"""The lifecycle's adapters to the chronon loop's event loop: the lease's statements and the probers.

The chronon loop runs on a thread of its own (:mod:`proxy.service._host`); its
store and its prober belong to that thread's event loop. These adapters put the
lease's statements there (:class:`LeasesOnLoop`), send an injected prober's probes
back to the event loop it was opened on (:class:`ProbeAtHome`), and open the
service's own prober on the loop's event loop (:func:`open_prober`).

What they do not do: time the lease (:class:`~proxy.service.leader.Leader` does, on the
API's event loop), or probe anything themselves.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass

from proxy.feeds import FeedState, Fetcher, KnownEntries, ProbePool, Prober, ProbeResult
from proxy.service._host import LoopHost
from proxy.service._shared import fetcher_settings
from proxy.settings import Settings
from proxy.store import Lease, Store


async def open_prober(s: Settings) -> Prober:
    """The service's own prober, opened on the event loop that will probe with it."""
    if s.probe_processes:
        pool = ProbePool(fetcher_settings(s), processes=s.probe_processes)
        await pool.__aenter__()
        return pool
    fetcher = Fetcher(fetcher_settings(s))
    await fetcher.__aenter__()
    return fetcher


@dataclass(frozen=True, slots=True)
class LeasesOnLoop:
    """The lease's statements run on the chronon loop's event loop with its store, where no
    API handler delays them. The :class:`Leader` itself stays on the API's event loop, with
    the service it drives.

    ``turns``: on SQLite, the writer's lock. SQLite takes one writer at a time and makes the
    others poll for its lock (sleeping longer each time they find it taken): after a restore
    of 100,000 profiles the writer's rounds followed each other for tens of seconds, each
    renewal found the lock taken until its 5 s busy timeout, and the process lost its lease
    on a quiet machine. Under the writer's lock a renewal waits for one round at most, in
    turn. (PostgreSQL's renewals do not wait for the rounds: ``None``.)"""

    store: Store
    host: LoopHost
    turns: asyncio.Lock | None = None

    async def acquire_lease(self, name: str, holder: str, *, now: dt.datetime,
                            ttl: float) -> Lease | None:
        return await self.host.run(self.store.acquire_lease(name, holder, now=now, ttl=ttl))

    async def renew_lease(self, lease: Lease, *, now: dt.datetime, ttl: float) -> Lease | None:
        async def renew() -> Lease | None:
            if self.turns is None:
                return await self.store.renew_lease(lease, now=now, ttl=ttl)
            async with self.turns:
                return await self.store.renew_lease(lease, now=now, ttl=ttl)

        return await self.host.run(renew())

    async def release_lease(self, lease: Lease, *, now: dt.datetime) -> bool:
        return await self.host.run(self.store.release_lease(lease, now=now))

    async def current_lease(self, name: str) -> Lease | None:
        return await self.host.run(self.store.current_lease(name))


@dataclass(frozen=True, slots=True)
class ProbeAtHome:
    """An injected prober (a broker client, a test's fetcher) belongs to the event loop it
    was opened on: the loop's thread sends its probes there and awaits the results."""

    prober: Prober
    home: asyncio.AbstractEventLoop

    async def probe(self, state: FeedState, known: KnownEntries, *, now: dt.datetime) -> ProbeResult:
        future = asyncio.run_coroutine_threadsafe(
            self.prober.probe(state, known, now=now), self.home)
        return await asyncio.wrap_future(future)

    async def check_url(self, url: str) -> None:
        await self.prober.check_url(url)

    async def aclose(self) -> None:  # its owner closes it
        return None
