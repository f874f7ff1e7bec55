"""Load real publication traces and map them onto chronons.

Input: a CSV of two columns, ``resource,timestamp``, under a header
(``shared/traces/real_feeds_items.csv`` names them
``feed_id,timestamp_utc_iso``) or none: a first row whose second column reads
as a timestamp is data.  A header that names its columns picks them, in any
order among any others (:func:`header_columns`).  Resource names are mapped
to the ids ``0..n-1`` in sorted order.  Timestamps are ISO 8601 (a trailing
``Z``, ``UTC`` or ``GMT`` is UTC, a naive time is taken as UTC), or as feeds
write them (RFC 822, ``Tue, 02 Jun 2021 09:30:00 GMT``), or Unix epoch
seconds (milliseconds above ``1e11``).

Real feeds hold junk: placeholder dates (``0001-01-01``, in RFC 822 form
too, where the standard library alone would read the year as 2001), dates in
the future of the snapshot (any from the year 3000 on), unparseable strings.
The loader skips those and counts each kind in :class:`TraceStats`, so a
caller can say how many were dropped.  Date-only timestamps (midnight
exactly) are kept but counted, since they are real days with an unknown hour.

Not here: profile or CEI generation (``proxy.sim.generate`` consumes the
per-resource update lists this module returns).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path

# Anything before this is a placeholder, not a publication (RSS dates back to 1999).
DEFAULT_NOT_BEFORE = datetime(1990, 1, 1, tzinfo=UTC)
# Anything from this on is junk in the future (9999-12-31 and the like), whatever ``not_after`` says.
FAR_FUTURE = datetime(3000, 1, 1, tzinfo=UTC)
# A date before anything a feed published: what a placeholder reads as when no exact datetime can say it.
_PLACEHOLDER = datetime.min.replace(tzinfo=UTC)
# A zone written after an ISO time as a letter or a name: "…Z", "2025-03-01 12:00:00 UTC" (BigQuery's CSV export).
_UTC_SUFFIX = re.compile(r"\s*(?:Z|UTC|GMT)$", re.IGNORECASE)
# The year of an RFC 822 date ("Mon, 01 Jan 0001 00:00:00 +0000"): the number after the day and month.
_RFC822_YEAR = re.compile(r"\b\d{1,2}\s+[A-Za-z]+\.?\s+(\d+)\b")


class TraceError(ValueError):
    """The trace file cannot be used; the message names the file, line or window."""


@dataclass(frozen=True, slots=True)
class TraceStats:
    """What the loader kept and why it dropped the rest."""

    rows: int
    kept: int
    unparseable: int
    placeholder: int
    future: int
    outside_window: int
    date_only: int
    window_start: str
    window_end: str

    def summary(self) -> str:
        return (
            f"{self.rows} rows: kept {self.kept} in [{self.window_start}, {self.window_end}); "
            f"skipped {self.placeholder} placeholder, {self.future} future, "
            f"{self.unparseable} unparseable, {self.outside_window} outside the window; "
            f"{self.date_only} of the kept are date-only (midnight)"
        )


@dataclass(frozen=True, slots=True)
class Trace:
    """Per-resource sorted, distinct update chronons plus the resource names."""

    names: tuple[str, ...]
    updates: tuple[tuple[int, ...], ...]
    chronons: int
    stats: TraceStats


def parse_timestamp(text: str) -> datetime | None:
    """An aware UTC datetime, or ``None`` when ``text`` is no timestamp the module docstring names."""
    text = text.strip()
    if not text:
        return None
    iso = _UTC_SUFFIX.sub("+00:00", text)
    ts: datetime | None
    try:
        ts = datetime.fromisoformat(iso)
    except ValueError:
        ts = _epoch(text) or _rfc822(text)
    if ts is None:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    try:
        return ts.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC, a year-9999 date after 9999
        return _PLACEHOLDER if ts.year == 1 else datetime.max.replace(tzinfo=UTC)


def _epoch(text: str) -> datetime | None:
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    if abs(value) >= 1e11:  # milliseconds: 1e11 seconds is the year 5138
        value /= 1000.0
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _rfc822(text: str) -> datetime | None:
    try:
        ts = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    # email.utils reads every year below 100 as 19xx or 20xx: right for "21", wrong
    # for the placeholder "0001", which would otherwise be a plausible 2001.
    year = _RFC822_YEAR.search(text)
    if year is not None and len(year[1]) > 2 and int(year[1]) < 100:
        return _PLACEHOLDER
    return ts


# Header names that say which column is which, exact names first; a name starting with a
# prefix below counts too ("timestamp_utc_iso", "published_at"). Matched without case.
_NAME_COLUMNS = ("feed_id", "feed", "feed_url", "url", "resource", "source", "channel", "id", "name")
_TIME_COLUMNS = ("timestamp", "published", "pubdate", "date", "datetime", "time", "updated", "created")


def _column(header: list[str], names: tuple[str, ...], other: int | None) -> int | None:
    """The position of the first of ``names`` in ``header`` (exactly, then as a prefix), never ``other``."""
    cells = [cell.strip().lower() for cell in header]
    for match in (str.__eq__, str.startswith):
        for name in names:
            for i, cell in enumerate(cells):
                if i != other and match(cell, name):
                    return i
    return None


def header_columns(header: list[str]) -> tuple[int, int]:
    """``(resource, timestamp)`` column positions a header row names; ``(0, 1)`` where it names neither.

    An export with more columns or another order (``title,published,feed_url``)
    is read by its names. Where a header names only one of the two, the other
    is the first of the remaining columns.
    """
    when = _column(header, _TIME_COLUMNS, None)
    name = _column(header, _NAME_COLUMNS, when)
    if when is None and name is None:
        return 0, 1
    if name is None:
        name = 0 if when != 0 else 1
    if when is None:
        when = 1 if name != 1 else 0
    return name, when


def read_rows(path: Path) -> Iterator[tuple[str, datetime | None]]:
    """``(resource, timestamp or None)`` per data row of ``path``; the header is skipped.

    The first row is a header unless its second column reads as a timestamp;
    a header picks the columns by their names (:func:`header_columns`), else
    they are the first two. Blank rows are skipped; a row too short for the
    columns is a :class:`TraceError` naming its line, as is a file that
    cannot be read.
    """
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            first = True
            name, when = 0, 1
            for row in reader:
                if not row or not "".join(row).strip():
                    continue
                if len(row) <= max(name, when):
                    raise TraceError(
                        f"{path}, line {reader.line_num}: expected {max(name, when) + 1} columns"
                        f" ('resource,timestamp' or as the header names them), got {row!r}"
                    )
                ts = parse_timestamp(row[when])
                if first and ts is None:
                    first = False
                    name, when = header_columns(row)
                    continue  # the header
                first = False
                yield row[name].strip(), ts
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc}") from exc
    except (UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{path}: not a UTF-8 CSV: {exc}") from exc


def swapped_hint(path: Path) -> str:
    """For an error on a file without usable timestamps: a hint when its first column holds them instead."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            firsts = [row[0] for row in csv.reader(fh) if row and row[0].strip()]
    except (OSError, UnicodeDecodeError, csv.Error):
        return ""
    dated = sum(parse_timestamp(cell) is not None for cell in firsts)
    if firsts and dated * 2 > len(firsts):
        return ("; its first column holds the timestamps: put the resource first"
                " ('resource,timestamp') or name the columns in a header row")
    return ""


def load_trace(
    path: Path,
    chronons: int,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    days: float = 30.0,
    not_before: datetime = DEFAULT_NOT_BEFORE,
    not_after: datetime | None = None,
) -> Trace:
    """Read ``path`` and map ``[start, end)`` onto chronons ``0..chronons-1``.

    ``end`` defaults to just after the latest valid timestamp and ``start`` to
    ``days`` before ``end``.  ``not_after`` (default: no limit but
    :data:`FAR_FUTURE`) marks later timestamps as future placeholders.  Every resource in the file keeps an
    id, even one with no update in the window.
    """
    if chronons < 1:
        raise TraceError(f"chronons must be >= 1, got {chronons}")
    raw: list[tuple[str, datetime]] = []
    names: set[str] = set()
    rows = unparseable = placeholder = future = date_only = 0
    for name, ts in read_rows(path):
        rows += 1
        names.add(name)
        if ts is None:
            unparseable += 1
        elif ts < not_before:
            placeholder += 1
        elif ts >= FAR_FUTURE or (not_after is not None and ts > not_after):
            future += 1
        else:
            raw.append((name, ts))
    if not rows:
        raise TraceError(f"{path}: no data rows; expected a CSV 'resource,timestamp'")
    if not raw:
        raise TraceError(
            f"{path}: no usable timestamps among {rows} rows ({unparseable} unparseable, {placeholder} before "
            f"{not_before:%Y-%m-%d} (placeholders; a number is Unix epoch seconds), {future} in the future)"
            + (swapped_hint(path) if unparseable == rows else "")
        )
    if end is None:
        end = max(ts for _, ts in raw) + timedelta(seconds=1)
    if start is None:
        start = end - timedelta(days=days)
    if not start < end:
        raise TraceError(f"trace window start {start.isoformat()} is not before end {end.isoformat()}")
    order = sorted(names)
    index = {name: i for i, name in enumerate(order)}
    per: list[set[int]] = [set() for _ in order]
    span = (end - start).total_seconds()
    kept = outside = 0
    for name, ts in raw:
        if not start <= ts < end:
            outside += 1
            continue
        kept += 1
        if ts.hour == ts.minute == ts.second == ts.microsecond == 0:
            date_only += 1
        t = int((ts - start).total_seconds() / span * chronons)
        per[index[name]].add(min(t, chronons - 1))
    stats = TraceStats(
        rows=rows, kept=kept, unparseable=unparseable, placeholder=placeholder, future=future,
        outside_window=outside, date_only=date_only,
        window_start=start.isoformat(), window_end=end.isoformat(),
    )
    return Trace(
        names=tuple(order),
        updates=tuple(tuple(sorted(s)) for s in per),
        chronons=chronons,
        stats=stats,
    )
