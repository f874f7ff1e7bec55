"""The monitoring model of the main paper (Roitman, Gal, Raschid, §2).

Resources are integers ``0 .. n-1``, chronons are integers ``0 .. K-1``.  A
complex execution interval (CEI) is a set of simple execution intervals (EIs);
it is captured when every one of its EIs is captured, and an EI on resource
``r`` is captured by a probe of ``r`` at any chronon ``start <= t <= finish``.

These types mirror ``shared/spec/workload-format.md`` one to one.  They are
immutable values: the engine keeps its own mutable, columnar state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


class WorkloadError(ValueError):
    """A workload violates the interchange format; the message names the offending CEI."""


@dataclass(frozen=True, slots=True)
class EI:
    """A simple execution interval: probe ``resource`` at some chronon in ``[start, finish]``.

    ``reveal`` is the first chronon at which an online policy may know the EI;
    ``None`` means "with its CEI's release".
    """

    resource: int
    start: int
    finish: int
    reveal: int | None = None

    def width(self) -> int:
        return self.finish - self.start + 1


@dataclass(frozen=True, slots=True)
class CEI:
    """A complex execution interval of one profile: captured when all its EIs are."""

    id: str
    profile: str
    eis: tuple[EI, ...]
    release: int | None = None

    @property
    def effective_release(self) -> int:
        """The spec's default release is the smallest start of the CEI's EIs."""
        if self.release is not None:
            return self.release
        return min(ei.start for ei in self.eis)

    def reveal_of(self, ei: EI) -> int:
        """When ``ei`` becomes known: its own reveal, else the CEI's release."""
        return ei.reveal if ei.reveal is not None else self.effective_release


@dataclass(frozen=True, slots=True)
class Budget:
    """Probes allowed per chronon: one integer for every chronon, or one per chronon."""

    per_chronon: int | tuple[int, ...]

    def at(self, t: int) -> int:
        if isinstance(self.per_chronon, int):
            return self.per_chronon
        return self.per_chronon[t]

    def to_json(self) -> int | list[int]:
        if isinstance(self.per_chronon, int):
            return self.per_chronon
        return list(self.per_chronon)


@dataclass(frozen=True, slots=True)
class Workload:
    """One epoch of a monitoring problem (spec: "Workload file")."""

    chronons: int
    budget: Budget
    resources: int
    ceis: tuple[CEI, ...]
    meta: dict[str, object] = field(default_factory=dict, compare=False)

    def validate(self) -> None:
        """Raise :class:`WorkloadError` naming the first CEI that breaks the spec's rules."""
        k, n = self.chronons, self.resources
        if k <= 0:
            raise WorkloadError(f"chronons must be positive, got {k}")
        if n <= 0:
            raise WorkloadError(f"resources must be positive, got {n}")
        pc = self.budget.per_chronon
        if isinstance(pc, int):
            if pc < 0:
                raise WorkloadError(f"budget must be >= 0, got {pc}")
        else:
            if len(pc) != k:
                raise WorkloadError(f"budget list has {len(pc)} entries, expected chronons={k}")
            if any(c < 0 for c in pc):
                raise WorkloadError("budget list holds a negative entry")
        seen: set[str] = set()
        for cei in self.ceis:
            if cei.id in seen:
                raise WorkloadError(f"CEI {cei.id!r}: duplicate id")
            seen.add(cei.id)
            if not cei.eis:
                raise WorkloadError(f"CEI {cei.id!r}: has no EIs")
            if cei.release is not None and not 0 <= cei.release <= k - 1:
                raise WorkloadError(f"CEI {cei.id!r}: release {cei.release} outside 0..{k - 1}")
            for i, ei in enumerate(cei.eis):
                where = f"CEI {cei.id!r}, EI #{i} {_ei_text(ei)}"
                if not 0 <= ei.resource < n:
                    raise WorkloadError(f"{where}: unknown resource {ei.resource} (resources are 0..{n - 1})")
                if not (0 <= ei.start <= k - 1 and 0 <= ei.finish <= k - 1):
                    raise WorkloadError(f"{where}: outside chronons 0..{k - 1}")
                if ei.start > ei.finish:
                    raise WorkloadError(f"{where}: start {ei.start} > finish {ei.finish}")
                if ei.reveal is not None:
                    if ei.reveal < cei.effective_release:
                        raise WorkloadError(
                            f"{where}: reveal {ei.reveal} before the CEI's release {cei.effective_release}"
                        )
                    if ei.reveal > k - 1:
                        raise WorkloadError(f"{where}: reveal {ei.reveal} outside 0..{k - 1}")

    @property
    def total_eis(self) -> int:
        return sum(len(c.eis) for c in self.ceis)


def _ei_text(ei: EI) -> str:
    parts: Sequence[int] = (ei.resource, ei.start, ei.finish) if ei.reveal is None else (
        ei.resource, ei.start, ei.finish, ei.reveal)
    return "[" + ", ".join(str(p) for p in parts) + "]"
