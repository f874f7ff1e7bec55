"""Cross-feed co-updates: an update found on feed A raises the chance that feed B changed too.

News feeds react to the same events: one story reaches several of them within
minutes (issue 45, item 3). A rate model cannot say *when*; a partner's update
can. :class:`CoUpdates` learns, online and from probe outcomes alone, which
feeds update together, and turns each update a probe finds into a *hint* on the
finding feed's partners: the chance each holds an update its last successful
probe has not seen, beyond what its rate already says.

Learning. Every update a probe finds is an *event* ``(feed, chronon)``. Events
of the last ``memory`` chronons are kept by chronon; a new event of A at ``u``
is paired with every other feed's event within ``lag`` chronons of ``u``, found
before or after it (each pair is counted once, by whichever of the two is found
second). Per feed, a decayed count of its events ``n_A`` and of its
co-occurrences ``c_AB`` with at most ``partners`` other feeds (the strongest: a
newcomer takes the weakest slot once that has decayed below one fresh
co-occurrence). ``P(B reacts | A updated) = c_AB / (n_A + prior)``; the chance
B would have updated within ``2 lag + 1`` chronons anyway, ``1 - exp(-(2 lag +
1) λ_B)``, is taken off, so only the lift counts.

Hints. When A's event at ``u`` is found, each partner B that has not shown an
event near ``u`` gets a pending hint, dropped once B is probed at or after ``u
+ lag`` (its reaction, if any, is then seen) or once ``u`` is older than the
rules' window plus the lag (finding it would be too late to capture). A feed's
chance is ``1 - Π (1 - lift)`` over its pending hints.

Bounded memory: ``partners`` counts per feed, the events of ``memory`` chronons,
the pending hints of the last ``window + lag`` chronons. Decay: counts halve
every ``half_life`` chronons (a scale factor, not a pass over the counts). Cost
per probe: O(updates found × (the events within the lag + ``partners``)); the
hints, O(pending hints) per chronon. ``benchmarks/policies/policy_coupdate_cost.py``
measures both (``docs/discovery.md``).

Pure: chronons in, chances out. Does not know which feeds a rule waits for, nor
what a probe costs; does not see pings (a pinged update is no surprise).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["CoUpdates"]

_RESCALE = 2.0**64  # the decay's scale factor is folded back into the counts past this


class CoUpdates:
    """Which feeds update together, learnt from probe outcomes, and the hints it gives (module docstring)."""

    __slots__ = ("_buckets", "_clock", "_co", "_crowd", "_floor", "_half_life", "_lag", "_memory", "_min_support", "_n",
                 "_origin", "_partners", "_pending", "_prior", "_pruned")

    def __init__(
        self, *, lag: int = 1, partners: int = 8, half_life: float = 400.0, memory: int = 50, prior: float = 2.0,
        min_support: float = 1.5,
    ) -> None:
        if lag < 0:
            raise ValueError(f"lag must be >= 0, got {lag}")
        if partners < 1:
            raise ValueError(f"partners must be >= 1, got {partners}")
        if not half_life > 0 or not math.isfinite(half_life):
            raise ValueError(f"half_life must be a finite number > 0, got {half_life}")
        if memory < 2 * lag + 1:
            raise ValueError(f"memory must be >= 2 lag + 1, got {memory}")
        if prior < 0 or min_support < 0:
            raise ValueError("prior and min_support must be >= 0")
        self._lag = lag
        self._partners = partners
        self._half_life = half_life
        self._memory = memory
        self._prior = prior
        self._min_support = min_support
        self._crowd = 4 * partners  # more events than this near one: only known partners are counted
        self._clock = -math.inf  # the latest chronon seen: the decay's now
        self._origin = 0.0  # the chronon at which the counts' scale is 1
        self._n: dict[int, float] = {}  # feed -> its events, scaled
        self._co: dict[int, dict[int, float]] = {}  # feed -> partner -> co-occurrences, scaled
        self._floor: dict[int, float] = {}  # feed -> a lower bound of its weakest partner's count, scaled
        self._buckets: dict[int, set[int]] = {}  # chronon -> feeds with an event found there
        self._pruned = -math.inf  # buckets before this are gone
        self._pending: dict[int, dict[int, int]] = {}  # feed -> partner -> the partner's event chronon

    def _gain(self, now: float) -> float:
        """One event's worth at ``now`` in the counts' scale (the decay runs the other way)."""
        if now > self._clock:
            self._clock = now
        g = math.pow(2.0, (self._clock - self._origin) / self._half_life)
        if g > _RESCALE:  # fold the scale into the counts so they stay finite
            for feed in self._n:
                self._n[feed] /= g
            for counts in self._co.values():
                for partner in counts:
                    counts[partner] /= g
            for feed in self._floor:
                self._floor[feed] /= g
            self._origin = self._clock
            g = 1.0
        return g

    def observe(self, resource: int, now: int, updates: Iterable[float]) -> None:
        """A successful probe of ``resource`` at ``now`` found updates at ``updates`` (chronons, since its last success).

        A probe that found nothing is worth telling too: it settles the feed's pending hints.
        """
        g = self._gain(now)
        lag = self._lag
        pending = self._pending.get(resource)
        if pending:  # the probe saw any reaction to the events before now - lag
            for partner in [p for p, u in pending.items() if u + lag <= now]:
                del pending[partner]
        for b in sorted({math.floor(u) for u in updates}):
            if b < self._clock - self._memory:
                continue  # too old to pair: its partners' events may be gone
            here = self._buckets.setdefault(b, set())
            if resource in here:
                continue
            near = {f for d in range(-lag, lag + 1) for f in self._buckets.get(b + d, ())}
            near.discard(resource)
            here.add(resource)
            self._n[resource] = self._n.get(resource, 0.0) + g
            if len(near) > self._crowd:
                # A crowded stretch (many feeds updated at once) says little about which of them go
                # together, and pairing them all would cost a probe O(feeds): known partners only.
                near = {f for f in self._co.get(resource, ()) if f in near}
            for other in near:
                self._bump(resource, other, g)
                self._bump(other, resource, g)
            for partner in self._co.get(resource, ()):
                if partner not in near:  # a partner already seen near b needs no hint
                    hints = self._pending.setdefault(partner, {})
                    if b > hints.get(resource, -1 << 62):
                        hints[resource] = b
        if self._clock - self._memory > self._pruned + self._memory:  # prune every ``memory`` chronons
            self._pruned = self._clock - self._memory
            for b in [b for b in self._buckets if b < self._pruned]:
                del self._buckets[b]

    def _bump(self, a: int, b: int, g: float) -> None:
        """One more co-occurrence of ``a`` with ``b`` in ``a``'s partners, at most ``partners`` of them."""
        counts = self._co.setdefault(a, {})
        if b in counts:
            counts[b] += g
        elif len(counts) < self._partners:
            counts[b] = g
        elif self._floor.get(a, 0.0) < g:  # counts only grow: a floor at or above g spares the scan
            weakest = min(counts, key=counts.__getitem__)
            if counts[weakest] < g:  # decayed below one fresh co-occurrence: the newcomer takes its slot
                del counts[weakest]
                counts[b] = g  # a hint the evicted partner still holds from a now counts for nothing
            self._floor[a] = min(counts.values())

    def chance(self, partner: int, resource: int, rate: float = 0.0) -> float:
        """The lift of ``P(resource reacts | partner updated)`` over ``resource``'s own ``rate`` (per chronon)."""
        return self._chance(partner, resource, rate, self._gain(self._clock) if self._clock > -math.inf else 1.0)

    def _chance(self, partner: int, resource: int, rate: float, g: float) -> float:
        c = self._co.get(partner, {}).get(resource, 0.0)
        if c < self._min_support * g:
            return 0.0
        p = c / (self._n.get(partner, 0.0) + self._prior * g)
        base = -math.expm1(-(2 * self._lag + 1) * max(rate, 0.0))
        return max(p - base, 0.0) / (1.0 - base) if base < 1.0 else 0.0

    def partners(self, resource: int) -> dict[int, float]:
        """``resource``'s partners and their co-occurrence counts, decayed to the latest chronon seen."""
        g = self._gain(self._clock) if self._clock > -math.inf else 1.0
        return {p: c / g for p, c in self._co.get(resource, {}).items()}

    def hints(
        self, now: int, window: int, resources: Sequence[int] | npt.NDArray[np.int64],
        last_success: Sequence[int | None], rate: Sequence[float] | npt.NDArray[np.float64],
    ) -> npt.NDArray[np.float64]:
        """Per resource, the chance it holds an update its last success missed, from its partners' events.

        ``last_success[i]``: resource ``i``'s last successful probe (``None``: never), ``rate[i]``
        its expected updates per chronon (the allocation's). A hint older than ``window + lag``
        chronons is dropped: the update it points at is past its rules' window. 0 where none.
        """
        n = len(resources)
        if not n == len(last_success) == len(rate):
            raise ValueError("resources, last_success and rate must have the same length")
        out = np.zeros(n)
        if not self._pending or n == 0:
            return out
        lag = self._lag
        stale = now - window - lag
        for feed in [f for f, h in self._pending.items() if not h or max(h.values()) < stale]:
            del self._pending[feed]
        if not self._pending:
            return out
        g = self._gain(self._clock)
        res = np.asarray(resources, dtype=np.int64).reshape(n)
        order = np.argsort(res, kind="stable")
        keys = np.fromiter(self._pending, dtype=np.int64, count=len(self._pending))
        at = np.minimum(np.searchsorted(res[order], keys), n - 1)
        for feed, i in zip(keys.tolist(), order[at].tolist(), strict=True):
            if res[i] != feed:
                continue
            last = last_success[i]
            none = 1.0
            for partner, u in self._pending[feed].items():
                if u >= stale and (last is None or last < u + lag):
                    none *= 1.0 - self._chance(partner, feed, float(rate[i]), g)
            out[i] = 1.0 - none
        return out
