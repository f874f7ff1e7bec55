"""The feed farm: a local HTTP server of thousands of RSS/Atom feeds for tests and benchmarks.

Every test and benchmark polls the farm instead of the internet::

    async with FeedFarm(feeds=100, window=20, clock=ManualClock()) as farm:
        entry_id = farm.publish("7", title="Oil prices rise")
        await client.get(farm.url("7"))     # RSS 2.0 with the new entry first
        farm.set_fault("8", "rate_limited", retry_after=30)

Feeds are served at ``/feeds/{id}.xml`` (RSS 2.0) and ``/feeds/{id}.atom``
(Atom); ``farm.url(id)`` names the feed's own format.  Each feed shows its last
``window`` entries with a strong ETag and a Last-Modified date, answers 304 to
a matching ``If-None-Match`` / ``If-Modified-Since``, and sends gzip to clients
that accept it.  Documents are rendered (and compressed) once per feed version.

Entries are published by ``publish()`` or by a schedule (``poisson_schedule``,
``load_csv_trace``) played on an accelerated clock: trace time advances one
unit every ``seconds_per_trace_unit`` seconds of the farm's clock.  The
schedule is played by a background task with the real clock and, with any
clock, whenever a request arrives or ``pump()`` is called, so a test with a
``ManualClock`` moves the clock and then sees exactly the due entries.  Every
publication is appended to ``farm.publications`` and to the optional log file,
and optionally pinged (``ping=``).

As a WebSub publisher (``hub=``, W3C WebSub §4, §6), a ``push_share`` of the feeds
(drawn with ``push_seed``) advertise the hub and their own URL, in the document and
in a ``Link`` header, and each publication of theirs POSTs
``hub.mode=publish&hub.url=<topic>`` (also as ``hub.topic``, which some hubs read) to
the hub (``hub_delay`` seconds after the publication). The publish request is not in the
Recommendation (§6 leaves it to the hub); this is the PubSubHubbub 0.3 form most hubs accept.

The farm deliberately does not: model network latency, serve TLS, honour
``q=0`` in Accept-Encoding, or persist feed state across restarts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from proxy.farm._control import control_handler
from proxy.farm._docs import (
    Entry,
    FeedFormat,
    Rendered,
    default_entry_text,
    entry_id_for,
    format_of,
    render_atom,
    render_rss,
)
from proxy.farm._faults import Fault, FaultMode
from proxy.farm._http import HttpServer, Response, text_response
from proxy.farm._ping import PingDelay, Pinger, PingRecord, PingRequest, PingResolver
from proxy.farm._requests import RequestLog
from proxy.farm._responses import feed_response, not_modified_since
from proxy.farm._stats import FeedNotFoundError, FeedStats
from proxy.farm._trace import (
    Clock,
    MonotonicClock,
    Publication,
    PublicationLog,
    TraceEvent,
)

if TYPE_CHECKING:
    from proxy.farm._http import Request, Result

DEFAULT_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""The calendar date of trace time 0 unless ``epoch=`` says otherwise."""


EntryText = Callable[[str, int], tuple[str, str]]
"""``(feed_id, seq) -> (title, summary)`` for entries published by a schedule."""


class _Feed:
    """Mutable state of one feed."""

    __slots__ = (
        "cache",
        "conditional",
        "entries",
        "fault",
        "fault_left",
        "feed_id",
        "fmt",
        "last_modified",
        "requests",
        "responses",
        "seq",
        "statuses",
    )

    def __init__(self, feed_id: str, fmt: FeedFormat, window: int, last_modified: datetime) -> None:
        self.feed_id = feed_id
        self.fmt = fmt
        self.entries: deque[Entry] = deque(maxlen=window)
        self.seq = 0
        self.last_modified = last_modified
        self.cache: dict[FeedFormat, Rendered] = {}
        # (format, gzip, 304?) -> the response, built once per feed version.
        self.responses: dict[tuple[FeedFormat, bool, bool], Response] = {}
        self.fault: Fault | None = None
        self.fault_left: int | None = None
        self.requests = 0
        self.conditional = 0
        self.statuses: Counter[int] = Counter()


class FeedFarm:
    """A local HTTP server of synthetic feeds; an async context manager.

    ``feeds`` is a count (ids ``"0" .. "n-1"``, like the simulator's resources)
    or the feed ids themselves (letters, digits, ``_`` and ``-``).  ``formats``
    is ``"rss"``, ``"atom"``, ``"mixed"`` (even positions RSS, odd Atom) or a
    mapping from feed id to format.  ``prefill`` entries per feed exist before
    the run (dated before ``epoch``) and are not publications.  ``also_hosts``
    are more addresses served on the same port (e.g. ``127.0.0.2``): every
    feed is reachable under each, as under several host names. ``hints``: seconds
    between updates an RSS feed states in the syndication module (issue 45's
    publisher hints; a benchmark derives them from the trace it plays, and no real
    trace has them), by feed id; the others state none.
    """

    def __init__(
        self,
        feeds: int | Iterable[str] = 100,
        *,
        window: int = 20,
        prefill: int = 0,
        formats: str | FeedFormat | Mapping[str, FeedFormat | str] = FeedFormat.RSS,
        clock: Clock | None = None,
        seconds_per_trace_unit: float = 0.05,
        trace_unit: timedelta = timedelta(minutes=1),
        epoch: datetime = DEFAULT_EPOCH,
        schedule: Iterable[TraceEvent] | None = None,
        drive: bool | None = None,
        entry_text: EntryText | None = None,
        log_path: str | Path | None = None,
        request_log: str | Path | bool = False,
        ping: str | PingResolver | None = None,
        ping_drop_rate: float = 0.0,
        ping_delay: PingDelay = 0.0,
        ping_delay_rate: float = 1.0,
        ping_seed: int | None = None,
        hub: str | None = None,
        push_share: float = 1.0,
        push_seed: int | None = None,
        hub_delay: float = 0.0,
        hints: Mapping[str, float] | None = None,
        host: str = "127.0.0.1",
        also_hosts: Sequence[str] = (),
        port: int = 0,
    ) -> None:
        ids = [str(i) for i in range(feeds)] if isinstance(feeds, int) else list(feeds)
        if not ids:
            raise ValueError("a feed farm needs at least one feed")
        bad = [f for f in ids if not f or not f.replace("-", "").replace("_", "").isalnum()]
        if bad:
            raise ValueError(f"feed ids may hold only letters, digits, '_' and '-': {bad[:5]}")
        if len(set(ids)) != len(ids):
            raise ValueError("feed ids must be unique")
        if window < 1 or prefill < 0:
            raise ValueError(f"window must be >= 1 and prefill >= 0 (got {window}, {prefill})")
        if seconds_per_trace_unit <= 0 or trace_unit <= timedelta(0):
            raise ValueError("seconds_per_trace_unit and trace_unit must be positive")
        if epoch.tzinfo is None:
            raise ValueError("epoch must be timezone-aware (UTC)")
        self.window = window
        self.clock: Clock = clock or MonotonicClock()
        self.seconds_per_trace_unit = seconds_per_trace_unit
        self.trace_unit = trace_unit
        self.epoch = epoch
        self.host = host
        self.also_hosts = tuple(also_hosts)
        self._port = port
        self._entry_text = entry_text or default_entry_text
        self._feeds: dict[str, _Feed] = {}
        for i, feed_id in enumerate(ids):
            fmt = format_of(formats, feed_id, i)
            self._feeds[feed_id] = _Feed(feed_id, fmt, window, epoch - trace_unit * (prefill + 1))
        for feed in self._feeds.values():
            for k in range(prefill):
                self._add_entry(feed, None, None, epoch - trace_unit * (prefill - k))
        self._schedule = self._checked(schedule) if schedule is not None else None
        self._next_event: TraceEvent | None = None
        self._advance_schedule()
        self._drive = isinstance(self.clock, MonotonicClock) if drive is None else drive
        self._t0 = self.clock.now()
        self._log_path = Path(log_path) if log_path is not None else None
        self._log: PublicationLog | None = None
        # issue 47: every request, for scoring any poller from the farm's side (True: memory only).
        self.request_log: RequestLog | None = (
            None if request_log is False else RequestLog(None if request_log is True else request_log))
        self._ping = ping
        self._ping_targets: dict[str, PingRequest] = {}
        self._pinger = Pinger(
            self._resolve_ping,
            drop_rate=ping_drop_rate,
            delay=ping_delay,
            delay_rate=ping_delay_rate,
            seed=ping_seed,
        )
        if not 0.0 <= push_share <= 1.0:
            raise ValueError(f"push_share must be in [0, 1], got {push_share}")
        self.hub = hub
        # Issue 45: seconds between updates each RSS feed states (the syndication module); none by default.
        self._hints = dict(hints or {})
        if any(not (s > 0 and math.isfinite(s)) for s in self._hints.values()):
            raise ValueError("hints must be finite numbers of seconds > 0")
        # A seeded draw, in feed order: the same seed and share push the same feeds.
        draw = random.Random(push_seed)
        self._push_feeds = frozenset(
            f for f in ids if hub is not None and draw.random() < push_share)
        # ``hub_delay``: seconds each publish request waits, as pings do (the live bench lands
        # both just after the service's tick of the update's chronon).
        self._hub_pinger = Pinger(self._resolve_publish, delay=hub_delay)
        self.publications: list[Publication] = []
        self._pumping = False
        self._base_url: str | None = None
        self._http: HttpServer | None = None
        self._control = control_handler(self)
        self._closing = asyncio.Event()
        self._driver: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ setup

    def _checked(self, events: Iterable[TraceEvent]) -> Iterator[TraceEvent]:
        """Check a schedule: a sequence at once, any other iterable as it is consumed."""
        if isinstance(events, Sequence):
            for _ in self._check_lazily(events):
                pass
            return iter(events)
        return self._check_lazily(events)

    def _check_lazily(self, events: Iterable[TraceEvent]) -> Iterator[TraceEvent]:
        last = float("-inf")
        for event in events:
            if event.trace_time < last:
                raise ValueError(f"schedule goes back in time: {event} after trace time {last}")
            if event.feed_id not in self._feeds:
                raise ValueError(
                    f"the schedule names feed {event.feed_id!r}, which the farm does not have"
                )
            last = event.trace_time
            yield event

    def _advance_schedule(self) -> None:
        self._next_event = next(self._schedule, None) if self._schedule is not None else None

    async def __aenter__(self) -> FeedFarm:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Bind the server (``port=0`` picks a free port) and start trace time at 0."""
        if self._http is not None:
            raise RuntimeError("the feed farm is already running")
        # No access log: it would cost more than serving a cached feed.
        http = HttpServer(self._route if self.request_log is None else self.request_log.wrap(self._route))
        self._port = await http.start((self.host, *self.also_hosts), self._port)
        self._http = http
        host = f"[{self.host}]" if ":" in self.host else self.host  # RFC 3986: IPv6 in brackets
        self._base_url = f"http://{host}:{self._port}"
        await self._pinger.start()
        if self.hub is not None:
            await self._hub_pinger.start()
        self._t0 = self.clock.now()
        self._closing.clear()
        if self._drive and self._next_event is not None:
            self._driver = asyncio.get_running_loop().create_task(self._run_schedule())

    async def close(self) -> None:
        """Stop serving: pending timeouts and drips end, unsent pings are cancelled.

        Re-raises an error of the schedule driver (e.g. a lazy schedule that
        went back in time) after everything is shut down.
        """
        self._closing.set()
        driver, self._driver = self._driver, None
        try:
            if driver is not None:
                await driver
        finally:
            if self._http is not None:
                await self._http.close()
                self._http = None
            await self._pinger.close()
            await self._hub_pinger.close()
            if self._log is not None:
                self._log.close()
                self._log = None
            if self.request_log is not None:
                self.request_log.close()

    async def _run_schedule(self) -> None:
        while not self._closing.is_set():
            self.pump()
            event = self._next_event
            if event is None:
                return
            due = self._t0 + event.trace_time * self.seconds_per_trace_unit
            # Sleep at most a second so that a slow clock or a change of the
            # schedule cannot strand the driver.
            await self.sleep_unless_closing(min(max(due - self.clock.now(), 0.0), 1.0))

    async def sleep_unless_closing(self, seconds: float) -> bool:
        """Sleep, waking early when the farm closes; True if it is closing."""
        try:
            await asyncio.wait_for(self._closing.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True

    # -------------------------------------------------------------- public API

    @property
    def port(self) -> int:
        if self._base_url is None:
            raise RuntimeError("the feed farm is not running; use 'async with FeedFarm(...)'")
        return self._port

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("the feed farm is not running; use 'async with FeedFarm(...)'")
        return self._base_url

    @property
    def feed_ids(self) -> list[str]:
        return list(self._feeds)

    def url(self, feed_id: str, fmt: FeedFormat | str | None = None) -> str:
        """The absolute URL of a feed, in its own format unless ``fmt`` says otherwise."""
        feed = self._feed(feed_id)
        suffix = FeedFormat(fmt).suffix if fmt is not None else feed.fmt.suffix
        return f"{self.base_url}/feeds/{feed_id}{suffix}"

    def format_of(self, feed_id: str) -> FeedFormat:
        return self._feed(feed_id).fmt

    def entries(self, feed_id: str) -> list[Entry]:
        """The entries a GET would show now, newest first."""
        return list(self._feed(feed_id).entries)

    def trace_now(self) -> float:
        """Current trace time: farm clock seconds since start / seconds_per_trace_unit."""
        return (self.clock.now() - self._t0) / self.seconds_per_trace_unit

    def trace_date(self, trace_time: float) -> datetime:
        """The calendar date that documents show for a trace time."""
        return self.epoch + self.trace_unit * trace_time

    def publish(
        self,
        feed_id: str,
        *,
        title: str | None = None,
        summary: str | None = None,
        published: datetime | None = None,
        trace_time: float | None = None,
    ) -> str:
        """Publish one entry now; the next GET shows it first.  Returns its entry id.

        ``trace_time`` defaults to now; ``published`` (the document date)
        defaults to that trace time on the calendar.  Must be called on the
        farm's event loop thread (it may schedule a ping).
        """
        feed = self._feed(feed_id)
        tt = self.trace_now() if trace_time is None else trace_time
        date = published if published is not None else self.trace_date(tt)
        if date.tzinfo is None:
            raise ValueError("published must be timezone-aware")
        entry = self._add_entry(feed, title, summary, date)
        pub = Publication(feed_id, entry.entry_id, tt, self.clock.now(), time.time(), date)
        self.publications.append(pub)
        if self._log_path is not None:
            if self._log is None:
                self._log = PublicationLog(self._log_path)
            self._log.write(pub)
            if not self._pumping:  # pump() flushes once per batch
                self._log.flush()
        if self._base_url is not None and (self._ping is not None or self._ping_targets):
            self._pinger.submit(pub, self.url(feed_id))
        if self._base_url is not None and feed_id in self._push_feeds:
            self._hub_pinger.submit(pub, self.url(feed_id))
        return entry.entry_id

    def edit(
        self,
        feed_id: str,
        entry_id: str,
        *,
        title: str | None = None,
        summary: str | None = None,
        published: datetime | None = None,
    ) -> None:
        """Edit an entry in place, as publishers do (a typo fixed, a date corrected): same
        id and place in the document, a new document version.  Not a publication."""
        feed = self._feed(feed_id)
        for i, entry in enumerate(feed.entries):
            if entry.entry_id == entry_id:
                if published is not None and published.tzinfo is None:
                    raise ValueError("published must be timezone-aware")
                feed.entries[i] = dataclasses.replace(
                    entry,
                    title=entry.title if title is None else title,
                    summary=entry.summary if summary is None else summary,
                    published=entry.published if published is None else published,
                )
                self._new_version(feed)
                return
        raise KeyError(f"feed {feed_id!r} shows no entry {entry_id!r}")

    def reverse(self, feed_id: str) -> None:
        """Serve the feed's entries in the opposite order (oldest first), as some feeds do
        after a template change.  A new document version; no entry is added."""
        feed = self._feed(feed_id)
        feed.entries = deque(reversed(feed.entries), maxlen=feed.entries.maxlen)
        self._new_version(feed)

    def _new_version(self, feed: _Feed) -> None:
        feed.cache.clear()
        feed.responses.clear()
        feed.last_modified = feed.last_modified + timedelta(seconds=1)

    def backfill(self, feed_id: str, dates: Iterable[datetime]) -> int:
        """Add entries that existed before the run, with these document dates; returns how many.

        A real feed's first fetch shows its last ``window`` entries with their
        dates, which is the history a reader (or the proxy's update models)
        learns from. Like ``prefill``, these are not publications: they are
        neither logged nor pinged. Call before the feed's first fetch; a later
        call would show them as new entries. Dates must be timezone-aware; they
        are added oldest first, so the newest ``window`` of them remain.
        """
        feed = self._feed(feed_id)
        given = list(dates)
        if any(d.tzinfo is None for d in given):
            raise ValueError("backfill dates must be timezone-aware")
        for date in sorted(given):
            self._add_entry(feed, None, None, date)
        return len(given)

    def pump(self) -> list[Publication]:
        """Publish every scheduled entry whose trace time has come; return them."""
        event = self._next_event
        if event is None:
            return []
        now = self.trace_now()
        start = len(self.publications)
        self._pumping = True
        try:
            while event is not None and event.trace_time <= now:
                self.publish(event.feed_id, trace_time=event.trace_time)
                self._advance_schedule()
                event = self._next_event
        finally:
            self._pumping = False
            if self._log is not None:
                self._log.flush()
        return self.publications[start:]

    @property
    def schedule_done(self) -> bool:
        """True when the schedule (if any) has no more events."""
        return self._next_event is None

    def set_fault(
        self, feed_id: str, mode: FaultMode | str | None, *, times: int | None = None, **params: Any
    ) -> None:
        """Make a feed misbehave (``None`` restores it); ``times`` limits the fault to N requests.

        See ``FaultMode`` and ``FAULT_PARAMS`` for the modes and their parameters.
        """
        feed = self._feed(feed_id)
        if mode is None:
            feed.fault, feed.fault_left = None, None
            return
        if times is not None and times < 1:
            raise ValueError(f"times must be >= 1, got {times}")
        fault = Fault.build(mode, params)
        target = fault.params.get("to")
        if target is not None:
            self._feed(str(target))
        feed.fault, feed.fault_left = fault, times

    def clear_fault(self, feed_id: str) -> None:
        self.set_fault(feed_id, None)

    def fault_of(self, feed_id: str) -> Fault | None:
        return self._feed(feed_id).fault

    def stats(self, feed_id: str | None = None) -> FeedStats:
        """Request counts of one feed, or summed over the farm."""
        feeds = [self._feed(feed_id)] if feed_id is not None else list(self._feeds.values())
        statuses: Counter[int] = Counter()
        for f in feeds:
            statuses.update(f.statuses)
        return FeedStats(
            sum(f.requests for f in feeds), dict(statuses), sum(f.conditional for f in feeds)
        )

    def reset_stats(self) -> None:
        for f in self._feeds.values():
            f.requests, f.conditional = 0, 0
            f.statuses.clear()

    def set_ping_target(
        self, feed_id: str, url: str | None, headers: Mapping[str, str] | None = None
    ) -> None:
        """Ping ``url`` (with ``headers``) for this feed's publications; ``None`` removes it.

        A per-feed target wins over ``ping=``: the service's ping route names
        its own feed id and needs that feed's token, known only after the
        service registered the feed.  The body is the default JSON object.
        """
        self._feed(feed_id)
        if url is None:
            self._ping_targets.pop(feed_id, None)
        else:
            self._ping_targets[feed_id] = PingRequest(url, dict(headers or {}))

    def _resolve_ping(self, pub: Publication, feed_url: str) -> PingRequest | None:
        target = self._ping_targets.get(pub.feed_id)
        if target is not None or self._ping is None:
            return target
        if callable(self._ping):
            return self._ping(pub, feed_url)
        url = self._ping.format(feed_id=pub.feed_id, feed_url=feed_url, entry_id=pub.entry_id)
        return PingRequest(url)

    def pushes(self, feed_id: str) -> bool:
        """Whether the feed advertises the hub and publishes to it (``hub=``, ``push_share``)."""
        return feed_id in self._push_feeds

    @property
    def push_feeds(self) -> list[str]:
        """The feeds that advertise the hub, in feed order."""
        return [f for f in self._feeds if f in self._push_feeds]

    @property
    def hub_publishes(self) -> list[PingRecord]:
        """What became of each publish request to the hub (empty without ``hub=``)."""
        return self._hub_pinger.records

    async def drain_hub(self, at_most: float = 10.0) -> None:
        """Wait (at most ``at_most`` seconds) until the publish requests so far were sent or failed."""
        await self._hub_pinger.drain(at_most)

    def _resolve_publish(self, pub: Publication, feed_url: str) -> PingRequest | None:
        if self.hub is None:
            return None
        body = urlencode({"hub.mode": "publish", "hub.url": feed_url, "hub.topic": feed_url})
        return PingRequest(
            self.hub, {"Content-Type": "application/x-www-form-urlencoded"}, body.encode())

    @property
    def pings(self) -> list[PingRecord]:
        """What became of each publication's ping (empty when no ping is configured)."""
        return self._pinger.records

    async def drain_pings(self, at_most: float = 10.0) -> None:
        """Wait (at most ``at_most`` seconds) until the pings scheduled so far were sent or failed."""
        await self._pinger.drain(at_most)

    # ---------------------------------------------------------------- internals

    def _feed(self, feed_id: str) -> _Feed:
        try:
            return self._feeds[feed_id]
        except KeyError:
            raise FeedNotFoundError(feed_id) from None

    def _add_entry(
        self, feed: _Feed, title: str | None, summary: str | None, date: datetime
    ) -> Entry:
        feed.seq += 1
        seq = feed.seq
        if title is None or summary is None:
            d_title, d_summary = self._entry_text(feed.feed_id, seq)
            title = d_title if title is None else title
            summary = d_summary if summary is None else summary
        entry = Entry(
            entry_id_for(feed.feed_id, seq),
            feed.feed_id,
            seq,
            title,
            summary,
            date,
            f"/entries/{feed.feed_id}/{seq}",
        )
        feed.entries.appendleft(entry)
        feed.cache.clear()
        feed.responses.clear()
        # HTTP dates have whole seconds: each version gets a strictly later
        # Last-Modified, or If-Modified-Since would hide a same-second change.
        date_s = date.replace(microsecond=0)
        feed.last_modified = max(date_s, feed.last_modified + timedelta(seconds=1))
        return entry

    def _rendered(self, feed: _Feed, fmt: FeedFormat) -> Rendered:
        cached = feed.cache.get(fmt)
        if cached is None:
            hub = self.hub if feed.feed_id in self._push_feeds else None
            if fmt is FeedFormat.RSS:
                body = render_rss(feed.feed_id, self.base_url, feed.entries, feed.last_modified, hub,
                                  self._hints.get(feed.feed_id))
            else:
                body = render_atom(feed.feed_id, self.base_url, feed.entries, feed.last_modified, hub)
            cached = feed.cache[fmt] = Rendered.build(body, feed.last_modified, fmt)
        return cached

    def _route(self, request: Request) -> Result | Awaitable[Result]:
        """Dispatch by path: feeds, redirect loops, entry pages, the control API."""
        path = request.path
        if path.startswith("/_farm/"):
            return self._control(request)
        parts = path.split("/")
        if request.method not in ("GET", "HEAD"):
            known = len(parts) in (3, 4) and parts[1] in ("feeds", "loop", "entries")
            return text_response(405 if known else 404, "method not allowed\n" if known else "not found\n")
        if len(parts) == 3 and parts[1] == "feeds":
            return self._handle_feed(request, parts[2])
        if len(parts) == 4 and parts[1] == "loop":
            return self._handle_loop(parts[2], parts[3])
        if len(parts) == 4 and parts[1] == "entries":
            return self._handle_entry(parts[2], parts[3])
        return text_response(404, "not found\n")

    def _handle_feed(self, request: Request, name: str) -> Result | Awaitable[Result]:
        feed_id, _, ext = name.rpartition(".")
        feed = self._feeds.get(feed_id)
        if feed is None or ext not in ("xml", "atom"):
            return text_response(404, "no such feed\n")
        if self._next_event is not None:
            self.pump()
        fmt = FeedFormat.RSS if ext == "xml" else FeedFormat.ATOM
        feed.requests += 1
        headers = request.headers
        inm = headers.get("if-none-match")
        ims = headers.get("if-modified-since")
        if inm is not None or ims is not None:
            feed.conditional += 1
        if feed.fault is not None:
            return self._serve_fault(feed, fmt)
        rendered = self._rendered(feed, fmt)
        if inm is not None:
            # RFC 9110 §13.1.2: weak comparison; either encoding's tag matches.
            tags = {t.strip().removeprefix("W/") for t in inm.split(",")}
            fresh = "*" in tags or rendered.etag in tags or rendered.etag_gzip in tags
        elif ims is not None:
            # RFC 9110 §13.1.3: If-Modified-Since only counts without If-None-Match.
            fresh = not_modified_since(feed.last_modified, ims)
        else:
            fresh = False
        gz = "gzip" in headers.get("accept-encoding", "")
        feed.statuses[304 if fresh else 200] += 1
        key = (fmt, gz, fresh)
        response = feed.responses.get(key)
        if response is None:
            link = None
            if feed_id in self._push_feeds:
                # WebSub §4: the Link header names the hub and the topic (this URL).
                link = f'<{self.hub}>; rel="hub", <{self.url(feed_id, fmt)}>; rel="self"'
            response = feed.responses[key] = feed_response(rendered, gz, fresh, link)
        return response

    def _serve_fault(self, feed: _Feed, fmt: FeedFormat) -> Result | Awaitable[Result]:
        from proxy.farm._serve_faults import serve_fault

        fault = feed.fault
        assert fault is not None
        if feed.fault_left is not None:
            feed.fault_left -= 1
            if feed.fault_left <= 0:
                feed.fault, feed.fault_left = None, None
        return serve_fault(self, feed.feed_id, fmt, fault)

    def count_response(self, feed_id: str, status: int) -> None:
        """Count a response to ``feed_id`` in its statistics (fault serving answers itself)."""
        self._feeds[feed_id].statuses[status] += 1

    def document(self, feed_id: str, fmt: FeedFormat) -> bytes:
        """The feed's current document in ``fmt``, uncompressed, as a GET would show it."""
        return self._rendered(self._feeds[feed_id], fmt).body

    @property
    def closing(self) -> bool:
        """True once the farm has begun to close (streams and waits stop early)."""
        return self._closing.is_set()

    def _handle_loop(self, feed_id: str, hop: str) -> Response:
        feed = self._feeds.get(feed_id)
        if feed is None:
            return text_response(404, "no such feed\n")
        feed.requests += 1
        fault = feed.fault
        status = (
            int(fault.params["status"]) if fault and fault.mode is FaultMode.REDIRECT_LOOP else 302
        )
        location = (
            f"/loop/{feed.feed_id}/2" if hop == "1" else f"/feeds/{feed.feed_id}{feed.fmt.suffix}"
        )
        feed.statuses[status] += 1
        return Response(status, (("Location", self.base_url + location),))

    def _handle_entry(self, feed_id: str, seq: str) -> Response:
        if feed_id not in self._feeds:
            return text_response(404, "no such feed\n")
        return Response(
            200,
            (("Content-Type", "text/html; charset=utf-8"),),
            f"<!DOCTYPE html><title>entry {seq}</title>\n".encode(),
        )
