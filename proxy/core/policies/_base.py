"""What a policy sees of the engine, and what it must return.

A policy is a pure function of the engine's candidate pool at one chronon:
it reads columnar numpy views (:class:`Candidates`) and a few per-CEI
look-ups through :class:`PoolView`, and returns resource ids in priority
order.  It never changes capture state and keeps no state between chronons
(so one instance may serve many engines).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]


class Preemption(enum.Enum):
    """Main paper §3.1: a non-preemptive policy serves CEIs it already started first."""

    PREEMPTIVE = "p"
    NON_PREEMPTIVE = "np"


@dataclass(frozen=True, slots=True)
class Candidates:
    """Candidate EIs at chronon ``t``, one row per EI (columnar, equal lengths).

    ``cei`` holds engine-internal CEI slots, only meaningful to pass back to
    the :class:`PoolView` that produced these candidates.
    """

    t: int
    resource: IntArray
    start: IntArray
    finish: IntArray
    cei: IntArray
    #: An upper bound on ``finish`` (every candidate is active, so ``t`` is a lower bound).
    finish_bound: int

    def __len__(self) -> int:
        return int(self.resource.shape[0])


class PoolView(Protocol):
    """Read-only access to the engine's pool at its current chronon."""

    @property
    def now(self) -> int: ...

    @property
    def resources(self) -> int: ...

    def cei_candidates(self) -> Candidates:
        """Active, known, uncaptured EIs of CEIs that are not dead (spec step 3)."""
        ...

    def wic_candidates(self) -> Candidates:
        """Active, known, uncaptured EIs of every CEI, dead ones included (WIC knows no CEIs)."""
        ...

    def remaining(self, cei: IntArray) -> IntArray:
        """Known uncaptured EIs of each CEI slot (MRSF's value)."""
        ...

    def captured_count(self, cei: IntArray) -> IntArray:
        """Known captured EIs of each CEI slot."""
        ...

    def not_started(self, cei: IntArray) -> IntArray:
        """1 for CEI slots without a known captured EI, else 0: the -np policies' group."""
        ...

    def medf_value(self, cei: IntArray) -> IntArray:
        """Sum over known uncaptured EIs of ``finish - max(now, start) + 1`` (M-EDF's value)."""
        ...

    def id_keys(self, cei: IntArray) -> tuple[U64Array, U64Array]:
        """Order-preserving keys of the first 16 UTF-8 bytes of each CEI id (ties need :meth:`ids`)."""
        ...

    def id_head(self, cei: IntArray) -> U64Array:
        """The first of :meth:`id_keys` alone (the first 8 UTF-8 bytes)."""
        ...

    def ids(self, cei: Sequence[int]) -> list[str]:
        """The CEI ids of the given slots."""
        ...

    def capture_share(self) -> float | None:
        """Captured share of the CEIs resolved lately (``None`` until enough are resolved): the load so far."""
        ...


class Policy(abc.ABC):
    """An online policy: picks at most ``budget`` distinct resources, best first."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The spec's name of the policy, e.g. ``mrsf-p``."""

    @abc.abstractmethod
    def select(self, pool: PoolView, budget: int, blocked: Container[int]) -> list[int]:
        """Resources to probe now, in priority order; none of them in ``blocked``."""

    def __repr__(self) -> str:
        return f"<policy {self.name}>"
