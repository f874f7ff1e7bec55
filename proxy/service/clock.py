"""Wall-clock time ↔ chronons, at the service's edge.

The core counts chronons as integers; the service maps them onto wall-clock
time with a fixed *origin* (the wall time of chronon 0, persisted in the
database so numbering continues after a restart) and the chronon length.
Ticks are scheduled at absolute times ``origin + t * length`` so the loop does
not drift: a late tick does not push the following ones later.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True, slots=True)
class ChrononClock:
    """Maps wall time to chronon numbers: chronon ``t`` covers ``[origin + t*length, origin + (t+1)*length)``."""

    origin: datetime
    length: float
    wall: Callable[[], float] = time.time

    def chronon_at(self, when: datetime) -> int:
        return math.floor((when - self.origin).total_seconds() / self.length)

    def start_of(self, t: int) -> datetime:
        return self.origin + timedelta(seconds=t * self.length)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.wall(), UTC)

    def current(self) -> int:
        return self.chronon_at(self.now())

    def chronons_for(self, seconds: float) -> int:
        """A duration in chronons, rounded up (a window is never shorter than asked)."""
        return max(0, math.ceil(seconds / self.length - 1e-9))

    async def sleep_until_chronon(self, t: int) -> float:
        """Sleep until chronon ``t`` starts; return the lateness (jitter) in seconds, >= 0."""
        target = self.origin.timestamp() + t * self.length
        delay = target - self.wall()
        if delay > 0:
            await asyncio.sleep(delay)
        return max(0.0, self.wall() - target)
