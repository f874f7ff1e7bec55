"""What a feed's publisher says about how often it changes: RSS ``<ttl>`` and the syndication module.

RSS 2.0's ``<ttl>`` is the minutes a document may be cached; RSS 1.0's
syndication module (``http://purl.org/rss/1.0/modules/syndication/``, usually
prefixed ``sy:``, and used by RSS 2.0 feeds too: WordPress writes it into
every feed) says how often the feed is updated: ``updatePeriod`` (hourly,
daily, weekly, monthly, yearly; daily when absent), ``updateFrequency`` (times
per period; 1 when absent) and ``updateBase`` (a date the schedule counts
from: the phase). :func:`publisher_hints` reads them from a document's bytes,
whichever parser read its entries (as ``parse._ttl`` reads ``<ttl>``).

What the proxy does with them (``docs/discovery.md``, "Publisher hints and
regime shifts"): ``<ttl>`` and ``Cache-Control``/``Expires`` stay what they
were, a time before which the feed is not probed again
(``politeness.cache_not_before``); with ``PROXY_DISCOVERY_PUBLISHER_HINTS``
the stated update interval (:attr:`PublisherHints.update_seconds`) is a prior
on the feed's rate. Does not judge whether the publisher is right: the prior
is worth a few updates, and the feed's own record outweighs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["PERIOD_SECONDS", "PublisherHints", "publisher_hints"]

PERIOD_SECONDS = {"hourly": 3600.0, "daily": 86_400.0, "weekly": 604_800.0, "monthly": 2_629_746.0,
                  "yearly": 31_556_952.0}
"""The syndication module's ``updatePeriod`` values in seconds (a month and a year: Gregorian means)."""

# Any prefix bound to the syndication module; documents nearly always use "sy".
_SY = rb"<(?:[A-Za-z_][-A-Za-z0-9._]*:)?%s>\s*([^<\s][^<]{0,63}?)\s*</(?:[A-Za-z_][-A-Za-z0-9._]*:)?%s>"
_PERIOD = re.compile(_SY % (b"updatePeriod", b"updatePeriod"))
_FREQUENCY = re.compile(_SY % (b"updateFrequency", b"updateFrequency"))
_BASE = re.compile(_SY % (b"updateBase", b"updateBase"))
_TTL = re.compile(rb"<ttl>\s*(\d{1,7})\s*</ttl>")
_SY_NS = b"purl.org/rss/1.0/modules/syndication"


@dataclass(frozen=True, slots=True)
class PublisherHints:
    """A document's own word on its pace: ``<ttl>`` minutes and the syndication module's schedule.

    ``update_seconds``: seconds between updates the syndication module states
    (``updatePeriod / updateFrequency``), ``None`` without it; ``update_base``:
    its ``updateBase`` (UTC), ``None`` when absent or not a date.
    """

    ttl_minutes: int | None = None
    update_seconds: float | None = None
    update_base: datetime | None = None

    def interval(self) -> float | None:
        """Seconds between updates the publisher states: the syndication schedule, else ``<ttl>``, else ``None``.

        A ``<ttl>`` is a cache lifetime, not an update interval; taken only when
        nothing better is said, as the longest the publisher thinks a copy stays
        current.
        """
        if self.update_seconds is not None:
            return self.update_seconds
        if self.ttl_minutes is not None and self.ttl_minutes > 0:
            return self.ttl_minutes * 60.0
        return None


def _iso(text: bytes) -> datetime | None:
    try:
        when = datetime.fromisoformat(text.decode("ascii").strip().replace("Z", "+00:00"))
    except (UnicodeDecodeError, ValueError):
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _near(pattern: re.Pattern[bytes], body: bytes, marker: bytes) -> re.Match[bytes] | None:
    """``pattern.search(body)`` run only around the first ``marker`` (found by ``bytes.find``):
    a regex scan of a whole 20 kB document costs about 30 µs, the find about 1."""
    i = body.find(marker)
    if i < 0:
        return None
    return pattern.search(body, max(i - 48, 0), i + 160)


def publisher_hints(body: bytes) -> PublisherHints | None:
    """The hints ``body`` carries, ``None`` when it carries none (or only unusable ones).

    The syndication elements count only in a document that declares the
    module's namespace (any prefix). An unknown ``updatePeriod`` or a
    frequency that is not a positive integer drops the schedule, not the
    ``<ttl>``: a reader that guessed would prior on a guess.
    """
    m = _near(_TTL, body, b"<ttl>")
    ttl = int(m.group(1)) if m else None
    seconds: float | None = None
    base: datetime | None = None
    if _SY_NS in body:
        period = _near(_PERIOD, body, b"updatePeriod>")
        frequency = _near(_FREQUENCY, body, b"updateFrequency>")
        length = PERIOD_SECONDS.get(period.group(1).decode("ascii", "replace").strip().lower()) if period else 86_400.0
        times: int | None = 1
        if frequency is not None:
            raw = frequency.group(1).strip()
            times = int(raw) if raw.isdigit() and int(raw) > 0 else None
        if (period is not None or frequency is not None) and length is not None and times is not None:
            seconds = length / times
        if (b := _near(_BASE, body, b"updateBase>")) is not None:
            base = _iso(b.group(1))
    if ttl is None and seconds is None and base is None:
        return None
    return PublisherHints(ttl, seconds, base)
