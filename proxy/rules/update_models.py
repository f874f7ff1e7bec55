"""Per-feed update models learnt from what feeds say about themselves (issue 18, deliverable 2).

:class:`FeedUpdateModels` learns, for every feed, when it changes:

* from the entry dates of every fetched document (:meth:`~FeedUpdateModels.observe_document`;
  the first one is already a history of the feed's last N entries),
* from probes, which are interval-censored counts: a probe at ``b`` after a
  successful one at ``a`` says "something appeared in (a, b]" or "nothing did"
  (:meth:`~FeedUpdateModels.observe_probe`),
* from pings, exact update times (:meth:`~FeedUpdateModels.observe_ping`).

Each feed gets a homogeneous Poisson rate, an hour-of-day or hour-of-week
profile, or a near-periodic FPN model (paper 002 §4.1), whichever has the
best held-out likelihood, shrunk toward the population of feeds while it has
little data (see :mod:`proxy.rules._update_fits` for the estimators and
``docs/discovery.md`` for the rules and figures).

The unit is the **second** on the caller's clock: floats, POSIX seconds by
default or seconds since ``UpdateModelSettings.origin`` (a POSIX time), so
the model does not depend on the chronon length (:func:`seconds_to_chronon`
converts). Nothing here reads a clock: every "now" is an argument.

What this module deliberately does not do: decide probes (the scheduler
asks :meth:`~FeedUpdateModels.expected_updates` and decides), store
anything (:meth:`~FeedUpdateModels.snapshot` is a JSON-ready dict), or parse
feeds (dates arrive as ``datetime`` or seconds).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np

from proxy.errors import ProxyError
from proxy.rules._update_fits import (
    DAY,
    HOUR,
    MONDAY_POSIX,
    WEEK,
    GammaPrior,
    Observations,
    PeriodicFit,
    PoissonFit,
    SeasonalFit,
    fit_gamma_prior,
    fit_periodic,
    fit_seasonal,
    log_likelihood,
    period_candidates,
    posterior_rate,
    seasonal_level,
)

__all__ = [
    "DatedInput",
    "DocumentSummary",
    "FeedKey",
    "FeedModelEstimate",
    "FeedUpdateModels",
    "GammaPrior",
    "ModelKind",
    "UpdateModelSettings",
    "UpdateModelStateError",
    "chronon_start",
    "posterior_rate",
    "seconds_to_chronon",
]

FeedKey = int | str
DatedInput = datetime | float | int | None
ModelKind = Literal["poisson", "seasonal", "periodic", "prior"]
SNAPSHOT_FORMAT = "proxy.update_models"
SNAPSHOT_VERSION = 1
_POSIX_1995 = 788_918_400.0  # 1995-01-01T00:00Z: no feed entry is older (RSS dates from 1999)
_DEFAULT_PRIOR = GammaPrior(0.5, 0.5 * 6 * HOUR)  # one update per 6 h, weak: half an update's worth


class UpdateModelStateError(ProxyError, ValueError):
    """A snapshot this version cannot restore (unknown format or version, or another clock origin)."""


def seconds_to_chronon(t: float, *, origin: float, chronon_seconds: float) -> int:
    """The chronon holding second ``t`` when chronon 0 starts at second ``origin``."""
    if chronon_seconds <= 0:
        raise ValueError(f"chronon_seconds must be > 0, got {chronon_seconds}")
    return math.floor((t - origin) / chronon_seconds)


def chronon_start(chronon: int, *, origin: float, chronon_seconds: float) -> float:
    """The second at which ``chronon`` starts (inverse of :func:`seconds_to_chronon`)."""
    return origin + chronon * chronon_seconds


@dataclass(frozen=True, slots=True)
class UpdateModelSettings:
    """What the learner assumes and how often it refits; the defaults suit feeds polled every minute or more."""

    origin: float = 0.0  # POSIX seconds of model time 0 (calendar, hour-of-week and day-only checks use it)
    merge_window: float = 60.0  # dates closer than this are one update (a batch, or an edit's duplicate)
    future_tolerance: float = 300.0  # dates up to this far past the fetch are clock skew (clamped), later ones junk
    earliest_plausible: float = _POSIX_1995  # POSIX; older dates are placeholders (0001-01-01, 1970-01-01)
    old_gap_factor: float = 20.0  # the oldest dates of a document, cut off by a gap this many median gaps long …
    old_gap_minimum: float = 30 * DAY  # … and at least this long, are stragglers (pinned posts), not history
    holdout_fraction: float = 0.25  # the newest share of the observations scores the candidates
    min_shape_updates: int = 16  # timed updates needed before seasonal or periodic models are tried
    min_cycles: float = 2.0  # … on a record spanning at least this many of the cycle (day, week, period)
    min_holdout_updates: int = 4
    selection_margin: float = 2.0  # nats a richer model must win by on the held-out part
    seasonal_pseudo_updates: float = 24.0  # weight of the population profile in a feed's profile
    min_jitter: float = 60.0  # seconds; dates have minute resolution at best
    kinds: tuple[str, ...] = ("poisson", "seasonal", "periodic")  # candidates (poisson is always kept)
    refit_growth: float = 0.25  # reselect when the feed's observations grew by this share …
    min_refit_updates: int = 4  # … and by at least this many
    max_updates: int = 2000  # per feed kept; older history is cut at an update (left truncation)
    max_censored: int = 2000
    max_pending_pings: int = 256
    trusted_ping_hits: int = 3  # positive probes explained by a ping before a feed's pings teach on their own …
    trusted_ping_miss_share: float = 0.1  # … while at most this share of positive probes found an unpinged change
    default_prior: GammaPrior = _DEFAULT_PRIOR  # until the population has been fitted
    prior_refresh_every: int = 100_000  # observations between population refits (and whenever they double)

    def __post_init__(self) -> None:
        if not 0 < self.holdout_fraction < 1:
            raise ValueError("holdout_fraction must be in (0, 1)")
        if self.merge_window < 0 or self.future_tolerance < 0 or self.min_jitter <= 0:
            raise ValueError("merge_window, future_tolerance >= 0 and min_jitter > 0 required")
        if self.max_updates < 16 or self.max_censored < 16:
            raise ValueError("max_updates and max_censored must be >= 16")
        if not self.min_cycles > 0:
            raise ValueError("min_cycles must be > 0")


@dataclass(frozen=True, slots=True)
class DocumentSummary:
    """What one observation did with its dates: how many were new updates and how many were junk, by rule."""

    new_updates: int = 0
    known: int = 0  # already recorded (or within merge_window of a recorded update)
    undated: int = 0  # None
    placeholder: int = 0  # before earliest_plausible (0001-01-01 and the like)
    future: int = 0  # later than the fetch by more than future_tolerance
    stragglers: int = 0  # far older than the rest of the document
    day_only: int = 0  # midnight stamps kept for the rate, not for the profile
    backdated: int = 0  # a probe's new entry dated before the previous successful probe


@dataclass(frozen=True, slots=True)
class FeedModelEstimate:
    """One feed's current update model, as the scheduler reads it.

    ``rate_per_hour`` is the mean rate; ``next_expected`` (seconds, model
    clock) the expected next update after the time asked for; ``observations``
    the exact updates plus censored intervals behind it. ``profile`` holds the
    relative intensity per bin (mean 1) of a seasonal model, over
    ``profile_cycle_seconds`` from local Monday 00:00 (or local midnight).
    ``held_out`` lists each candidate's held-out log-likelihood per hour at
    the last model choice.
    """

    kind: ModelKind
    rate_per_hour: float
    next_expected: float
    observations: int
    updates: int = 0
    censored: int = 0
    exposure_hours: float = 0.0
    period_seconds: float | None = None
    phase_seconds: float | None = None
    jitter_seconds: float | None = None
    hit_rate: float | None = None
    profile: tuple[float, ...] | None = None
    profile_cycle_seconds: float | None = None
    utc_offset_seconds: float = 0.0
    held_out: tuple[tuple[str, float], ...] = ()

    def next_expected_at(self) -> datetime | None:
        """``next_expected`` as a UTC datetime, for a model clock of POSIX seconds (the
        service's); ``None`` when no update is expected (infinite)."""
        nxt = self.next_expected
        return datetime.fromtimestamp(nxt, UTC) if math.isfinite(nxt) else None


_Fit = PoissonFit | SeasonalFit | PeriodicFit


class _Feed:
    """One feed's record (mutable, private): updates, coverage, censored intervals, pending pings, last choice."""

    __slots__ = (
        "censored", "cover_end", "cover_start", "cycle", "exposure", "fit_exposure", "fit_informative",
        "informative", "kind", "model", "model_prior", "offset", "ping_hits", "ping_misses", "pings",
        "recent_pings", "scores", "shape", "timed", "updates",
    )

    def __init__(self) -> None:
        self.updates: list[float] = []  # sorted update times
        self.timed: list[bool] = []  # parallel: False for day-only dates
        self.cover_start: list[float] = []  # disjoint (start, end] spans of complete observation, sorted
        self.cover_end: list[float] = []
        self.censored: list[tuple[float, float]] = []  # (a, b] holding >= 1 update, sorted by b
        self.pings: list[float] = []  # pings not yet covered by a probe or document
        self.recent_pings: list[float] = []  # the last few pings, taught or not (to judge the next probe)
        self.ping_hits = 0  # positive probes whose interval held a ping
        self.ping_misses = 0  # positive probes whose interval held none: the feed changed without pinging
        self.offset = 0.0  # seconds east of UTC, from the dates' own offsets
        self.exposure = 0.0
        self.informative = 0  # updates + censored intervals ever added
        self.fit_informative = -1  # at the last model choice (-1: never chosen)
        self.fit_exposure = 0.0
        self.kind: ModelKind = "prior"
        self.shape: SeasonalFit | PeriodicFit | None = None
        # cycle_profile's answer for ``shape`` (it depends on the shape only, not on the level)
        self.cycle: tuple[SeasonalFit | PeriodicFit, tuple[float, float, tuple[float, ...]] | None] | None = None
        self.scores: tuple[tuple[str, float], ...] = ()
        self.model: _Fit | None = None  # cached model with the current level (None: stale)
        self.model_prior = -1

    # -- the record ------------------------------------------------------------------------

    def covered(self, t: float) -> bool:
        i = bisect.bisect_left(self.cover_start, t) - 1
        return i >= 0 and t <= self.cover_end[i]

    def cover(self, s: float, e: float) -> tuple[float, float]:
        """Add (s, e] to the coverage; returns the merged span it joined."""
        starts, ends = self.cover_start, self.cover_end
        if starts and starts[-1] <= s <= ends[-1]:  # the usual case: extends the newest span
            if e > ends[-1]:
                self.exposure += e - ends[-1]
                ends[-1] = e
            return starts[-1], ends[-1]
        i = bisect.bisect_left(ends, s)
        j = bisect.bisect_right(starts, e)
        new_s = min(s, starts[i]) if i < j else s
        new_e = max(e, ends[j - 1]) if i < j else e
        self.exposure += (new_e - new_s) - sum(ends[k] - starts[k] for k in range(i, j))
        starts[i:j] = [new_s]
        ends[i:j] = [new_e]
        return new_s, new_e

    def drop_explained(self, s: float, e: float) -> None:
        """Censored intervals and pings inside the covered (s, e] are explained by its record."""
        k = len(self.censored) - 1
        while k >= 0 and self.censored[k][1] > s:
            a, b = self.censored[k]
            if a >= s and b <= e:
                del self.censored[k]
            k -= 1
        if self.pings:
            self.pings = [p for p in self.pings if not s < p <= e]

    def add_update(self, t: float, timed: bool, window: float) -> bool:
        """Record an update at ``t`` unless one is already recorded within ``window``; True when new."""
        u = self.updates
        i = bisect.bisect_left(u, t)
        if (i < len(u) and u[i] - t <= window) or (i > 0 and t - u[i - 1] <= window):
            j = i if i < len(u) and u[i] - t <= window else i - 1
            if timed and not self.timed[j]:  # a time of day refines a day-only stamp
                self.timed[j] = True
            return False
        u.insert(i, t)
        self.timed.insert(i, timed)
        self.informative += 1
        return True

    def add_day_only(self, t: float, copies: int) -> int:
        """Record ``copies`` updates dated only by the day ``t``; as many as one document ever showed, not more."""
        u = self.updates
        lo, hi = bisect.bisect_left(u, t), bisect.bisect_right(u, t)
        add = copies - (hi - lo)
        if add <= 0:
            return 0
        u[hi:hi] = [t] * add
        self.timed[hi:hi] = [False] * add
        self.informative += add
        return add

    def add_censored(self, a: float, b: float) -> None:
        i = bisect.bisect_left(self.cover_start, b) - 1  # a span starting before b may cover its end
        if i >= 0 and self.cover_start[i] <= a and self.cover_end[i] >= b:
            return  # wholly covered: the record explains it
        if i >= 0 and self.cover_start[i] < b <= self.cover_end[i]:
            b = self.cover_start[i]
        j = bisect.bisect_left(self.cover_start, a) - 1
        if j >= 0 and self.cover_start[j] <= a < self.cover_end[j]:
            a = self.cover_end[j]
        if b > a:
            bisect.insort(self.censored, (a, b), key=lambda ab: ab[1])
            self.informative += 1

    def trim(self, max_updates: int, max_censored: int) -> None:
        """Forget the oldest quarter once over the caps; the new horizon is an update (left truncation)."""
        horizon = -math.inf
        if len(self.updates) > max_updates:
            horizon = self.updates[len(self.updates) - (3 * max_updates) // 4]
        if len(self.censored) > max_censored:
            horizon = max(horizon, self.censored[len(self.censored) - (3 * max_censored) // 4][0])
        if horizon == -math.inf:
            return
        k = bisect.bisect_left(self.updates, horizon)
        del self.updates[:k], self.timed[:k]
        self.censored = [ab for ab in self.censored if ab[0] >= horizon]
        keep = [(max(s, horizon), e) for s, e in zip(self.cover_start, self.cover_end, strict=True) if e > horizon]
        self.cover_start = [s for s, _ in keep]
        self.cover_end = [e for _, e in keep]
        self.exposure = sum(e - s for s, e in keep)

    def observations(self) -> Observations:
        """The record as arrays; only updates strictly inside the coverage count."""
        u = np.asarray(self.updates, dtype=np.float64)
        timed = np.asarray(self.timed, dtype=bool)
        cs = np.asarray(self.cover_start, dtype=np.float64)
        ce = np.asarray(self.cover_end, dtype=np.float64)
        if cs.size:
            i = np.searchsorted(cs, u, side="left") - 1  # spans are (start, end]
            inside = (i >= 0) & (u <= ce[np.maximum(i, 0)])
        else:
            inside = np.zeros(u.shape, dtype=bool)
        cens = np.asarray(self.censored, dtype=np.float64).reshape(-1, 2)
        return Observations(u[inside & timed], u[inside & ~timed], cs, ce, cens[:, 0], cens[:, 1])

    def inside(self) -> int:
        """How many recorded updates lie strictly inside the coverage, as :meth:`observations` counts them.

        A document's oldest date bounds its span (``(oldest, fetch]``) and is
        not an observation of the span's rate: counting it would make one
        entry over a few minutes look like a fast feed. O(spans · log n).
        """
        u = self.updates
        return sum(bisect.bisect_right(u, e) - bisect.bisect_right(u, s)
                   for s, e in zip(self.cover_start, self.cover_end, strict=True))

    def last_seen(self) -> float:
        candidates = [x[-1] for x in (self.cover_end, self.updates, self.pings) if x]
        if self.censored:
            candidates.append(self.censored[-1][1])
        return max(candidates) if candidates else -math.inf


class FeedUpdateModels:
    """Per-feed update models: observe documents, probes and pings; ask rates, intensities, next updates.

    Observations cost O(log n) per date plus an amortised model choice: a
    feed's candidates are refitted when its observations grew by
    ``refit_growth`` (and ``min_refit_updates``) or its exposure doubled, so
    a feed with n observations is refitted O(log n) times. Between choices
    the level (the Poisson posterior) follows every observation.

    Where a document or a probe covers a span, its record of dated entries is
    the truth there: pings inside it are superseded (a ping and the probe
    that confirms it count once), censored intervals inside it are explained.
    A positive probe whose new entries carry no usable date takes the pings
    in its interval as the update times, or else is kept as a censored
    interval. Pings no probe has covered yet wait, uncounted.
    """

    def __init__(self, settings: UpdateModelSettings | None = None) -> None:
        self.settings = settings or UpdateModelSettings()
        self.prior = self.settings.default_prior
        self.profile = np.ones(168)  # population hour-of-week profile, local time, mean 1
        self._prior_version = 0
        self._feeds: dict[FeedKey, _Feed] = {}
        self._latest = -math.inf  # the latest time any input mentioned (a default "now", never a clock)
        self._total = 0  # informative observations over all feeds
        self._total_at_refresh = 0

    # -- dates ------------------------------------------------------------------------------

    def _seconds(self, value: DatedInput) -> tuple[float, bool, float | None] | None:
        """(model seconds, has a time of day, UTC offset) of one date; None when absent."""
        if value is None:
            return None
        if isinstance(value, datetime):
            aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
            offset = aware.utcoffset()
            try:
                posix = aware.timestamp()
            except (OverflowError, ValueError, OSError):
                return (-math.inf, True, None)
            midnight = (value.hour, value.minute, value.second, value.microsecond) == (0, 0, 0, 0)
            return (posix - self.settings.origin, not midnight, offset.total_seconds() if offset else None)
        t = float(value)
        if not math.isfinite(t):
            return (-math.inf, True, None)
        return (t, (t + self.settings.origin) % DAY != 0, None)

    def _screen(
        self, feed: _Feed, dates: Iterable[DatedInput], at: float, *, stragglers: bool
    ) -> tuple[list[tuple[float, bool]], dict[str, int]]:
        """Junk rules: drop placeholders and far-future dates, clamp skew, merge duplicates, cut stragglers."""
        cfg = self.settings
        counts = dict.fromkeys(("undated", "placeholder", "future", "stragglers", "day_only", "known"), 0)
        kept: list[tuple[float, bool]] = []
        for value in dates:
            parsed = self._seconds(value)
            if parsed is None:
                counts["undated"] += 1
                continue
            t, timed, offset = parsed
            if t + cfg.origin < cfg.earliest_plausible:
                counts["placeholder"] += 1
                continue
            if t > at + cfg.future_tolerance:
                counts["future"] += 1
                continue
            if offset is not None and timed:
                feed.offset = offset  # the feed's own rhythm: its latest stated offset
            kept.append((min(t, at), timed))
        kept.sort()
        merged: list[tuple[float, bool]] = []
        for t, timed in kept:
            if not timed and merged and merged[-1] == (t, False):
                merged.append((t, False))  # entries dated the same day are distinct updates
                continue
            if merged and t - merged[-1][0] <= cfg.merge_window:
                counts["known"] += 1
                if timed and not merged[-1][1]:
                    merged[-1] = (merged[-1][0], True)
                continue
            merged.append((t, timed))
        if stragglers and len(merged) >= 5:
            gaps = np.diff([t for t, _ in merged])
            limit = max(cfg.old_gap_factor * float(np.median(gaps)), cfg.old_gap_minimum)
            cut = 0
            while cut < len(gaps) and gaps[cut] > limit:
                cut += 1
            counts["stragglers"] = cut
            merged = merged[cut:]
        counts["day_only"] = sum(1 for _, timed in merged if not timed)
        return merged, counts

    # -- observations -----------------------------------------------------------------------

    def _feed(self, key: FeedKey) -> _Feed:
        f = self._feeds.get(key)
        if f is None:
            f = self._feeds[key] = _Feed()
        return f

    def _add(self, f: _Feed, dates: list[tuple[float, bool]]) -> tuple[int, int]:
        new = 0
        day_only: dict[float, int] = {}
        for t, timed in dates:
            if timed:
                new += f.add_update(t, timed, self.settings.merge_window)
            else:
                day_only[t] = day_only.get(t, 0) + 1
        for t, copies in day_only.items():
            new += f.add_day_only(t, copies)
        return new, len(dates) - new

    def observe_document(
        self, feed: FeedKey, fetched_at: float, published_dates: Iterable[DatedInput]
    ) -> DocumentSummary:
        """Learn from all entry dates of one document fetched at ``fetched_at`` (model seconds).

        The document is a complete record from its oldest kept date to the
        fetch (truncation: nothing is known before that date, and the
        oldest update itself sits on the boundary, so it is not counted —
        the likelihood conditions on it). Dates already recorded are ignored.
        A document without a usable date adds nothing.
        """
        f = self._feed(feed)
        before = f.informative
        dates, counts = self._screen(f, published_dates, fetched_at, stragglers=True)
        new, known = self._add(f, dates)
        if dates:
            s, e = f.cover(dates[0][0], fetched_at) if dates[0][0] < fetched_at else (fetched_at, fetched_at)
            f.drop_explained(s, e)
        self._after(feed, f, fetched_at, before)
        return DocumentSummary(
            new_updates=new, known=known + counts["known"], undated=counts["undated"],
            placeholder=counts["placeholder"], future=counts["future"], stragglers=counts["stragglers"],
            day_only=counts["day_only"],
        )

    def observe_probe(
        self,
        feed: FeedKey,
        previous_success_at: float | None,
        at: float,
        new_entries: int,
        newest_published: Sequence[DatedInput] = (),
    ) -> DocumentSummary:
        """Learn from a successful probe at ``at`` after the previous successful one (interval-censored).

        ``new_entries`` is how many entries were new; ``newest_published``
        their dates. Dated new entries inside ``(previous_success_at, at]``
        are exact updates and the interval becomes covered; entries dated
        before ``previous_success_at`` were not visible then, so their date is
        not their update time (``backdated``) and they count as undated. A
        positive probe with no usable date takes the pending pings of its
        interval as its updates, else it is censored ("≥ 1 update in (a, b]",
        likelihood ``1 - e^{-Λ(a, b)}``). A negative probe covers its
        interval with no update. Without ``previous_success_at`` (the first
        probe) the dates are read as a document.
        """
        if previous_success_at is None:
            return self.observe_document(feed, at, newest_published)
        f = self._feed(feed)
        before = f.informative
        a = previous_success_at
        if not at > a:
            return DocumentSummary()
        dates, counts = self._screen(f, newest_published, at, stragglers=False)
        inside = [(t, timed) for t, timed in dates if t > a]
        backdated = len(dates) - len(inside)
        if new_entries > 0 or inside:
            if any(a < p <= at for p in f.recent_pings):
                f.ping_hits += 1
            else:
                f.ping_misses += 1
        new, known = self._add(f, inside)
        if inside or (new_entries <= 0 and not backdated):
            f.drop_explained(*f.cover(a, at))
        else:
            pings = [p for p in f.pings if a < p <= at]
            for p in pings:
                f.add_update(p, True, self.settings.merge_window)
            if pings:
                f.drop_explained(*f.cover(a, at))
            else:
                f.add_censored(a, at)
        self._after(feed, f, at, before)
        return DocumentSummary(
            new_updates=new, known=known + counts["known"], undated=counts["undated"],
            placeholder=counts["placeholder"], future=counts["future"], day_only=counts["day_only"],
            backdated=backdated,
        )

    def observe_ping(self, feed: FeedKey, at: float) -> bool:
        """Record that the feed said it changed at ``at``; True unless a probe or document already covers ``at``.

        Until the feed's pings are trusted, the ping waits until a probe or
        document covers it (see the class docstring). A feed's pings are
        trusted once ``trusted_ping_hits`` positive probes found a ping in
        their interval and at most ``trusted_ping_miss_share`` of its positive
        probes found a change nobody pinged: the feed pings every update, so a
        ping is then complete evidence on its own. It is recorded as an update
        and covers the time since the newest covered span (pings pending in it
        become updates too). A probe that later finds an unpinged change counts
        as a miss, and enough of them end the trust. Several pings within
        ``merge_window`` are one.
        """
        f = self._feed(feed)
        self._latest = max(self._latest, at)
        if f.covered(at) or any(abs(p - at) <= self.settings.merge_window for p in f.pings[-4:]):
            return False
        f.recent_pings.append(at)
        if len(f.recent_pings) > 8:
            del f.recent_pings[0]
        if self.trusts_pings(feed) and f.cover_end and f.cover_end[-1] < at:
            before = f.informative
            start = f.cover_end[-1]
            for p in [*[q for q in f.pings if start < q < at], at]:
                f.add_update(p, True, self.settings.merge_window)
            f.drop_explained(*f.cover(start, at))
            self._after(feed, f, at, before)
            return True
        f.pings.append(at)
        if len(f.pings) > self.settings.max_pending_pings:
            del f.pings[0]
        return True

    def posterior(self, feed: FeedKey) -> tuple[float, float]:
        """The Gamma posterior ``(shape, rate per second)`` of the feed's mean rate, for optimism.

        The population prior plus the feed's recorded updates inside its
        coverage (a document's oldest date bounds its span and is not one of
        them, as in the fits) and censored intervals (each at least one
        update) over its covered seconds: how
        sure the mean rate is, not which model shape won. Cheap (no fit): the
        background allocation reads it at every probe. An unknown feed gets the
        prior itself.
        """
        f = self._feeds.get(feed)
        prior = self.prior
        alpha = max(prior.alpha, 1e-3)
        beta = max(prior.beta, 1.0)
        if f is None:
            return alpha, beta
        return alpha + f.inside() + len(f.censored), beta + f.exposure

    def evidence(self, feed: FeedKey) -> tuple[float, float]:
        """What the feed's record holds: ``(updates, covered seconds)``, the data behind :meth:`posterior`.

        Recorded updates inside the coverage plus censored intervals (each at
        least one update), and the seconds of complete observation; ``(0, 0)`` for an unknown
        feed. No prior: for a caller that pools feeds on its own scale (the
        background allocation, ``proxy.core.rates.pooled_rates``). Cheap.
        """
        f = self._feeds.get(feed)
        if f is None:
            return 0.0, 0.0
        return float(f.inside() + len(f.censored)), f.exposure

    def trusts_pings(self, feed: FeedKey) -> bool:
        """Whether ``feed``'s pings teach the model on their own (see :meth:`observe_ping`)."""
        f = self._feeds.get(feed)
        if f is None or f.ping_hits < self.settings.trusted_ping_hits:
            return False
        return f.ping_misses <= self.settings.trusted_ping_miss_share * (f.ping_hits + f.ping_misses)

    def _after(self, key: FeedKey, f: _Feed, at: float, before: int) -> None:
        self._latest = max(self._latest, at)
        f.trim(self.settings.max_updates, self.settings.max_censored)
        f.model = None  # the level follows every observation
        self._total += f.informative - before
        grown = f.informative - f.fit_informative
        if (
            f.fit_informative < 0
            or grown >= max(self.settings.min_refit_updates, math.ceil(self.settings.refit_growth * f.fit_informative))
            or (f.exposure >= 2 * f.fit_exposure and grown > 0)
        ):
            self._choose(f)
        if self._total >= max(2 * self._total_at_refresh, 200) or (
            self._total - self._total_at_refresh >= self.settings.prior_refresh_every
        ):
            self.refresh_population()

    # -- model choice -----------------------------------------------------------------------

    def _shift(self, f: _Feed) -> float:
        return self.settings.origin + f.offset - MONDAY_POSIX

    def _candidates(self, obs: Observations, prior: GammaPrior, f: _Feed) -> dict[str, _Fit]:
        cfg = self.settings
        fits: dict[str, _Fit] = {"poisson": PoissonFit(obs.rate(prior))}
        if obs.timed.size < cfg.min_shape_updates // 2:
            return fits
        # A cycle is not learnt from less than a few of it: twenty entries from the last hour all
        # fall at one time of day, and a daily model would then expect the next update tomorrow.
        starts = np.concatenate((obs.cover_start, obs.censored_start))
        span = float(np.concatenate((obs.cover_end, obs.censored_end)).max() - starts.min()) if starts.size else 0.0
        if "seasonal" in cfg.kinds:
            for cycle, name in ((DAY, "seasonal/day"), (WEEK, "seasonal/week")):
                if span < cfg.min_cycles * cycle:
                    continue
                shape = fit_seasonal(
                    obs, 1.0, self.profile, cycle=cycle, shift=self._shift(f),
                    pseudo_updates=cfg.seasonal_pseudo_updates,
                )
                fits[name] = SeasonalFit(seasonal_level(obs, shape, prior), shape.weights, cycle, shape.shift)
        if "periodic" in cfg.kinds:
            for period in period_candidates(obs.timed, minimum=10 * cfg.min_jitter):
                if span < cfg.min_cycles * period:
                    continue
                fit = fit_periodic(obs, period, min_jitter=cfg.min_jitter, min_updates=cfg.min_shape_updates // 2)
                if fit is not None:
                    fits[f"periodic/{period:g}"] = fit
        return fits

    def _choose(self, f: _Feed) -> None:
        """Pick the family by held-out likelihood (newest share of the observations), then refit it on all."""
        cfg = self.settings
        f.fit_informative, f.fit_exposure = f.informative, f.exposure
        obs = f.observations()
        f.kind, f.shape, f.scores = ("poisson" if obs.updates or obs.censored_end.size else "prior"), None, ()
        if obs.timed.size < cfg.min_shape_updates:
            return
        times = np.sort(np.concatenate((obs.timed, obs.day_only, obs.censored_end)))
        k = min(times.size - 1, math.ceil((1 - cfg.holdout_fraction) * times.size))
        split = 0.5 * (times[k - 1] + times[k])
        train, test = obs.split(split)
        if train.timed.size < cfg.min_shape_updates // 2 or test.updates + test.censored_end.size < cfg.min_holdout_updates:
            return
        hours = max((test.exposure + float((test.censored_end - test.censored_start).sum())) / HOUR, 1e-9)
        candidates = self._candidates(train, self.prior, f)
        scores = {name: log_likelihood(fit, test) for name, fit in candidates.items()}
        f.scores = tuple((name, score / hours) for name, score in sorted(scores.items()))
        best = max(scores, key=lambda name: scores[name])
        if scores[best] < scores["poisson"] + cfg.selection_margin:
            return
        full = self._candidates(obs, self.prior, f)
        shape = full.get(best)
        if isinstance(shape, SeasonalFit | PeriodicFit):
            f.kind = "seasonal" if isinstance(shape, SeasonalFit) else "periodic"
            f.shape = shape

    def _model(self, f: _Feed) -> _Fit:
        """The feed's model with its level brought up to date (cached until the next observation)."""
        if f.model is not None and f.model_prior == self._prior_version:
            return f.model
        obs = f.observations()
        shape = f.shape
        model: _Fit
        if isinstance(shape, SeasonalFit):
            model = SeasonalFit(seasonal_level(obs, shape, self.prior), shape.weights, shape.cycle, shape.shift)
        elif isinstance(shape, PeriodicFit):
            model = shape  # FPN carries its own level (hit rate and background)
        else:
            model = PoissonFit(obs.rate(self.prior))
        f.model, f.model_prior = model, self._prior_version
        return model

    def refresh_population(self) -> None:
        """Refit the population prior (Gamma on the rate, hour-of-week profile) from every feed's record.

        Called automatically when the observations doubled or grew by
        ``prior_refresh_every``; cheap enough to call after a restore.
        Censored intervals count as one update each here (a slight
        underestimate for the prior only).
        """
        self._total_at_refresh = self._total
        counts, exposures = [], []
        hist = np.zeros(168)
        for f in self._feeds.values():
            obs = f.observations()
            span = obs.exposure + float((obs.censored_end - obs.censored_start).sum())
            if span >= HOUR:
                counts.append(obs.updates + obs.censored_end.size)
                exposures.append(span)
            if obs.timed.size >= 8:
                pos = np.floor(((obs.timed + self._shift(f)) % WEEK) / HOUR).astype(np.int64)
                h = np.bincount(np.minimum(pos, 167), minlength=168).astype(np.float64)
                hist += h / h.sum() * min(obs.timed.size, 50)
        prior = fit_gamma_prior(np.asarray(counts, dtype=np.float64), np.asarray(exposures, dtype=np.float64))
        if prior is not None:
            self.prior = prior
        if hist.sum() > 0:
            smooth = (np.roll(hist, 1) + 2 * hist + np.roll(hist, -1)) / 4
            # half the population's shape, half flat: no hour of the week is ruled out a priori
            self.profile = 0.5 * smooth / smooth.mean() + 0.5
        self._prior_version += 1

    # -- questions --------------------------------------------------------------------------

    def feeds(self) -> list[FeedKey]:
        """The feeds with a record."""
        return list(self._feeds)

    def kind_counts(self, feeds: Iterable[FeedKey]) -> dict[ModelKind, int]:
        """How many of ``feeds`` have each kind of model, as of each feed's last model choice.

        For a gauge: it reads what :meth:`estimate` would choose from, without
        refitting anything (``estimate`` costs tens of microseconds a feed; this,
        a dict lookup). A feed with observations but no choice yet is ``poisson``,
        as ``estimate`` says; a feed never observed is ``prior``.
        """
        counts: dict[ModelKind, int] = {"prior": 0, "poisson": 0, "seasonal": 0, "periodic": 0}
        for feed in feeds:
            f = self._feeds.get(feed)
            if f is None:
                kind: ModelKind = "prior"
            elif f.kind in ("seasonal", "periodic"):
                kind = f.kind
            else:
                kind = "poisson" if f.updates or f.censored else "prior"
            counts[kind] += 1
        return counts

    def estimate(self, feed: FeedKey, after: float | None = None) -> FeedModelEstimate:
        """The feed's model; ``next_expected`` is after ``after`` (default: the feed's latest observation).

        A feed never observed gets the population prior (kind ``prior``).
        """
        f = self._feeds.get(feed)
        if f is None:
            start = after if after is not None else max(self._latest, 0.0)
            rate = self.prior.mean
            return FeedModelEstimate("prior", rate * HOUR, start + 1 / rate if rate > 0 else math.inf, 0)
        model = self._model(f)
        start = after if after is not None else max(f.last_seen(), 0.0)
        obs = f.observations()
        common: dict[str, Any] = {
            "observations": obs.updates + obs.censored_end.size, "updates": obs.updates,
            "censored": obs.censored_end.size, "exposure_hours": obs.exposure / HOUR,
            "utc_offset_seconds": f.offset, "held_out": f.scores,
        }
        if isinstance(model, PeriodicFit):
            rate = model.hit_rate / model.period + model.background
            return FeedModelEstimate(
                "periodic", rate * HOUR, model.next_after(start), period_seconds=model.period,
                phase_seconds=model.phase, jitter_seconds=model.jitter, hit_rate=model.hit_rate, **common,
            )
        if isinstance(model, SeasonalFit):
            return FeedModelEstimate(
                "seasonal", model.rate * HOUR, model.next_after(start), profile=model.weights,
                profile_cycle_seconds=model.cycle, **common,
            )
        kind: ModelKind = "poisson" if common["observations"] else "prior"
        return FeedModelEstimate(kind, model.rate * HOUR, model.next_after(start), **common)

    def _fit_for(self, feed: FeedKey) -> _Fit:
        f = self._feeds.get(feed)
        return PoissonFit(self.prior.mean) if f is None else self._model(f)

    def intensity(self, feed: FeedKey, t: float) -> float:
        """Expected updates per second at ``t``."""
        return float(self._fit_for(feed).intensity(np.array([t]))[0])

    def expected_updates(self, feed: FeedKey, a: float, b: float) -> float:
        """Λ(a, b): expected updates in ``(a, b]`` (0 when ``b <= a``); additive over adjacent intervals."""
        if not b > a:
            return 0.0
        return max(float(self._fit_for(feed).integral(np.array([a]), np.array([b]))[0]), 0.0)

    def expected_updates_between(self, feed: FeedKey, edges: Sequence[float] | np.ndarray) -> np.ndarray:
        """Λ over each interval ``(edges[i], edges[i+1]]`` at once (``len(edges) - 1`` values, each ``>= 0``).

        :meth:`expected_updates` for a whole grid in one vectorised call (the
        planner asks it for every chronon of its horizon); ``edges`` ascending.
        """
        e = np.asarray(edges, dtype=np.float64)
        if e.ndim != 1 or len(e) < 2:
            return np.zeros(0)
        if np.any(np.diff(e) < 0):
            raise ValueError("edges must be ascending")
        return np.maximum(np.asarray(self._fit_for(feed).integral(e[:-1], e[1:]), dtype=np.float64), 0.0)

    def cycle_profile(self, feed: FeedKey) -> tuple[float, float, tuple[float, ...]] | None:
        """When in its cycle the feed changes: ``(start, cycle, weights)``, or ``None`` for a homogeneous model.

        ``weights`` (mean 1) are the intensity relative to the model's mean
        over equal bins of one ``cycle`` (seconds), the first bin starting at
        ``start`` (model seconds): a seasonal model's own bins (hour of day or
        of week, in the feed's offset), or, for a near-periodic one, one
        period cut into bins of about a jitter (24 to 672 bins) with the slot
        in the middle. The background allocation reads the feed through it
        (``proxy.core.rates.CycleShape``). Poisson and prior models have no
        cycle: their intensity is the mean at every time.
        """
        f = self._feeds.get(feed)
        if f is None or f.shape is None:
            return None
        shape = f.shape
        if f.cycle is not None and f.cycle[0] is shape:  # computed once per model choice: cheap per probe
            return f.cycle[1]
        if isinstance(shape, SeasonalFit):
            start, cycle, weights = -shape.shift, shape.cycle, np.asarray(shape.weights, dtype=np.float64)
        else:
            bins = min(672, max(24, math.ceil(shape.period / shape.jitter)))
            start, cycle = shape.phase - shape.period / 2, shape.period
            edges = start + cycle * np.arange(bins + 1) / bins
            weights = np.maximum(np.asarray(shape.integral(edges[:-1], edges[1:]), dtype=np.float64), 0.0)
        total = float(weights.sum())
        out = None if not total > 0 else (start, cycle, tuple(float(w) for w in weights * (len(weights) / total)))
        f.cycle = (shape, out)
        return out

    def change_probability(self, feed: FeedKey, a: float, b: float) -> float:
        """The chance the feed changed in ``(a, b]``: ``1 - exp(-Λ(a, b))``."""
        return -math.expm1(-self.expected_updates(feed, a, b))

    def next_expected_update(self, feed: FeedKey, after: float) -> float:
        """The expected time of the feed's next update after ``after``."""
        return self._fit_for(feed).next_after(after)

    def log_likelihood(self, feed: FeedKey, start: float, end: float, updates: Sequence[float]) -> float:
        """Log-likelihood of exactly ``updates`` (timed) in ``(start, end]`` under the feed's current model."""
        u = np.asarray(sorted(updates), dtype=np.float64)
        obs = Observations(u, cover_start=np.array([start]), cover_end=np.array([end]))
        return log_likelihood(self._fit_for(feed), obs)

    # -- persistence ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The whole learnt state as a JSON-ready dict (format ``proxy.update_models``, versioned)."""
        feeds = []
        for key, f in self._feeds.items():
            shape: dict[str, Any] | None = None
            if isinstance(f.shape, SeasonalFit):
                shape = {"weights": list(f.shape.weights), "cycle": f.shape.cycle, "shift": f.shape.shift}
            elif isinstance(f.shape, PeriodicFit):
                s = f.shape
                shape = {"period": s.period, "phase": s.phase, "jitter": s.jitter, "hit_rate": s.hit_rate,
                         "background": s.background}
            feeds.append({
                "feed": key, "updates": list(f.updates),
                "day_only": [i for i, timed in enumerate(f.timed) if not timed],
                "cover": [[s, e] for s, e in zip(f.cover_start, f.cover_end, strict=True)],
                "censored": [[a, b] for a, b in f.censored], "pings": list(f.pings), "offset": f.offset,
                "informative": f.informative, "fit_informative": f.fit_informative, "fit_exposure": f.fit_exposure,
                "kind": f.kind, "shape": shape, "scores": [[n, s] for n, s in f.scores],
                "recent_pings": list(f.recent_pings), "ping_hits": f.ping_hits, "ping_misses": f.ping_misses,
            })
        return {
            "format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION, "origin": self.settings.origin,
            "prior": [self.prior.alpha, self.prior.beta], "profile": [float(x) for x in self.profile],
            "latest": self._latest if math.isfinite(self._latest) else None,
            "total": self._total, "total_at_refresh": self._total_at_refresh, "feeds": feeds,
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        """Replace the whole state with a :meth:`snapshot`; raises :class:`UpdateModelStateError` if it is not one."""
        if data.get("format") != SNAPSHOT_FORMAT:
            raise UpdateModelStateError(f"not an update-model snapshot (format {data.get('format')!r})")
        if data.get("version") != SNAPSHOT_VERSION:
            raise UpdateModelStateError(
                f"update-model snapshot version {data.get('version')!r} is not supported (this build reads {SNAPSHOT_VERSION})"
            )
        if float(data["origin"]) != self.settings.origin:
            raise UpdateModelStateError(f"snapshot clock origin {data['origin']} differs from {self.settings.origin}")
        try:
            feeds: dict[FeedKey, _Feed] = {}
            for rec in data["feeds"]:
                f = _Feed()
                f.updates = [float(x) for x in rec["updates"]]
                day = set(rec["day_only"])
                f.timed = [i not in day for i in range(len(f.updates))]
                f.cover_start = [float(s) for s, _ in rec["cover"]]
                f.cover_end = [float(e) for _, e in rec["cover"]]
                f.exposure = sum(e - s for s, e in zip(f.cover_start, f.cover_end, strict=True))
                f.censored = [(float(a), float(b)) for a, b in rec["censored"]]
                f.pings = [float(p) for p in rec["pings"]]
                f.offset = float(rec["offset"])
                f.informative, f.fit_informative = int(rec["informative"]), int(rec["fit_informative"])
                f.fit_exposure = float(rec["fit_exposure"])
                f.kind = rec["kind"]
                shape = rec["shape"]
                if shape is not None and "weights" in shape:
                    f.shape = SeasonalFit(0.0, tuple(shape["weights"]), shape["cycle"], shape["shift"])
                elif shape is not None:
                    f.shape = PeriodicFit(shape["period"], shape["phase"], shape["jitter"], shape["hit_rate"],
                                          shape["background"])
                f.scores = tuple((str(n), float(s)) for n, s in rec["scores"])
                # Added after version 1 was written: older snapshots have no ping record yet.
                f.recent_pings = [float(p) for p in rec.get("recent_pings", [])]
                f.ping_hits, f.ping_misses = int(rec.get("ping_hits", 0)), int(rec.get("ping_misses", 0))
                feeds[rec["feed"]] = f
            prior = GammaPrior(float(data["prior"][0]), float(data["prior"][1]))
            profile = np.asarray(data["profile"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as exc:
            raise UpdateModelStateError(f"malformed update-model snapshot: {exc!r}") from exc
        if profile.shape != (168,):
            raise UpdateModelStateError("malformed update-model snapshot: profile must have 168 bins")
        self._feeds, self.prior, self.profile = feeds, prior, profile
        self._latest = -math.inf if data.get("latest") is None else float(data["latest"])
        self._total, self._total_at_refresh = int(data["total"]), int(data["total_at_refresh"])
        self._prior_version += 1
