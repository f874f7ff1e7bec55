"""S-EDF, MRSF and M-EDF (main paper §3.1), each preemptive or not.

They differ only in the value of a candidate EI (spec step 4); grouping,
tie-break and walk are shared (:mod:`proxy.core.policies._ordering`).
"""

from __future__ import annotations

import abc
from collections.abc import Container

from proxy.core.policies._base import Candidates, IntArray, Policy, PoolView, Preemption
from proxy.core.policies._ordering import select_by_key


class CeiPolicy(Policy):
    """A policy that ranks candidate EIs by a value and the spec's tie-break key."""

    family: str = ""

    def __init__(self, preemption: Preemption) -> None:
        self.preemption = preemption

    @property
    def name(self) -> str:
        return f"{self.family}-{self.preemption.value}"

    @abc.abstractmethod
    def value(self, pool: PoolView, cands: Candidates) -> IntArray:
        """Spec step 4: one value per candidate (a fresh array), smaller is better."""

    def sort_value(self, pool: PoolView, cands: Candidates) -> IntArray | None:
        """What to sort by: :meth:`value`, or None when it orders exactly like ``finish``."""
        return self.value(pool, cands)

    def select(self, pool: PoolView, budget: int, blocked: Container[int]) -> list[int]:
        if budget <= 0:
            return []
        cands = pool.cei_candidates()
        if len(cands) == 0:
            return []
        group: IntArray | None = None
        if self.preemption is Preemption.NON_PREEMPTIVE:
            # main paper §3.1: CEIs with a captured EI are served before new ones.
            group = pool.not_started(cands.cei)
        return select_by_key(pool, cands, group, self.sort_value(pool, cands), budget, blocked)


class SEdf(CeiPolicy):
    """Single-interval EDF: the EI's own remaining chronons, ``finish - t + 1``."""

    family = "s-edf"

    def value(self, pool: PoolView, cands: Candidates) -> IntArray:
        return cands.finish - (cands.t - 1)

    def sort_value(self, pool: PoolView, cands: Candidates) -> IntArray | None:
        return None  # finish - t + 1 orders like finish: no need to pack it twice


class Mrsf(CeiPolicy):
    """Minimal residual stub first: known uncaptured EIs left in the parent CEI."""

    family = "mrsf"

    def value(self, pool: PoolView, cands: Candidates) -> IntArray:
        return pool.remaining(cands.cei)


class MEdf(CeiPolicy):
    """Multi-interval EDF: remaining chronons summed over the CEI's known uncaptured EIs."""

    family = "m-edf"

    def value(self, pool: PoolView, cands: Candidates) -> IntArray:
        return pool.medf_value(cands.cei)
