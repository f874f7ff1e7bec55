"""Clocks, publication schedules and the ground-truth publication log of the feed farm.

A *trace time* is a float in trace units (a minute by default).  The farm maps
trace time onto the wall clock (``seconds_per_trace_unit``, e.g. 1 trace minute
= 50 ms) and onto calendar dates (``epoch`` + trace time x ``trace_unit``).
"""

from __future__ import annotations

import csv
import heapq
import json
import math
import random
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import IO, Protocol


class Clock(Protocol):
    """A monotonic clock in seconds.  The farm reads it, never sets it."""

    def now(self) -> float: ...


class MonotonicClock:
    """The real clock: ``time.monotonic``."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when a test moves it."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {seconds})")
        self._now += seconds

    def set(self, now: float) -> None:
        if now < self._now:
            raise ValueError(f"a clock cannot go backwards (from {self._now} to {now})")
        self._now = now


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One scheduled publication: feed ``feed_id`` publishes at ``trace_time``."""

    trace_time: float
    feed_id: str


def poisson_schedule(
    feed_ids: Sequence[str],
    rate: float | Sequence[float] | Mapping[str, float],
    *,
    seed: int,
    horizon: float | None = None,
) -> Iterator[TraceEvent]:
    """Independent Poisson publication processes, one per feed, merged in time order.

    ``rate`` is publications per trace unit: one rate for all feeds, one per
    feed (same order as ``feed_ids``), or a mapping (missing feeds never
    publish).  The stream is infinite unless ``horizon`` is given; the same
    seed gives the same stream.  It does not model diurnal cycles or bursts.
    """
    if isinstance(rate, Mapping):
        unknown = set(rate) - set(feed_ids)
        if unknown:
            raise ValueError(f"poisson rates name unknown feeds: {sorted(unknown)[:5]}")
        rates = [float(rate.get(f, 0.0)) for f in feed_ids]
    elif isinstance(rate, int | float):
        rates = [float(rate)] * len(feed_ids)
    else:
        rates = [float(r) for r in rate]
        if len(rates) != len(feed_ids):
            raise ValueError(f"got {len(rates)} poisson rates for {len(feed_ids)} feeds")
    if any(r < 0 or math.isnan(r) for r in rates):
        raise ValueError("poisson rates must be non-negative numbers")
    rng = random.Random(seed)
    heap = [(rng.expovariate(r), i) for i, r in enumerate(rates) if r > 0]
    heapq.heapify(heap)
    while heap:
        t, i = heap[0]
        if horizon is not None and t >= horizon:
            return
        yield TraceEvent(t, feed_ids[i])
        heapq.heapreplace(heap, (t + rng.expovariate(rates[i]), i))


@dataclass(frozen=True, slots=True)
class CsvTrace:
    """A trace read from a ``feed_id,timestamp`` CSV, sorted by time."""

    events: tuple[TraceEvent, ...]
    feed_ids: tuple[str, ...]
    """Every feed named by a kept row, in order of first appearance."""
    skipped: int
    """Rows dropped as placeholders or unparsable (see ``load_csv_trace``)."""
    start: datetime | None
    """The calendar time of trace time 0 for ISO timestamps; ``None`` for numeric ones."""


_MIN_PLAUSIBLE = datetime(1995, 1, 1, tzinfo=UTC)
_FAR_FUTURE = datetime(3000, 1, 1, tzinfo=UTC)  # 9999-12-31 and the like: junk, not a publication to come
# A zone written after an ISO time as a letter or a name: "…Z", "2025-03-01 12:00:00 UTC".
_UTC_SUFFIX = re.compile(r"\s*(?:Z|UTC|GMT)$", re.IGNORECASE)
# The year of an RFC 822 date, the number after the day and month: email.utils reads every
# year below 100 as 19xx or 20xx, right for "21" but wrong for the placeholder "0001".
_RFC822_YEAR = re.compile(r"\b\d{1,2}\s+[A-Za-z]+\.?\s+(\d+)\b")


def trace_intervals(
    events: Sequence[TraceEvent], feed_ids: Sequence[str], seconds_per_trace_unit: float, *,
    sigma: float = 0.0, seed: int = 0, horizon: float | None = None,
) -> dict[str, float]:
    """Wall seconds between updates each feed would state of itself: its mean over the trace, noisy.

    For ``FeedFarm(hints=...)`` (issue 45's publisher hints): the span is trace time 0 to
    ``horizon`` (default: the last event), a feed's interval the span over its events in it
    (half an event for a feed without any), times ``exp(sigma · N(0, 1))`` drawn per feed in
    ``feed_ids``' order from ``seed``: a publisher's round "hourly" is not its true pace. Honest
    about the trace's rates and nothing more; no real trace states hints.
    """
    if not (sigma >= 0 and math.isfinite(sigma)) or seconds_per_trace_unit <= 0:
        raise ValueError(f"need sigma >= 0 and seconds_per_trace_unit > 0, got {sigma}, {seconds_per_trace_unit}")
    span = horizon if horizon is not None else max((e.trace_time for e in events), default=0.0)
    if not span > 0:
        raise ValueError("hints need a trace that spans some time")
    counts = dict.fromkeys(feed_ids, 0)
    for e in events:
        if e.trace_time <= span and e.feed_id in counts:
            counts[e.feed_id] += 1
    draw = random.Random(seed)
    return {f: span * seconds_per_trace_unit / max(n, 0.5) * math.exp(sigma * draw.gauss(0.0, 1.0))
            for f, n in counts.items()}


def load_csv_trace(
    path: str | Path,
    *,
    trace_unit: timedelta = timedelta(minutes=1),
    start: datetime | None = None,
    until: datetime | None = None,
) -> CsvTrace:
    """Read a ``feed_id,timestamp`` CSV (a header row is optional).

    Timestamps are either numbers (already trace time) or dates, ISO 8601 or
    RFC 822 as RSS writes them; a file must not mix numbers and dates.  Dates
    become trace time ``(ts - start) / trace_unit``, ``start`` defaulting to
    the earliest kept date.  Placeholder dates (before 1995, e.g.
    ``0001-01-01``, in RFC 822 form too), dates from the year 3000 on, dates
    before ``start`` or after ``until``, and unparsable rows are skipped and
    counted, not fixed: real traces carry such rows (shared/traces/README.md).
    """
    rows: list[tuple[str, str]] = []
    with open(path, newline="", encoding="utf-8") as fh:
        for lineno, row in enumerate(csv.reader(fh), start=1):
            if not row or not "".join(row).strip():
                continue
            if len(row) < 2:
                raise ValueError(f"{path}:{lineno}: expected 'feed_id,timestamp', got {row!r}")
            rows.append((row[0].strip(), row[1].strip()))
    if rows and rows[0][0].lower() in {"feed_id", "feed", "id"}:
        rows = rows[1:]
    skipped = 0
    numeric: list[tuple[float, str]] = []
    dated: list[tuple[datetime, str]] = []
    for feed_id, stamp in rows:
        try:
            numeric.append((float(stamp), feed_id))
            continue
        except ValueError:
            pass
        try:
            when = datetime.fromisoformat(_UTC_SUFFIX.sub("+00:00", stamp))
        except ValueError:
            try:  # as RSS writes dates (RFC 822): "Wed, 18 Feb 2026 01:41:13 GMT"
                when = parsedate_to_datetime(stamp)
            except (TypeError, ValueError, IndexError):
                skipped += 1
                continue
            year = _RFC822_YEAR.search(stamp)
            if year is not None and len(year[1]) > 2 and int(year[1]) < 100:
                skipped += 1  # "Mon, 01 Jan 0001": a placeholder, not 2001
                continue
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
        if not _MIN_PLAUSIBLE <= when < _FAR_FUTURE or (until is not None and when > until):
            skipped += 1
            continue
        dated.append((when, feed_id))
    if numeric and dated:
        raise ValueError(f"{path}: mixes numeric timestamps and dates; use one kind")
    events: list[TraceEvent]
    if dated:
        origin = start or min(w for w, _ in dated)
        kept = [(w, f) for w, f in dated if w >= origin]
        skipped += len(dated) - len(kept)
        unit = trace_unit.total_seconds()
        events = [TraceEvent((w - origin).total_seconds() / unit, f) for w, f in kept]
    else:
        origin = None
        events = [TraceEvent(t, f) for t, f in numeric if math.isfinite(t)]
        skipped += len(numeric) - len(events)
    events.sort(key=lambda e: e.trace_time)
    feed_ids = tuple(dict.fromkeys(e.feed_id for e in events))
    return CsvTrace(tuple(events), feed_ids, skipped, origin)


@dataclass(frozen=True, slots=True)
class Publication:
    """Ground truth: feed ``feed_id`` published ``entry_id`` at ``trace_time``.

    ``clock_time`` is the farm clock's reading (``time.monotonic`` for the real
    clock, comparable across processes on one Linux host), ``wall_time`` the
    Unix time, ``published`` the entry's calendar date as the documents show it.
    """

    feed_id: str
    entry_id: str
    trace_time: float
    clock_time: float
    wall_time: float
    published: datetime


_FIELDS = ("feed_id", "entry_id", "trace_time", "clock_time", "wall_time", "published")


class PublicationLog:
    """Appends publications to a JSONL (``.jsonl``) or CSV (anything else) file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._jsonl = self.path.suffix == ".jsonl"
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._fh: IO[str] = open(self.path, "a", newline="", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._csv = csv.writer(self._fh)
        if fresh and not self._jsonl:
            self._csv.writerow(_FIELDS)

    def write(self, pub: Publication) -> None:
        if self._jsonl:
            row = asdict(pub)
            row["published"] = pub.published.isoformat()
            self._fh.write(json.dumps(row) + "\n")
        else:
            self._csv.writerow(
                (
                    pub.feed_id,
                    pub.entry_id,
                    repr(pub.trace_time),
                    repr(pub.clock_time),
                    repr(pub.wall_time),
                    pub.published.isoformat(),
                )
            )

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def load_publications(path: str | Path) -> list[Publication]:
    """Read a publication log written by the farm (JSONL or CSV, by suffix)."""
    path = Path(path)
    out: list[Publication] = []
    with open(path, newline="", encoding="utf-8") as fh:
        rows: Iterable[Mapping[str, str]]
        rows = (
            (json.loads(line) for line in fh if line.strip())
            if path.suffix == ".jsonl"
            else csv.DictReader(fh)
        )
        for lineno, row in enumerate(rows, start=1):
            try:
                out.append(
                    Publication(
                        str(row["feed_id"]),
                        str(row["entry_id"]),
                        float(row["trace_time"]),
                        float(row["clock_time"]),
                        float(row["wall_time"]),
                        datetime.fromisoformat(str(row["published"])),
                    )
                )
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{path}: bad publication record {lineno}: {exc}") from exc
    return out
