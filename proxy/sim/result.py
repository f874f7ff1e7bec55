"""One policy's run over one workload, scored: what :mod:`proxy.sim.run` (pushed EIs) and
:mod:`proxy.sim.pull` (EIs found by probes) both return.

Its own module so that neither simulator imports the other for it: ``run`` dispatches
to ``pull``, and ``pull`` needs only the result (issue 46: no import circle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from proxy.core.model import Workload
from proxy.sim.score import score_schedule
from proxy.sim.workload_io import ResultFile

__all__ = ["Result", "result_of"]


@dataclass(frozen=True, slots=True)
class Result:
    """One policy's run over one workload."""

    policy: str
    schedule: tuple[tuple[int, int], ...]
    captured: int
    total: int
    completeness: float
    probes: int
    runtime_s: float
    extra: dict[str, object] = field(default_factory=dict)

    def to_file(self) -> ResultFile:
        meta: dict[str, object] = {"runtime_s": round(self.runtime_s, 6), **self.extra}
        return ResultFile(
            policy=self.policy, captured=self.captured, total=self.total,
            completeness=self.completeness, probes=self.probes, schedule=self.schedule, meta=meta,
        )


def result_of(
    workload: Workload, policy: str, schedule: Sequence[tuple[int, int]], runtime: float,
    extra: dict[str, object],
) -> Result:
    """Score ``schedule`` with the independent scorer; an invalid one is a bug, raised."""
    score = score_schedule(workload, schedule)
    if not score.ok:
        # A policy or solver broke the rules: that is a bug, not a result.
        raise RuntimeError(f"{policy} produced an invalid schedule: {'; '.join(score.problems[:5])}")
    return Result(
        policy=policy, schedule=tuple(schedule), captured=score.captured, total=score.total,
        completeness=score.completeness, probes=score.probes, runtime_s=runtime, extra=extra,
    )
