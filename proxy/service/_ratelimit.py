"""Token buckets per key (pings per feed, issue 24.6): a flood is refused, not queued.

A bucket holds at most ``burst`` tokens and gains ``rate`` per second; a
request takes one token or is refused with the seconds until the next one
(the ``Retry-After`` of a 429). The clock is injected (monotonic seconds), so
tests drive it by hand.

Why not a library: ``aiolimiter`` (a leaky bucket) makes callers wait for
capacity rather than refusing them, and ``limits`` counts fixed or moving
windows in a storage backend; a refusal that says when to retry is a few lines
over a dict.

What it does not do: share buckets between processes (each API process limits
what it accepts; only the loop's holder accepts pings) or persist them across
restarts (a restart starts every bucket full).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

__all__ = ["TokenBuckets"]

# Buckets kept before idle (full) ones are dropped; a full bucket is the same as no bucket.
_PRUNE_ABOVE = 10_000


@dataclass
class TokenBuckets:
    """One token bucket per key: ``take(key)`` is 0.0 (accepted) or the seconds to wait."""

    rate: float  # tokens per second
    burst: int
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[Hashable, tuple[float, float]] = field(default_factory=dict)  # key → (tokens, at)

    def __post_init__(self) -> None:
        if not self.rate > 0 or self.burst < 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1 (got {self.rate}, {self.burst})")

    def take(self, key: Hashable) -> float:
        """Take one token of ``key``'s bucket: 0.0 if there was one, else seconds until there is."""
        now = self.clock()
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + max(0.0, now - at) * self.rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            if len(self._buckets) > _PRUNE_ABOVE:
                self._prune(now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate

    def forget(self, key: Hashable) -> None:
        """Drop ``key``'s bucket (its feed was deleted)."""
        self._buckets.pop(key, None)

    def _prune(self, now: float) -> None:
        full = [k for k, (tokens, at) in self._buckets.items()
                if tokens + (now - at) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]
