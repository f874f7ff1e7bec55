"""Update-rate models in chronons: what background probes and SUP believe about when feeds change.

Two ports, both :class:`typing.Protocol`:

* :class:`RateModel` — ``rate(resource, t)``: expected updates of
  ``resource`` per chronon at chronon ``t``. Background probes
  (:mod:`proxy.core.discovery`) rank feeds by it.
* :class:`UpdatePredictor` — ``next_expected(resource, after, count)``: the
  chronon by which ``count`` more updates are expected after ``after``.
  SUP and fbSUP (:mod:`proxy.core.sup`) plan predicted EIs from it (paper
  002 §4.1: "updates occur at the expected update time as determined by the
  update model").

Implementations here:

* :class:`KnownRates` — clairvoyant about rates, not times: per-resource
  base rates times an optional cycle (a weekly shape, paper 002's
  "Synthetic Data 2"). The simulator gives it the generator's true λ.
* :class:`OnlineRates` — learnt from what probes discover: (prior count +
  updates found) / (prior chronons + chronons observed), a Gamma-Poisson
  posterior mean. Its cost against :class:`KnownRates` is the cost of learning.
* :class:`PlannedUpdates` — a predictor from a list of predicted update
  chronons per resource (paper 002's FPN model: the true trace with noise).
* :class:`CycleShape` — when in its cycle (a week, a day, a digest's period)
  a feed changes, relative to its mean rate: how the background allocation
  reads a seasonal or near-periodic model at the chronons that matter.
* :func:`pooled_rates` — rates from each feed's evidence (updates over
  chronons observed), shrunk toward the rate of the feeds compared with it:
  what the service's background allocation ranks by.

The rich per-feed models of the service (``proxy.rules.update_models``, in
seconds) are meant to be adapted to these Protocols; this module does not
know them. Pure: no clock, no RNG (noise for FPN is drawn by the caller).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = [
    "CycleShape",
    "KnownRates",
    "OnlineRates",
    "PlannedUpdates",
    "RateModel",
    "UpdatePredictor",
    "cycle_masses",
    "expected_arrival",
    "gamma_upper",
    "pooled_rates",
]


@runtime_checkable
class RateModel(Protocol):
    """Expected updates per chronon of a resource at a chronon (``>= 0``, finite)."""

    def rate(self, resource: int, t: int) -> float: ...


@runtime_checkable
class UpdatePredictor(Protocol):
    """When updates are expected: the chronon by which ``count`` more arrive after ``after``.

    ``None`` when they are not expected before ``horizon`` (exclusive): a
    silent feed, or the end of the epoch. The answer is ``> after``.
    """

    def next_expected(self, resource: int, after: int, count: int = 1, *, horizon: int) -> int | None: ...


def expected_arrival(model: RateModel, resource: int, after: int, count: float, horizon: int) -> int | None:
    """The first chronon ``t > after`` with ``Σ_{after < s <= t} rate(resource, s) >= count``.

    Paper 002 §4.1 (piecewise Poisson): the expected number of updates in
    ``(after, t]`` is the integral of the rate; the update is "expected" when
    that reaches ``count``. For a constant rate λ this is ``after + ⌈count/λ⌉``.
    ``None`` if it is not reached before ``horizon``.
    """
    if count <= 0:
        return after + 1 if after + 1 < horizon else None
    acc = 0.0
    for t in range(after + 1, horizon):
        acc += model.rate(resource, t)
        if acc >= count - 1e-9:
            return t
    return None


class KnownRates:
    """Rates known in advance: ``base[r] * cycle[t % len(cycle)]`` updates per chronon.

    ``cycle`` is a shape (e.g. 168 hourly multipliers of a week), rescaled
    to mean 1 so that ``base[r]`` stays the long-run rate. Also an
    :class:`UpdatePredictor` (by :func:`expected_arrival`, in closed form
    when there is no cycle).
    """

    __slots__ = ("_base", "_cycle")

    def __init__(self, base: Sequence[float], cycle: Sequence[float] = (1.0,)) -> None:
        if any(not (b >= 0 and math.isfinite(b)) for b in base):
            raise ValueError("base rates must be finite and >= 0")
        if not cycle or any(not (c >= 0 and math.isfinite(c)) for c in cycle) or sum(cycle) <= 0:
            raise ValueError("cycle must be a non-empty list of finite multipliers >= 0, not all 0")
        mean = sum(cycle) / len(cycle)
        self._base = tuple(float(b) for b in base)
        self._cycle = tuple(c / mean for c in cycle)

    @classmethod
    def from_counts(cls, counts: Sequence[int], chronons: int, cycle: Sequence[float] = (1.0,)) -> KnownRates:
        """The rates a clairvoyant observer of a whole epoch would give: updates / chronons."""
        if chronons < 1:
            raise ValueError(f"chronons must be >= 1, got {chronons}")
        return cls([c / chronons for c in counts], cycle)

    @property
    def base(self) -> tuple[float, ...]:
        return self._base

    def rate(self, resource: int, t: int) -> float:
        if not 0 <= resource < len(self._base):
            return 0.0
        return self._base[resource] * self._cycle[t % len(self._cycle)]

    def next_expected(self, resource: int, after: int, count: int = 1, *, horizon: int) -> int | None:
        if len(self._cycle) == 1:
            lam = self.rate(resource, after + 1)
            if lam <= 0:
                return None
            t = after + max(1, math.ceil(count / lam - 1e-9))
            return t if t < horizon else None
        return expected_arrival(self, resource, after, count, horizon)


class OnlineRates:
    """Rates learnt online from discovered updates: a Gamma-Poisson posterior mean per resource.

    ``rate = (prior_count + found) / (prior_chronons + observed)``, where
    ``found`` counts updates discovered on the resource and ``observed`` the
    chronons from its first successful probe to its latest one. The prior is
    one update per ``prior_chronons / prior_count`` chronons: before any
    observation every feed gets that rate, and a few observations move it.
    Constant in ``t`` (no seasonality: that is the rich model's job).
    """

    __slots__ = ("_first", "_found", "_last", "_prior_chronons", "_prior_count")

    def __init__(self, prior_count: float = 1.0, prior_chronons: float = 10.0) -> None:
        if prior_count <= 0 or prior_chronons <= 0:
            raise ValueError("prior_count and prior_chronons must be > 0")
        self._prior_count = prior_count
        self._prior_chronons = prior_chronons
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._found: dict[int, int] = {}

    def observe_probe(self, resource: int, t: int, updates_found: int) -> None:
        """A successful probe of ``resource`` at ``t`` found ``updates_found`` updates since the previous one."""
        if updates_found < 0:
            raise ValueError(f"updates_found must be >= 0, got {updates_found}")
        if resource not in self._first:
            # The first probe is the baseline: what it shows is backlog, not a rate.
            self._first[resource] = self._last[resource] = t
            self._found[resource] = 0
            return
        self._last[resource] = max(self._last[resource], t)
        self._found[resource] += updates_found

    def rate(self, resource: int, t: int) -> float:
        shape, rate = self.posterior(resource)
        return shape / rate

    def posterior(self, resource: int) -> tuple[float, float]:
        """The Gamma posterior of ``resource``'s rate: ``(shape, rate)`` = (prior + found, prior + observed).

        Its mean is :meth:`rate`; its spread says how little a rarely probed
        feed has been seen (an exploring allocation's optimism,
        :func:`gamma_upper`).
        """
        first = self._first.get(resource)
        if first is None:
            return self._prior_count, self._prior_chronons
        observed = self._last[resource] - first
        return self._prior_count + self._found[resource], self._prior_chronons + observed

    def next_expected(self, resource: int, after: int, count: int = 1, *, horizon: int) -> int | None:
        lam = self.rate(resource, after + 1)
        t = after + max(1, math.ceil(count / lam - 1e-9))
        return t if t < horizon else None


class PlannedUpdates:
    """A predictor from predicted update chronons per resource (paper 002's FPN model, §4.1).

    ``next_expected(r, after, count)`` is the ``count``-th predicted update
    strictly after ``after``.
    """

    __slots__ = ("_times",)

    def __init__(self, times: Sequence[Sequence[int]]) -> None:
        self._times = tuple(tuple(sorted(set(ts))) for ts in times)

    def next_expected(self, resource: int, after: int, count: int = 1, *, horizon: int) -> int | None:
        if not 0 <= resource < len(self._times) or count < 1:
            return None
        ts = self._times[resource]
        i = bisect_right(ts, after) + count - 1
        if i >= len(ts) or ts[i] >= horizon:
            return None
        return ts[i]


def gamma_upper(shape: float, rate: float, z: float) -> float:
    """An upper quantile of a Gamma(``shape``, ``rate``) posterior: the rate an optimist believes.

    Wilson–Hilferty (1931): ``(X·rate/shape)^{1/3}`` is close to normal with
    mean ``1 − 1/(9·shape)`` and variance ``1/(9·shape)``, so the quantile at
    ``z`` standard deviations is ``shape/rate · (1 − 1/(9·shape) + z/(3·√shape))³``
    (within a few per cent of the exact quantile for ``shape >= 1``; pure, no
    scipy). ``z = 0`` is about the median, not the mean.
    """
    if shape <= 0 or rate <= 0:
        raise ValueError("shape and rate must be > 0")
    c = 1.0 - 1.0 / (9.0 * shape) + z / (3.0 * math.sqrt(shape))
    return shape / rate * max(c, 0.0) ** 3


POOL_EXPOSURE_CAP = 4.0
"""In the pool's rate, no feed's record counts for more than this many times the median feed's
exposure (:func:`pooled_rates`)."""


def _median(x: np.ndarray) -> float:
    """``np.median`` of a non-empty 1-d array, the same float, without its generic machinery
    (about 2 against 11 µs on a few dozen feeds: the plan pools every simulated chronon)."""
    k = x.size // 2
    if x.size % 2:
        return float(np.partition(x, k)[k])
    part = np.partition(x, (k - 1, k))
    return float((part[k - 1] + part[k]) / 2)


def _pool_rate(n: np.ndarray, t: np.ndarray) -> float:
    """``(Σ updates + 1) / (Σ exposure + 1)`` with each record scaled down to at most
    :data:`POOL_EXPOSURE_CAP` times the median exposure of the feeds observed at all."""
    seen = t[t > 0]
    if seen.size:
        cap = POOL_EXPOSURE_CAP * _median(seen)
        over = t > cap
        if over.any():
            scale = np.ones_like(t)
            scale[over] = cap / t[over]
            n, t = n * scale, t * scale
    return (float(n.sum()) + 1.0) / (float(t.sum()) + 1.0)


def pooled_rates(updates: Sequence[float] | npt.NDArray[np.float64], exposure: Sequence[float] | npt.NDArray[np.float64],
                 strength: float, z: float = 0.0, unseen: Sequence[float] | npt.NDArray[np.float64] | None = None,
                 fade: float = math.inf, prior: Sequence[float] | npt.NDArray[np.float64] | None = None,
                 prior_strength: float | None = None) -> list[float]:
    """Each feed's rate per chronon from its evidence, shrunk toward the pool's (empirical Bayes).

    Feed ``i`` saw ``updates[i]`` updates (a censored interval counts as one)
    in ``exposure[i]`` chronons of complete observation. The pool's rate
    ``m = (Σ updates + 1) / (Σ exposure + 1)`` (the one keeps it positive and
    finite before anything is seen) is every feed's prior mean, worth
    ``strength`` pseudo-updates: feed ``i``'s posterior is
    ``Gamma(strength + updates[i], strength / m + exposure[i])``, and the
    answer is its upper ``z`` quantile (:func:`gamma_upper`; ``z = 0`` about
    the median, ``z > 0`` optimistic about a feed seen little). A feed with no
    evidence gets the pool's rate, one with many updates its own
    ``updates / exposure``.

    In the pool, a record longer than :data:`POOL_EXPOSURE_CAP` times the
    median feed's exposure counts as that long (its updates scaled alike): a
    dormant feed whose one entry is a year old has a year of silence on record,
    which is right for that feed, but as a plain sum it would drag the pool's
    rate, and so every other feed's prior and fading, down to nearly nothing
    (``docs/discovery.md``, "Other workloads").

    ``unseen[i]`` (chronons since feed ``i``'s record was last refreshed: its
    last successful probe) fades the record while nobody looks: it counts
    ``2^(−unseen[i] · m / fade)``, half as much once the pool's feeds would
    have updated ``fade`` times on average (``fade = inf``: never). The rate
    the record says stays, its weight against the pool shrinks, and the
    optimism of a feed seen little comes back. So a feed the allocation
    starved because its record looked slow is, sooner or later, worth a probe
    again (a revisit floor that follows the feeds' pace, whatever the
    chronon's length), and a feed whose rhythm changed is found out. ``m`` is
    the pool's rate over the unfaded records.

    ``prior[i]`` (a rate per chronon; NaN or 0: none) replaces the pool's rate
    as feed ``i``'s prior mean, worth ``prior_strength`` pseudo-updates
    (default ``strength``): what the feed's publisher says of its pace
    (``proxy.feeds.hints``), before its own record outweighs it. The pool is
    still the records'.

    Why the pool rather than a fixed prior: the prior must be on the scale of
    the feeds compared, whatever the chronon's length (the update models'
    default prior, one update per 6 h, is 36,000 chronons of the bench's 0.3 s:
    every feed then looked alike). Vectorised (numpy): cheap at every tick
    for every watched feed. Pure; ranks nothing (the allocation does). Lists
    or float arrays alike (the plan passes its arrays, not copies).
    """
    n = np.asarray(updates, dtype=np.float64)
    t = np.asarray(exposure, dtype=np.float64)
    if n.shape != t.shape or n.ndim != 1:
        raise ValueError("updates and exposure must be sequences of the same length")
    if not (strength > 0 and math.isfinite(strength)) or not math.isfinite(z):
        raise ValueError(f"strength must be finite and > 0 and z finite (got {strength}, {z})")
    if not (np.isfinite(n).all() and np.isfinite(t).all()) or (n < 0).any() or (t < 0).any():
        raise ValueError("updates and exposure must be finite and >= 0")
    if not fade > 0 or math.isnan(fade):
        raise ValueError(f"fade must be > 0 (inf: records never fade), got {fade}")
    if n.size == 0:
        return []
    pool = _pool_rate(n, t)
    if unseen is not None and math.isfinite(fade):
        age = np.asarray(unseen, dtype=np.float64)
        if age.shape != n.shape or not np.isfinite(age).all() or (age < 0).any():
            raise ValueError("unseen must have one finite value >= 0 per feed")
        weight = np.exp2(-age * (pool / fade))
        n = n * weight
        t = t * weight
    shape = strength + n
    rate = strength / pool + t
    if prior is not None:
        said = np.asarray(prior, dtype=np.float64)
        if said.shape != n.shape:
            raise ValueError("prior must have one value per feed")
        hs = strength if prior_strength is None else prior_strength
        if not (hs > 0 and math.isfinite(hs)):
            raise ValueError(f"prior_strength must be finite and > 0, got {hs}")
        has = np.isfinite(said) & (said > 0)
        if has.any():
            shape = np.where(has, hs + n, shape)
            rate = np.where(has, hs / np.where(has, said, 1.0) + t, rate)
    # gamma_upper, vectorised (Wilson–Hilferty).
    c = np.maximum(1.0 - 1.0 / (9.0 * shape) + z / (3.0 * np.sqrt(shape)), 0.0)
    return (shape / rate * c**3).tolist()  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class CycleShape:
    """A feed's update intensity over a repeating cycle relative to its mean rate, in chronons.

    ``weights`` are equal bins of one cycle of ``length`` chronons, the first
    starting at chronon ``start`` (fractional chronons are fine: a cycle is a
    week or a digest's period, not a whole number of chronons); their mean is
    1, so ``rate · mass(a, b)`` is the expected number of updates in
    ``(a, b]`` of a feed whose mean rate is ``rate`` per chronon, and a
    homogeneous feed (no shape) has ``mass(a, b) = b − a``. The service builds
    one from a seasonal (hour-of-week) or near-periodic update model
    (``FeedUpdateModels.cycle_profile``); the level stays separate, so the
    optimism about a feed's rate scales its shape. Pure arithmetic on floats:
    a few operations per call, cheap enough for every watched feed each chronon.
    """

    start: float
    length: float
    weights: tuple[float, ...]
    _cum: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.length) and self.length > 0):
            raise ValueError(f"a cycle needs a finite start and a length > 0, got {self.start}, {self.length}")
        if not self.weights or any(not (math.isfinite(w) and w >= 0) for w in self.weights):
            raise ValueError("weights must be finite, >= 0 and not empty")
        mean = sum(self.weights) / len(self.weights)
        if abs(mean - 1.0) > 1e-6:
            raise ValueError(f"weights must have mean 1 (relative to the mean rate), got {mean:.6g}")
        cum = [0.0]
        for w in self.weights:
            cum.append(cum[-1] + w)
        object.__setattr__(self, "_cum", tuple(cum))

    def _cumulative(self, t: float) -> float:
        """∫ of the shape from ``start`` to ``t`` (negative before ``start``), in chronons."""
        n = len(self.weights)
        width = self.length / n
        u = t - self.start
        q = math.floor(u / self.length)
        r = u - q * self.length
        k = min(int(r // width), n - 1)
        return q * self.length + width * self._cum[k] + self.weights[k] * (r - k * width)

    def mass(self, a: float, b: float) -> float:
        """``∫_a^b`` of the relative intensity: ``b − a`` for a flat shape, 0 when ``b <= a``."""
        if b <= a:
            return 0.0
        return max(self._cumulative(b) - self._cumulative(a), 0.0)


def cycle_masses(cycles: Sequence[CycleShape], a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``[c.mass(x, y) for c, x, y in zip(cycles, a, b)]`` (a scalar ``a`` or ``b`` for all): the same floats, on arrays.

    The background allocation reads thousands of cycles each chronon; this does
    :meth:`CycleShape.mass`'s arithmetic in numpy, in the same order, and only
    reads each cycle's fields and its two bins in Python.
    """
    m = len(cycles)
    lo = np.broadcast_to(np.asarray(a, dtype=np.float64), (m,))
    hi = np.broadcast_to(np.asarray(b, dtype=np.float64), (m,))
    if m == 0:
        return np.zeros(0)
    start = np.fromiter([c.start for c in cycles], dtype=np.float64, count=m)
    length = np.fromiter([c.length for c in cycles], dtype=np.float64, count=m)
    bins = np.fromiter([len(c.weights) for c in cycles], dtype=np.int64, count=m)
    width = length / bins

    def cumulative(t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:  # CycleShape._cumulative
        u = t - start
        q = np.floor(u / length)
        r = u - q * length
        k = np.minimum((r // width).astype(np.int64), bins - 1)
        at = k.tolist()
        cum = np.fromiter([c._cum[j] for c, j in zip(cycles, at, strict=True)], dtype=np.float64, count=m)
        w = np.fromiter([c.weights[j] for c, j in zip(cycles, at, strict=True)], dtype=np.float64, count=m)
        return q * length + width * cum + w * (r - k * width)

    return np.where(hi <= lo, 0.0, np.maximum(cumulative(hi) - cumulative(lo), 0.0))
