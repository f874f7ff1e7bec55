"""Publication pings: a light HTTP POST per publication, as WebSub/rssCloud hubs send.

The pinger never blocks a publication: ``submit`` only schedules a task.  A
``drop_rate`` share of pings is never sent; a ``delay_rate`` share of the rest
waits ``delay`` seconds (fixed or uniform in a range) first.  Drops and delays
are drawn from a seeded RNG in publication order, so a run with the
same seed and the same publications drops the same pings.  It does not retry a
failed ping (hubs differ; the service must cope with lost pings anyway).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from proxy.farm._trace import Publication

if TYPE_CHECKING:
    import aiohttp


@dataclass(frozen=True, slots=True)
class PingRequest:
    """Where and what to POST for one publication."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    """``None``: a JSON object ``{"feed_id", "feed_url", "entry_id"}``."""


PingResolver = Callable[[Publication, str], "PingRequest | None"]
"""``(publication, feed_url) -> request``; ``None`` sends no ping for that publication."""


@dataclass(frozen=True, slots=True)
class PingRecord:
    """What became of one publication's ping."""

    feed_id: str
    entry_id: str
    outcome: Literal["sent", "dropped", "failed", "skipped"]
    status: int | None
    """The receiver's HTTP status when the POST completed."""
    delay: float
    error: str | None = None


PingDelay = float | tuple[float, float]


class Pinger:
    """Sends pings for publications; owned and driven by ``FeedFarm``."""

    def __init__(
        self,
        target: str | PingResolver,
        *,
        drop_rate: float = 0.0,
        delay: PingDelay = 0.0,
        delay_rate: float = 1.0,
        seed: int | None = None,
        timeout: float = 5.0,
    ) -> None:
        if not 0.0 <= drop_rate <= 1.0:
            raise ValueError(f"ping_drop_rate must be in [0, 1], got {drop_rate}")
        if not 0.0 <= delay_rate <= 1.0:
            raise ValueError(f"ping_delay_rate must be in [0, 1], got {delay_rate}")
        lo, hi = delay if isinstance(delay, tuple) else (delay, delay)
        if lo < 0 or hi < lo:
            raise ValueError(
                f"ping_delay must be >= 0 or a range (lo, hi) with lo <= hi, got {delay}"
            )
        self._target = target
        self._drop_rate = drop_rate
        self._delay = (float(lo), float(hi))
        self._delay_rate = delay_rate
        self._rng = random.Random(seed)
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.records: list[PingRecord] = []

    async def start(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self._timeout),
            connector=aiohttp.TCPConnector(limit=100),
        )

    def _resolve(self, pub: Publication, feed_url: str) -> PingRequest | None:
        if callable(self._target):
            return self._target(pub, feed_url)
        url = self._target.format(feed_id=pub.feed_id, feed_url=feed_url, entry_id=pub.entry_id)
        return PingRequest(url)

    def submit(self, pub: Publication, feed_url: str) -> None:
        """Schedule the ping of ``pub`` (or record its drop); returns at once."""
        # Draw all three numbers for every publication so that a drop does not
        # shift the fate of later pings: the same seed gives the same run.
        dropped = self._rng.random() < self._drop_rate
        delayed = self._rng.random() < self._delay_rate
        lo, hi = self._delay
        delay = self._rng.uniform(lo, hi) if delayed else 0.0
        if dropped:
            self.records.append(PingRecord(pub.feed_id, pub.entry_id, "dropped", None, delay))
            return
        request = self._resolve(pub, feed_url)
        if request is None:
            self.records.append(PingRecord(pub.feed_id, pub.entry_id, "skipped", None, delay))
            return
        task = asyncio.get_running_loop().create_task(self._send(pub, feed_url, request, delay))
        self._tasks.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            # Cancelled by close(), possibly before it even started: record it here,
            # where every cancellation passes, not in _send.
            if task.cancelled():
                self.records.append(
                    PingRecord(pub.feed_id, pub.entry_id, "failed", None, delay, "farm closed first")
                )

        task.add_done_callback(done)

    async def _send(self, pub: Publication, feed_url: str, req: PingRequest, delay: float) -> None:
        import aiohttp

        if delay > 0:
            await asyncio.sleep(delay)
        body = req.body
        headers = dict(req.headers)
        if body is None:
            body = json.dumps(
                {"feed_id": pub.feed_id, "feed_url": feed_url, "entry_id": pub.entry_id}
            ).encode()
            headers.setdefault("Content-Type", "application/json")
        assert self._session is not None, "Pinger.start() was not awaited"
        try:
            async with self._session.post(req.url, data=body, headers=headers) as resp:
                await resp.read()
                record = PingRecord(pub.feed_id, pub.entry_id, "sent", resp.status, delay)
        except (aiohttp.ClientError, TimeoutError) as exc:
            record = PingRecord(
                pub.feed_id, pub.entry_id, "failed", None, delay, f"{type(exc).__name__}: {exc}"
            )
        self.records.append(record)

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def drain(self, at_most: float = 10.0) -> None:
        """Wait (at most ``at_most`` seconds) until every scheduled ping was sent or failed."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=at_most)

    async def close(self) -> None:
        """Cancel pings still waiting and close the HTTP session."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None
