"""Politeness: per-host limits, error back-off, Retry-After and cache-hint "not before" times.

The time computations are pure functions of the response headers and the
``now`` passed in; only :class:`HostLimiter` waits, and it uses the
monotonic clock because politeness is about real elapsed time between
requests, whatever the caller's notion of ``now``.

Nothing here decides *which* feed to probe: the scheduler reads the
``not_before`` a probe result carries and may or may not respect it.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

__all__ = [
    "HostLimiter",
    "backoff_not_before",
    "cache_not_before",
    "parse_http_date",
    "parse_retry_after",
]

_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?(\d+)", re.I)
_NO_CACHE = re.compile(r"(?:^|[,\s])(?:no-store|no-cache)\b", re.I)


def parse_http_date(value: str | None) -> datetime | None:
    """An HTTP-date (RFC 9110 §5.6.7, all three historic forms) as aware UTC, else ``None``."""
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def parse_retry_after(value: str | None, now: datetime) -> datetime | None:
    """When a ``Retry-After`` header allows the next request, or ``None`` if absent/invalid.

    RFC 9110 §10.2.3: either delay-seconds or an HTTP-date.  A date in the
    past means "now".
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return now + timedelta(seconds=int(text))
    when = parse_http_date(text)
    if when is None:
        return None
    return max(when, now)


def backoff_not_before(
    consecutive_errors: int, now: datetime, *, base: float, cap: float
) -> datetime:
    """``now + min(cap, base * 2**(errors-1))``: exponential back-off that never stops retrying.

    Unlike readers that stop polling after a few errors, a failing feed keeps
    being retried at most every ``cap`` seconds; only 410 Gone or an operator
    disables it.
    """
    exponent = max(consecutive_errors - 1, 0)
    # 2**exponent overflows floats for absurd counts; the cap is reached long before.
    delay = cap if exponent >= 64 else min(cap, base * (2.0**exponent))
    return now + timedelta(seconds=delay)


def cache_not_before(
    headers: Mapping[str, str],
    ttl_minutes: int | None,
    now: datetime,
    *,
    minimum: float,
    maximum: float,
) -> datetime | None:
    """The "not before" a response's freshness implies, clamped to ``[minimum, maximum]`` seconds.

    Freshness (RFC 9111 §4.2.1): ``Cache-Control: max-age`` wins over
    ``Expires`` (measured against the response's ``Date`` to be immune to
    clock skew), minus ``Age``; ``no-store``/``no-cache`` mean no hint.  An
    RSS ``<ttl>`` (minutes, RSS 2.0) is another lower bound; the larger hint
    wins.  ``None`` when there is no positive hint.
    """
    lifetime = 0.0
    cc = headers.get("cache-control")
    if cc and _NO_CACHE.search(cc):
        lifetime = 0.0
    elif cc and (m := _MAX_AGE.search(cc)):
        lifetime = float(m.group(1))
    else:
        expires = headers.get("expires")
        if expires is not None:
            when = parse_http_date(expires)
            date = parse_http_date(headers.get("date")) or now
            # RFC 9111 §5.3: an invalid Expires (e.g. "0") means already expired.
            lifetime = (when - date).total_seconds() if when is not None else 0.0
    age = headers.get("age")
    if lifetime > 0 and age and age.strip().isdigit():
        lifetime -= float(age)
    if ttl_minutes is not None and ttl_minutes > 0:
        lifetime = max(lifetime, ttl_minutes * 60.0)
    if lifetime <= 0:
        return None
    return now + timedelta(seconds=min(max(lifetime, minimum), maximum))


class _Host:
    __slots__ = ("next_start", "sem", "users")

    def __init__(self, concurrency: int) -> None:
        self.sem = asyncio.Semaphore(concurrency)
        self.next_start = 0.0
        self.users = 0


class HostLimiter:
    """At most ``concurrency`` requests in flight per host, starts spaced by ``min_delay`` seconds.

    State is kept per host only while it matters (requests in flight or a
    delay pending), so memory follows the number of active hosts, not the
    number of probes.  Not thread-safe: one event loop.
    """

    def __init__(
        self,
        concurrency: int,
        min_delay: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"per-host concurrency must be >= 1, got {concurrency}")
        if min_delay < 0:
            raise ValueError(f"per-host minimum delay must be >= 0, got {min_delay}")
        self.concurrency = concurrency
        self.min_delay = min_delay
        self._clock = clock
        self._hosts: dict[str, _Host] = {}

    def __len__(self) -> int:
        """Hosts currently tracked (for tests and memory checks)."""
        return len(self._hosts)

    def slot(self, host: str) -> _Slot:
        """Wait for a free slot and the host's delay, then hold the slot for one request.

        ``async with limiter.slot(host): ...``.  A class rather than an
        ``asynccontextmanager``: this runs once per probe, and a generator-based
        context manager costs several microseconds more.
        """
        return _Slot(self, host.lower())

    def _enter(self, key: str) -> _Host:
        state = self._hosts.get(key)
        if state is None:
            state = self._hosts[key] = _Host(self.concurrency)
        state.users += 1
        return state

    def _leave(self, key: str, state: _Host) -> None:
        state.users -= 1
        if state.users == 0 and state.next_start <= self._clock():
            self._hosts.pop(key, None)
        elif len(self._hosts) > 4096:
            self._sweep()

    def _sweep(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._hosts.items() if s.users == 0 and s.next_start <= now]:
            del self._hosts[key]


class _Slot:
    """One request's turn at a host (see :meth:`HostLimiter.slot`)."""

    __slots__ = ("_key", "_limiter", "_state")

    def __init__(self, limiter: HostLimiter, key: str) -> None:
        self._limiter = limiter
        self._key = key
        self._state: _Host | None = None

    async def __aenter__(self) -> None:
        limiter = self._limiter
        state = self._state = limiter._enter(self._key)
        try:
            await state.sem.acquire()
        except BaseException:
            limiter._leave(self._key, state)
            raise
        if limiter.min_delay > 0:
            try:
                now = limiter._clock()
                start = max(now, state.next_start)
                state.next_start = start + limiter.min_delay
                if start > now:
                    await asyncio.sleep(start - now)
            except BaseException:
                state.sem.release()
                limiter._leave(self._key, state)
                raise

    async def __aexit__(self, *exc: object) -> None:
        state = self._state
        assert state is not None
        state.sem.release()
        self._limiter._leave(self._key, state)
