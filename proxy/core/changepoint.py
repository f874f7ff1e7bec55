"""Regime shifts in a feed's update rate, found from what its probes discover: a two-sided Poisson CUSUM.

A feed's rate is learnt from its whole record (``proxy.core.rates``): a blog
that posted weekly for a year and now posts hourly looks weekly for as many
weeks as it takes the new updates to outweigh the old silence, and the
allocation starves it meanwhile (the record's fading, ``pooled_rates``'s
``fade``, only helps a feed nobody probes). :class:`ShiftDetector` watches the
probes' counts instead: each successful probe of a feed found ``k`` updates in
the ``d`` chronons since the previous one, Poisson with the feed's rate ``λ``
if nothing changed. Against the rate learnt since the last shift ``λ₀`` it
keeps Page's (1954) two cumulative sums of log-likelihood ratios, one for a
rate ``ratio`` times higher and one ``ratio`` times lower::

    up   = max(0, up   + k·ln ρ − (ρ − 1)·λ₀·d)
    down = max(0, down − k·ln ρ + (1 − 1/ρ)·λ₀·d)

and declares a shift when one passes ``threshold`` (nats). The shift started
when that sum last left 0, so the updates and chronons since then are the new
regime's record: the feed's rate is then learnt from them alone (the old
record is dropped, not faded). Lorden (1971): the CUSUM is the fastest
detector for a given false-alarm rate against a known shift size; ``ratio``
is that size.

Bounded memory: eight floats per feed, whatever its history; O(1) per
probe (``benchmarks/machinery/bench_changepoint.py`` measures it). Pure: no
clock, no I/O; the caller says which chronons elapsed and what was found.
Does not look at entries' dates (a probe's count is all it reads), nor at
seasonality (a weekly shape is not a shift; a feed quiet every weekend may
raise false alarms, which cost little: its rate is re-learnt from the recent
probes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Shift", "ShiftDetector"]


@dataclass(frozen=True, slots=True)
class Shift:
    """A detected regime shift: which way, and the new regime's record (updates, chronons) so far."""

    up: bool
    updates: float
    chronons: float


class _Feed:
    """One feed's detector state: its record since the last shift and the two sums with their segments."""

    __slots__ = ("chronons", "down", "down_n", "down_t", "shifted", "up", "up_n", "up_t", "updates")

    def __init__(self) -> None:
        self.updates = 0.0  # since the last shift (or the first probe)
        self.chronons = 0.0
        self.up = 0.0  # the CUSUM toward a faster rate, and its segment since it last was 0
        self.up_n = 0.0
        self.up_t = 0.0
        self.down = 0.0  # toward a slower rate
        self.down_n = 0.0
        self.down_t = 0.0
        self.shifted = False


class ShiftDetector:
    """Per-feed two-sided Poisson CUSUM on probe counts; the record since a detected shift.

    ``ratio`` (> 1): the shift size the sums are tuned to; ``threshold``
    (nats): how much evidence a shift needs (higher: fewer false alarms, later
    detection); ``prior_updates``: pseudo-updates at the caller's rate behind
    ``λ₀``, so a feed's first probes are judged against the rate the caller
    believes rather than against nothing.
    """

    __slots__ = ("_down_cost", "_feeds", "_log_ratio", "_prior", "_ratio", "_threshold", "_up_cost")

    def __init__(self, ratio: float = 4.0, threshold: float = 5.0, prior_updates: float = 1.0) -> None:
        if not (ratio > 1.0 and math.isfinite(ratio)):
            raise ValueError(f"ratio must be a finite number > 1, got {ratio}")
        if not (threshold > 0 and math.isfinite(threshold)):
            raise ValueError(f"threshold must be finite and > 0, got {threshold}")
        if not (prior_updates > 0 and math.isfinite(prior_updates)):
            raise ValueError(f"prior_updates must be finite and > 0, got {prior_updates}")
        self._ratio = ratio
        self._threshold = threshold
        self._prior = prior_updates
        self._log_ratio = math.log(ratio)
        self._up_cost = ratio - 1.0
        self._down_cost = 1.0 - 1.0 / ratio
        self._feeds: dict[int, _Feed] = {}

    def observe(self, resource: int, chronons: float, updates: int, rate: float) -> Shift | None:
        """A successful probe of ``resource`` found ``updates`` updates in the ``chronons`` since the previous one.

        ``rate``: what the caller believes the feed's rate is (per chronon,
        > 0), the prior behind ``λ₀``. Returns the shift when this probe
        completes one, else ``None``. The feed's first probe is a baseline
        and must not be shown (what it finds is backlog).
        """
        if chronons < 0 or updates < 0 or not math.isfinite(chronons):
            raise ValueError(f"chronons and updates must be finite and >= 0, got {chronons}, {updates}")
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be finite and > 0, got {rate}")
        f = self._feeds.get(resource)
        if f is None:
            f = self._feeds[resource] = _Feed()
        lam = (f.updates + self._prior) / (f.chronons + self._prior / rate)
        k = float(updates)
        mass = lam * chronons
        up = f.up + k * self._log_ratio - self._up_cost * mass
        if up > 0:
            f.up, f.up_n, f.up_t = up, f.up_n + k, f.up_t + chronons
        else:
            f.up = f.up_n = f.up_t = 0.0
        down = f.down - k * self._log_ratio + self._down_cost * mass
        if down > 0:
            f.down, f.down_n, f.down_t = down, f.down_n + k, f.down_t + chronons
        else:
            f.down = f.down_n = f.down_t = 0.0
        f.updates += k
        f.chronons += chronons
        if f.up > self._threshold or f.down > self._threshold:
            is_up = f.up > self._threshold
            n, t = (f.up_n, f.up_t) if is_up else (f.down_n, f.down_t)
            f.updates, f.chronons, f.shifted = n, t, True
            f.up = f.up_n = f.up_t = f.down = f.down_n = f.down_t = 0.0
            return Shift(is_up, n, t)
        return None

    def record(self, resource: int) -> tuple[float, float] | None:
        """``(updates, chronons)`` since ``resource``'s last detected shift; ``None`` if none was detected.

        What the caller's rate should be learnt from instead of the feed's whole
        record once its regime changed.
        """
        f = self._feeds.get(resource)
        if f is None or not f.shifted:
            return None
        return f.updates, f.chronons

    def forget(self, resource: int) -> None:
        """Drop ``resource``'s state (its rules are gone)."""
        self._feeds.pop(resource, None)

    def __len__(self) -> int:
        return len(self._feeds)
