"""Pure politeness computations: Retry-After, back-off, cache hints (fixed clock, table-driven)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from proxy.feeds.politeness import (
    HostLimiter,
    backoff_not_before,
    cache_not_before,
    parse_retry_after,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("120", NOW + 120 * S),
        (" 0 ", NOW),
        ("Mon, 01 Jun 2026 12:05:00 GMT", NOW + 300 * S),  # IMF-fixdate
        ("Monday, 01-Jun-26 12:05:00 GMT", NOW + 300 * S),  # RFC 850
        ("Mon Jun  1 12:05:00 2026", NOW + 300 * S),  # asctime
        ("Mon, 01 Jun 2026 11:00:00 GMT", NOW),  # in the past: now
        ("-5", None),
        ("soon", None),
        ("", None),
    ],
)
def test_parse_retry_after(value: str | None, expected: datetime | None) -> None:
    assert parse_retry_after(value, NOW) == expected


@pytest.mark.parametrize(
    ("errors", "seconds"),
    [(0, 60), (1, 60), (2, 120), (3, 240), (6, 1920), (7, 3600), (8, 3600), (10_000, 3600)],
)
def test_backoff_is_exponential_and_capped(errors: int, seconds: int) -> None:
    assert backoff_not_before(errors, NOW, base=60, cap=3600) == NOW + seconds * S


@pytest.mark.parametrize(
    ("headers", "ttl", "expected_seconds"),
    [
        ({}, None, None),
        ({"cache-control": "max-age=300"}, None, 300),
        ({"cache-control": "public, max-age=\"300\""}, None, 300),
        ({"cache-control": "max-age=300", "age": "100"}, None, 200),
        ({"cache-control": "max-age=300", "expires": "Mon, 01 Jun 2026 13:00:00 GMT"}, None, 300),
        ({"cache-control": "no-store, max-age=300"}, None, None),
        ({"cache-control": "no-cache"}, 10, 600),  # the ttl still counts
        ({"expires": "Mon, 01 Jun 2026 12:10:00 GMT"}, None, 600),
        # Expires measured against Date (clock skew of the origin does not matter)
        ({"expires": "Mon, 01 Jun 2026 10:10:00 GMT", "date": "Mon, 01 Jun 2026 10:00:00 GMT"}, None, 600),
        ({"expires": "0"}, None, None),
        ({"expires": "Mon, 01 Jun 2026 11:00:00 GMT"}, None, None),
        ({"cache-control": "max-age=60"}, 5, 300),  # larger hint wins
        ({"cache-control": "max-age=5"}, None, 30),  # clamped up to the minimum
        ({"cache-control": "max-age=999999"}, None, 7200),  # clamped down to the maximum
        ({}, 100_000, 7200),
    ],
)
def test_cache_not_before(headers: dict[str, str], ttl: int | None, expected_seconds: int | None) -> None:
    got = cache_not_before(headers, ttl, NOW, minimum=30, maximum=7200)
    assert got == (None if expected_seconds is None else NOW + expected_seconds * S)


def test_host_limiter_validates() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        HostLimiter(0, 0)
    with pytest.raises(ValueError, match="delay"):
        HostLimiter(1, -1)


async def test_host_limiter_spacing_with_a_fake_clock() -> None:
    t = [100.0]
    limiter = HostLimiter(1, 5.0, clock=lambda: t[0])
    async with limiter.slot("Example.COM"):
        assert len(limiter) == 1
    # The delay is pending, so the host is remembered (case-insensitively).
    assert len(limiter) == 1
    t[0] = 106.0
    async with limiter.slot("example.com"):
        pass
    t[0] = 200.0
    async with limiter.slot("other.test"):
        pass
    assert len(limiter) <= 2
    # Independent hosts do not wait for each other.
    limiter2 = HostLimiter(1, 0.0)
    async with asyncio.timeout(1):
        async with limiter2.slot("a"), limiter2.slot("b"):
            pass
    assert len(limiter2) == 0
