"""The estimators behind :mod:`proxy.rules.update_models`: fits, intensities, held-out scores.

Everything here is a pure function of arrays of seconds (the model's clock,
see :class:`UpdateModelSettings` in the public module); nothing keeps state.
Three intensity families, as in paper 002 §4.1 ("update models: Poisson and
FPN"), plus the hour-of-week profile real feeds need:

* :class:`PoissonFit` — homogeneous rate λ;
* :class:`SeasonalFit` — λ times a piecewise-constant profile over a cycle
  (24 hour-of-day bins or 168 hour-of-week bins, mean 1);
* :class:`PeriodicFit` — FPN: an update near ``phase + k·period`` with
  Gaussian jitter, a hit rate (paper 002: "false negatives", a missed digest)
  and a homogeneous background ("false positives").

Each exposes ``intensity`` and ``integral`` (Λ over intervals, vectorised);
``integral`` is a difference of one cumulative function, so it is additive
over adjacent intervals and monotone by construction.

Deliberately no scipy: the service image need not carry it (numpy and
:mod:`math` only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = [
    "DAY",
    "HOUR",
    "MONDAY_POSIX",
    "WEEK",
    "GammaPrior",
    "Observations",
    "PeriodicFit",
    "PoissonFit",
    "SeasonalFit",
    "fit_gamma_prior",
    "fit_periodic",
    "fit_seasonal",
    "log_likelihood",
    "period_candidates",
    "posterior_rate",
    "seasonal_level",
]

Array = npt.NDArray[np.float64]

HOUR = 3600.0
DAY = 86_400.0
WEEK = 604_800.0
MONDAY_POSIX = 345_600.0  # 1970-01-05T00:00Z, a Monday: hour-of-week 0 is Monday 00:00
_SQRT2 = math.sqrt(2.0)
_SQRT2PI = math.sqrt(2.0 * math.pi)
_erf = np.vectorize(math.erf, otypes=[float])


def _arr(values: object = ()) -> Array:
    return np.asarray(values, dtype=np.float64).reshape(-1)


# --- Poisson rate with exact and interval-censored data, under a Gamma prior ------------


@dataclass(frozen=True, slots=True)
class GammaPrior:
    """Gamma(alpha, beta) prior on a rate per second: ``alpha`` pseudo-updates seen over ``beta`` pseudo-seconds."""

    alpha: float
    beta: float

    def __post_init__(self) -> None:
        if not (self.alpha >= 0 and self.beta >= 0 and math.isfinite(self.alpha) and math.isfinite(self.beta)):
            raise ValueError(f"need finite alpha, beta >= 0, got {self.alpha}, {self.beta}")

    @property
    def mean(self) -> float:
        """The prior mean rate per second (``alpha / beta``; 0 for the flat prior)."""
        return self.alpha / self.beta if self.beta > 0 else 0.0


FLAT = GammaPrior(0.0, 0.0)


def _g(x: Array) -> tuple[Array, Array]:
    """``g(x) = x / (e^x - 1)`` (expected extra count factor) and its derivative, stable for all x >= 0."""
    x = np.clip(x, 0.0, 700.0)
    small = x < 1e-6
    xs = np.where(small, 1.0, x)
    em1 = np.expm1(xs)
    g = np.where(small, 1.0 - x / 2.0, xs / em1)
    dg = np.where(small, -0.5 + x / 6.0, g * (1.0 / xs - 1.0 - 1.0 / em1))
    return g, dg


def posterior_rate(
    n: float, exposure: float, censored: Array | None = None, prior: GammaPrior = FLAT
) -> float:
    """The rate per second from ``n`` exact updates over ``exposure`` seconds and censored intervals.

    ``censored`` holds durations ``d_j`` of intervals known to contain at least
    one update (a probe that found new entries it cannot date). The likelihood
    is ``λ^n e^{-λT} ∏_j (1 - e^{-λ d_j})``; with the Gamma prior, the estimate
    solves ``λ (β + T) = α + n + Σ_j g(λ d_j)``, ``g(x) = x / (e^x - 1)`` — the
    EM fixed point (each censored interval contributes its expected count
    ``λd / (1 - e^{-λd})`` over its length). Without censored data this is the
    posterior mean ``(α + n) / (β + T)``; with the flat prior it is the MLE
    (``-ln(1 - m/N) / d`` for N probes every d seconds, m of them positive —
    the naive ``m / (N d)`` is biased low once several updates share a probe
    interval). The left side is increasing and the right side decreasing in λ,
    so the root is unique; Newton from ``(α + n) / (β + T)`` rises to it
    monotonically (the difference is concave). ``inf`` when nothing bounds it
    (only censored data and no prior).
    """
    d = _arr(censored if censored is not None else ())
    d = d[d > 0]
    base = prior.beta + exposure
    if d.size == 0:
        return (prior.alpha + n) / base if base > 0 else (0.0 if prior.alpha + n == 0 else math.inf)
    if base <= 0:
        return math.inf
    lam = (prior.alpha + n) / base
    for _ in range(100):
        g, dg = _g(lam * d)
        f = lam * base - prior.alpha - n - float(g.sum())
        fp = base - float((d * dg).sum())
        step = f / fp
        lam -= step
        if abs(step) <= 1e-12 * max(lam, 1e-300):
            break
    return max(lam, 0.0)


def fit_gamma_prior(counts: Array, exposures: Array) -> GammaPrior | None:
    """Empirical Bayes: the Gamma prior maximising the feeds' marginal (negative binomial) likelihood.

    ``counts[i]`` updates over ``exposures[i]`` seconds for feed i. For each
    shape α on a log grid the best β solves ``Σ α/β = Σ (α + n_i)/(β + T_i)``
    (monotone, bisection in log β); the α with the highest marginal
    likelihood wins. None with fewer than 3 usable feeds or no update at all.
    """
    n, t = _arr(counts), _arr(exposures)
    keep = t > 0
    n, t = n[keep], t[keep]
    if n.size < 3 or n.sum() <= 0:
        return None
    best: tuple[float, float, float] | None = None
    for log_alpha in np.linspace(math.log(0.05), math.log(50.0), 29):
        alpha = math.exp(log_alpha)
        lo, hi = math.log(float(t.min()) * 1e-3 + 1e-9), math.log(float(t.max()) * 1e3 + 1.0)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            beta = math.exp(mid)
            # d/dβ of the marginal log-likelihood: positive while β is too small
            score = n.size * alpha / beta - float(((alpha + n) / (beta + t)).sum())
            if score > 0:
                lo = mid
            else:
                hi = mid
        beta = math.exp(0.5 * (lo + hi))
        ll = float(
            (_lgamma(alpha + n) - math.lgamma(alpha) + alpha * math.log(beta) - (alpha + n) * np.log(beta + t)).sum()
        )
        if best is None or ll > best[0]:
            best = (ll, alpha, beta)
    assert best is not None
    return GammaPrior(best[1], best[2])


def _lgamma(x: Array) -> Array:
    """log Γ(x) for x > 0, vectorised (Stirling's series after shifting x up by 8; error < 1e-10)."""
    x = _arr(x)
    shift = np.zeros_like(x)
    y = x.copy()
    for _ in range(8):
        shift += np.log(y)
        y = y + 1.0
    inv = 1.0 / y
    inv2 = inv * inv
    series = inv * (1 / 12 - inv2 * (1 / 360 - inv2 * (1 / 1260 - inv2 / 1680)))
    return (y - 0.5) * np.log(y) - y + 0.5 * math.log(2 * math.pi) + series - shift


# --- the record one fit sees --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observations:
    """One feed's record over a span: exact updates, the complete-observation spans, censored intervals.

    ``timed`` are updates with a time of day, ``day_only`` updates known to
    the day (stamped at midnight); both lie inside the coverage
    ``(cover_start[i], cover_end[i]]``. ``censored_*`` are intervals outside
    the coverage known to hold at least one update.
    """

    timed: Array = field(default_factory=_arr)
    day_only: Array = field(default_factory=_arr)
    cover_start: Array = field(default_factory=_arr)
    cover_end: Array = field(default_factory=_arr)
    censored_start: Array = field(default_factory=_arr)
    censored_end: Array = field(default_factory=_arr)

    @property
    def exposure(self) -> float:
        """Seconds of complete observation."""
        return float((self.cover_end - self.cover_start).sum())

    @property
    def updates(self) -> int:
        """Exact updates (timed and day-only)."""
        return int(self.timed.size + self.day_only.size)

    def rate(self, prior: GammaPrior) -> float:
        """The Poisson level of this record under ``prior`` (see :func:`posterior_rate`)."""
        return posterior_rate(self.updates, self.exposure, self.censored_end - self.censored_start, prior)

    def split(self, at: float) -> tuple[Observations, Observations]:
        """The record up to ``at`` and after it (coverage cut at ``at``; censored intervals straddling it dropped)."""
        s, e = self.cover_start, self.cover_end
        before = Observations(
            self.timed[self.timed <= at], self.day_only[self.day_only <= at],
            s[s < at], np.minimum(e[s < at], at),
            self.censored_start[self.censored_end <= at], self.censored_end[self.censored_end <= at],
        )
        after = Observations(
            self.timed[self.timed > at], self.day_only[self.day_only > at],
            np.maximum(s[e > at], at), e[e > at],
            self.censored_start[self.censored_start >= at], self.censored_end[self.censored_start >= at],
        )
        return before, after


# --- the three families --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoissonFit:
    """A homogeneous Poisson process: ``rate`` updates per second."""

    rate: float

    def intensity(self, t: Array) -> Array:
        """λ(t) at each of ``t``."""
        return np.full(np.shape(t), self.rate)

    def integral(self, a: Array, b: Array) -> Array:
        """Λ over each ``(a_i, b_i]``."""
        return self.rate * (b - a)

    def next_after(self, t: float) -> float:
        """The expected time of the next update after ``t``: ``t + 1/λ`` (memoryless)."""
        return t + 1.0 / self.rate if self.rate > 0 else math.inf


@dataclass(frozen=True, slots=True)
class SeasonalFit:
    """λ(t) = ``rate`` x ``weights[bin(t)]``: a profile over a cycle of equal bins, mean weight 1.

    ``shift`` maps model seconds to seconds since a local Monday 00:00 (origin,
    the feed's UTC offset and :data:`MONDAY_POSIX` folded into one number);
    ``cycle`` is :data:`DAY` (hour of day) or :data:`WEEK` (hour of week).
    """

    rate: float
    weights: tuple[float, ...]
    cycle: float
    shift: float

    @property
    def bin_seconds(self) -> float:
        """The length of one bin."""
        return self.cycle / len(self.weights)

    def _w(self) -> Array:
        return np.asarray(self.weights, dtype=np.float64)

    def _position(self, t: Array) -> tuple[Array, Array]:
        u = _arr(t) + self.shift
        q = np.floor(u / self.cycle)
        return q, u - q * self.cycle

    def _within(self, r: Array) -> Array:
        """∫ of the weights from the cycle's start to position ``r`` (seconds)."""
        w, bl = self._w(), self.bin_seconds
        cum = np.concatenate(([0.0], np.cumsum(w) * bl))
        k = np.minimum((r // bl).astype(np.int64), len(w) - 1)
        return cum[k] + w[k] * (r - k * bl)

    def intensity(self, t: Array) -> Array:
        """λ(t) at each of ``t``."""
        _, r = self._position(t)
        k = np.minimum((r // self.bin_seconds).astype(np.int64), len(self.weights) - 1)
        return self.rate * self._w()[k]

    def integral(self, a: Array, b: Array) -> Array:
        """Λ over each ``(a_i, b_i]``: whole cycles plus the two partial ones."""
        qa, ra = self._position(a)
        qb, rb = self._position(b)
        return self.rate * ((qb - qa) * self.cycle + self._within(rb) - self._within(ra))

    def next_after(self, t: float) -> float:
        """``t`` + the expected waiting time ``∫ e^{-Λ(t, t+s)} ds``: one cycle bin by bin, then a geometric tail."""
        w, bl = self._w() * self.rate, self.bin_seconds
        _, r = self._position(_arr([t]))
        k0 = min(int(r[0] // bl), len(w) - 1)
        first = (k0 + 1) * bl - float(r[0])
        order = np.roll(w, -k0)
        lengths = np.full(len(w), bl)
        lengths[0] = first
        rates = np.concatenate((order, order[:1]))
        lengths = np.concatenate((lengths, [bl - first]))
        lam = rates * lengths
        before = np.concatenate(([0.0], np.cumsum(lam)[:-1]))
        safe = np.where(rates > 0, rates, 1.0)
        pieces = np.where(rates > 0, -np.expm1(-lam) / safe, lengths) * np.exp(-before)
        total = float(lam.sum())
        if total <= 0:
            return math.inf
        return t + float(pieces.sum()) / -math.expm1(-total)


@dataclass(frozen=True, slots=True)
class PeriodicFit:
    """FPN (paper 002 §4.1): ``hit_rate`` updates near each ``phase + k·period`` (N(0, jitter²)) plus a background rate."""

    period: float
    phase: float
    jitter: float
    hit_rate: float
    background: float

    def _nearest(self, t: Array) -> tuple[Array, Array]:
        k = np.floor((_arr(t) - self.phase) / self.period + 0.5)
        return k, (_arr(t) - self.phase - k * self.period) / self.jitter

    def intensity(self, t: Array) -> Array:
        """λ(t) at each of ``t`` (the nearest peak only: the jitter is at most period/24)."""
        _, z = self._nearest(t)
        return self.hit_rate * np.exp(-0.5 * z * z) / (self.jitter * _SQRT2PI) + self.background

    def _cumulative_peaks(self, t: Array) -> Array:
        k, z = self._nearest(t)
        cdf: Array = 0.5 * (1.0 + _arr(_erf(z / _SQRT2)))
        return k + cdf

    def integral(self, a: Array, b: Array) -> Array:
        """Λ over each ``(a_i, b_i]``: peaks passed (Gaussian CDF at the ends) plus the background."""
        peaks = self._cumulative_peaks(b) - self._cumulative_peaks(a)
        return self.hit_rate * np.maximum(peaks, 0.0) + self.background * (b - a)

    def next_after(self, t: float) -> float:
        """The next phase time at or after ``t`` (paper 002's FPN: the update is expected at its slot)."""
        return self.phase + math.ceil((t - self.phase) / self.period) * self.period


Fit = PoissonFit | SeasonalFit | PeriodicFit


# --- fitting the shapes --------------------------------------------------------------------


def bin_exposure(cover_start: Array, cover_end: Array, cycle: float, bins: int, shift: float) -> Array:
    """Seconds of coverage falling in each bin of the cycle."""
    bl = cycle / bins
    lower = np.arange(bins) * bl

    def upto(u: Array) -> Array:  # exposure of each bin in [0, u) since a cycle start
        q = np.floor(u / cycle)
        r = u - q * cycle
        partial: Array = np.clip(r[:, None] - lower[None, :], 0.0, bl)
        return q[:, None] * bl + partial

    if cover_start.size == 0:
        return np.zeros(bins)
    per_bin: Array = (upto(cover_end + shift) - upto(cover_start + shift)).sum(axis=0)
    return per_bin


def fit_seasonal(
    obs: Observations, rate: float, population: Array, *, cycle: float, shift: float, pseudo_updates: float
) -> SeasonalFit:
    """The profile of the timed updates per bin, each bin shrunk toward the population profile.

    ``population`` holds 168 hour-of-week weights (mean 1), folded to 24 for a
    daily cycle. Bin k's rate is the Gamma posterior mean
    ``(κ_b π_k + n_k) / (κ_b / λ_t + T_k)`` with ``κ_b = pseudo_updates / bins``
    pseudo-updates spread as the population does and ``λ_t`` the timed rate:
    an unseen bin gets ``λ_t π_k``, a well-observed one ``n_k / T_k``. The
    weights are normalised to mean 1 and the level is ``rate`` (which counts
    day-only and censored updates too). Weights are floored at 1e-3 so a
    held-out update in an empty bin costs a finite log-likelihood.
    """
    bins = 168 if cycle == WEEK else 24
    prior = population if bins == 168 else population.reshape(7, 24).mean(axis=0)
    bl = cycle / bins
    pos = np.floor(((obs.timed + shift) % cycle) / bl).astype(np.int64)
    counts = np.bincount(np.minimum(pos, bins - 1), minlength=bins).astype(np.float64)
    exposure = bin_exposure(obs.cover_start, obs.cover_end, cycle, bins, shift)
    total = float(exposure.sum())
    if counts.sum() == 0 or total <= 0:
        w = prior.copy()
    else:
        lam_t = counts.sum() / total
        kb = pseudo_updates / bins
        w = (kb * prior + counts) / (kb / lam_t + exposure)
    w = np.maximum(w / w.mean(), 1e-3)
    w = w / w.mean()
    return SeasonalFit(rate, tuple(float(x) for x in w), cycle, shift)


def seasonal_level(obs: Observations, shape: SeasonalFit, prior: GammaPrior) -> float:
    """The level of a seasonal profile: :func:`posterior_rate` with exposures weighted by the profile.

    Under ``λ(t) = λ̄ w(t)`` the expected count over a span is ``λ̄ ∫ w``, so
    the coverage and the censored intervals enter with ``∫ w`` instead of
    their length: a record of three weekdays of an office-hours feed is not
    mistaken for its weekly mean.
    """
    unit = SeasonalFit(1.0, shape.weights, shape.cycle, shape.shift)
    exposure = float(unit.integral(obs.cover_start, obs.cover_end).sum())
    censored = unit.integral(obs.censored_start, obs.censored_end)
    return posterior_rate(obs.updates, exposure, censored, prior)


def period_candidates(timed: Array, *, minimum: float) -> list[float]:
    """A day, a week, and the median gap between timed updates when at least half the gaps are within 10 % of it."""
    out = [DAY, WEEK]
    gaps = np.diff(np.sort(timed))
    gaps = gaps[gaps > 0]
    if gaps.size >= 4:
        med = float(np.median(gaps))
        regular = np.mean(np.abs(gaps - med) <= 0.1 * med) >= 0.5
        med = round(med / 60.0) * 60.0
        if regular and med >= minimum and all(abs(med - p) > 0.02 * p for p in out):
            out.append(med)
    return out


def fit_periodic(
    obs: Observations, period: float, *, min_jitter: float, min_updates: int
) -> PeriodicFit | None:
    """Phase, jitter, hit rate and background of a near-periodic feed (FPN) with period ``period``.

    The phase starts at the circular mean of the updates' positions in the
    period, then moves to the median residual of those within a quarter
    period; the jitter is 1.4826 x the MAD of those residuals (floored at
    ``min_jitter``; above period/24 the feed is not near-periodic). Updates
    within 3.5 jitters of their slot are hits, the rest background. The hit
    rate is hits per slot covered. None without ``min_updates`` timed
    updates, a covered slot or a narrow enough jitter.
    """
    t = obs.timed
    if t.size < min_updates:
        return None
    ang = 2 * math.pi * np.mod(t, period) / period
    phase = (math.atan2(float(np.sin(ang).mean()), float(np.cos(ang).mean())) / (2 * math.pi)) * period

    def residuals(ph: float) -> Array:
        return np.mod(t - ph + period / 2, period) - period / 2

    r = residuals(phase)
    near = np.abs(r) < period / 4
    if not near.any():
        return None
    phase += float(np.median(r[near]))
    r = residuals(phase)
    near = np.abs(r) < period / 4
    jitter = max(1.4826 * float(np.median(np.abs(r[near]))), min_jitter)
    if jitter > period / 24:
        return None  # a broad daily or weekly rhythm is the seasonal profile's business, not a slot
    hits = np.abs(r) <= 3.5 * jitter
    phase = float(np.mod(phase + float(r[hits].mean()), period))
    slots = float(
        (np.floor((obs.cover_end - phase) / period) - np.floor((obs.cover_start - phase) / period)).sum()
    )
    exposure = obs.exposure
    if slots < 1 or exposure <= 0:
        return None
    misses = t.size - int(hits.sum()) + obs.day_only.size
    return PeriodicFit(period, phase, jitter, int(hits.sum()) / slots, (misses + 0.5) / exposure)


def log_likelihood(fit: Fit, obs: Observations) -> float:
    """Log-likelihood of ``obs`` under ``fit`` as an inhomogeneous Poisson process.

    ``Σ log λ(t_i) − Λ(coverage) + Σ_j log(1 − e^{−Λ(censored_j)})``; a
    day-only update contributes ``log(Λ(its day) / 1 day)``, the mean
    intensity over its day, so every family is scored on the same footing.
    """
    ll = float(np.log(np.maximum(fit.intensity(obs.timed), 1e-300)).sum())
    if obs.day_only.size:
        per_day = fit.integral(obs.day_only, obs.day_only + DAY) / DAY
        ll += float(np.log(np.maximum(per_day, 1e-300)).sum())
    ll -= float(fit.integral(obs.cover_start, obs.cover_end).sum())
    if obs.censored_start.size:
        lam = fit.integral(obs.censored_start, obs.censored_end)
        ll += float(np.log(np.maximum(-np.expm1(-lam), 1e-300)).sum())
    return ll
