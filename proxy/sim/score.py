"""Score a schedule against a workload from the two alone (spec: "Semantics").

This module deliberately does not use the engine or any policy: it is the
independent referee that checks what the engine, the optimum or another
implementation claim.  A probe of ``r`` at ``t`` captures every EI on ``r``
with ``start <= t <= finish``; a CEI is captured when all its EIs are.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from proxy.core.model import Workload
from proxy.sim.workload_io import ResultFile

# The spec's example writes completeness with 4 decimals (812/1590 -> 0.5107).
COMPLETENESS_TOLERANCE = 0.5e-4 + 1e-9


@dataclass(frozen=True, slots=True)
class Score:
    """What a schedule achieves, and every way it breaks the spec's rules."""

    captured: int
    total: int
    completeness: float
    probes: int
    problems: tuple[str, ...]
    captured_ids: frozenset[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def completeness_of(captured: int, total: int) -> float:
    """Captured / total; an empty workload has completeness 0 (nothing was gained)."""
    return captured / total if total else 0.0


def score_schedule(workload: Workload, schedule: Iterable[tuple[int, int]]) -> Score:
    """Re-score ``schedule`` (``(chronon, resource)`` pairs) on ``workload``.

    Probes of unknown resources, at chronons outside ``0..K-1``, repeated
    pairs and chronons over budget are reported in ``problems``; valid probes
    still count towards captures, so a bad schedule gets a meaningful score.
    """
    k, n = workload.chronons, workload.resources
    problems: list[str] = []
    probe_times: dict[int, list[int]] = defaultdict(list)
    per_chronon: Counter[int] = Counter()
    seen: set[tuple[int, int]] = set()
    probes = 0
    for t, r in schedule:
        probes += 1
        if not 0 <= t < k:
            problems.append(f"probe [{t}, {r}]: chronon {t} outside 0..{k - 1}")
            continue
        if not 0 <= r < n:
            problems.append(f"probe [{t}, {r}]: unknown resource {r} (resources are 0..{n - 1})")
            continue
        if (t, r) in seen:
            problems.append(f"probe [{t}, {r}]: listed twice")
            continue
        seen.add((t, r))
        per_chronon[t] += 1
        probe_times[r].append(t)
    for t in sorted(per_chronon):
        cap = workload.budget.at(t)
        if per_chronon[t] > cap:
            problems.append(f"chronon {t}: {per_chronon[t]} probes exceed the budget of {cap}")
    for times in probe_times.values():
        times.sort()

    captured_ids: set[str] = set()
    for cei in workload.ceis:
        for ei in cei.eis:
            hits = probe_times.get(ei.resource)
            if not hits:
                break
            i = bisect_left(hits, ei.start)
            if i == len(hits) or hits[i] > ei.finish:
                break
        else:
            captured_ids.add(cei.id)
    total = len(workload.ceis)
    return Score(
        captured=len(captured_ids),
        total=total,
        completeness=completeness_of(len(captured_ids), total),
        probes=probes,
        problems=tuple(problems),
        captured_ids=frozenset(captured_ids),
    )


def check_result(workload: Workload, result: ResultFile) -> tuple[Score, list[str]]:
    """Re-score ``result.schedule`` and list every rule it breaks or claim that is wrong.

    An empty list means the result is valid and honest.
    """
    score = score_schedule(workload, result.schedule)
    problems = list(score.problems)
    if result.total != score.total:
        problems.append(f"claims total {result.total}, but the workload holds {score.total} CEIs")
    if result.captured != score.captured:
        problems.append(f"claims captured {result.captured}, but the schedule captures {score.captured}")
    if abs(result.completeness - score.completeness) > COMPLETENESS_TOLERANCE:
        problems.append(
            f"claims completeness {result.completeness}, but re-scoring gives {score.completeness:.6f}"
        )
    if result.probes != score.probes:
        problems.append(f"claims {result.probes} probes, but the schedule lists {score.probes}")
    return score, problems
