"""A deliberately naive, obviously-correct implementation of the spec's named policies.

Every chronon it recomputes everything from the whole workload, straight from
``shared/spec/workload-format.md`` ("Exact semantics of the named policies").
It is slow on purpose: it exists to be compared with :class:`proxy.core.engine.Engine`.

Also here: :func:`run_engine`, the simulator's documented driver loop over the
real engine, and :func:`rescore`, an independent count of captured CEIs from
a schedule.
"""

from __future__ import annotations

from collections import defaultdict

from proxy.core.engine import Engine
from proxy.core.model import CEI, EI, Workload

CEI_POLICIES = ("s-edf-np", "s-edf-p", "mrsf-np", "mrsf-p", "m-edf-np", "m-edf-p")
ALL_POLICIES = (*CEI_POLICIES, "wic", "round-robin")


def reference_schedule(w: Workload, policy: str) -> list[tuple[int, int]]:
    """The schedule ``[(t, r), ...]`` the spec prescribes for ``policy`` on ``w``."""
    captured: set[tuple[int, int]] = set()  # (CEI index, EI index)
    schedule: list[tuple[int, int]] = []
    for t in range(w.chronons):
        budget = w.budget.at(t)
        chosen = _choose(w, policy, t, budget, captured)
        assert len(chosen) == len(set(chosen)) <= budget
        for r in chosen:
            schedule.append((t, r))
            # Step 7: every active EI on r, known or not, is captured.
            for ci, c in enumerate(w.ceis):
                for j, ei in enumerate(c.eis):
                    if ei.resource == r and ei.start <= t <= ei.finish:
                        captured.add((ci, j))
    return schedule


def _choose(w: Workload, policy: str, t: int, budget: int, captured: set[tuple[int, int]]) -> list[int]:
    def known(c: CEI, ei: EI) -> bool:
        return c.reveal_of(ei) <= t

    if policy == "round-robin":
        out: list[int] = []
        for i in range(budget):
            r = (t * budget + i) % w.resources
            if r not in out:
                out.append(r)
        return out

    if policy == "wic":
        pairs: dict[int, set[tuple[int, int]]] = defaultdict(set)
        for ci, c in enumerate(w.ceis):
            for j, ei in enumerate(c.eis):
                if known(c, ei) and ei.start <= t <= ei.finish and (ci, j) not in captured:
                    pairs[ei.resource].add((ei.start, ei.finish))
        ranked = sorted(pairs, key=lambda r: (-len(pairs[r]), r))
        return ranked[:budget]

    family, _, mode = policy.rpartition("-")
    rows: list[tuple[int, int, int, str, int]] = []
    for ci, c in enumerate(w.ceis):
        known_eis = [(j, ei) for j, ei in enumerate(c.eis) if known(c, ei)]
        uncaptured = [ei for j, ei in known_eis if (ci, j) not in captured]
        if any(ei.finish < t for ei in uncaptured):
            continue  # dead (step 2)
        group = 0 if mode == "p" or len(uncaptured) < len(known_eis) else 1
        for ei in uncaptured:
            if not ei.start <= t <= ei.finish:
                continue
            if family == "s-edf":
                value = ei.finish - t + 1
            elif family == "mrsf":
                value = len(uncaptured)
            elif family == "m-edf":
                value = sum(u.finish - max(t, u.start) + 1 for u in uncaptured)
            else:
                raise ValueError(policy)
            rows.append((group, value, ei.finish, c.id, ei.resource))
    rows.sort()
    out = []
    for row in rows:
        if len(out) == budget:
            break
        if row[4] not in out:
            out.append(row[4])
    return out


def rescore(w: Workload, schedule: list[tuple[int, int]]) -> int:
    """Captured CEIs of ``w`` under ``schedule``, counted from scratch."""
    probes = set(schedule)
    return sum(
        all(any((t, ei.resource) in probes for t in range(ei.start, ei.finish + 1)) for ei in c.eis)
        for c in w.ceis
    )


def run_engine(w: Workload, policy: str, engine: Engine | None = None) -> tuple[list[tuple[int, int]], Engine]:
    """Drive an :class:`Engine` through ``w`` exactly as the simulator does."""
    eng = engine if engine is not None else Engine(w.resources)
    released: dict[int, list[CEI]] = defaultdict(list)
    reveals: dict[int, list[tuple[CEI, EI, bool]]] = defaultdict(list)
    for c in w.ceis:
        rel = c.effective_release
        released[rel].append(c)
        later = sorted((c.reveal_of(ei), j) for j, ei in enumerate(c.eis) if c.reveal_of(ei) > rel)
        for n, (when, j) in enumerate(later):
            reveals[when].append((c, c.eis[j], n == len(later) - 1))
    schedule: list[tuple[int, int]] = []
    for t in range(w.chronons):
        eng.advance(t)
        for c in released.get(t, ()):
            now_known = [(ei.resource, ei.start, ei.finish) for ei in c.eis if c.reveal_of(ei) <= t]
            eng.add_cei(c.id, c.profile, now_known, sealed=len(now_known) == len(c.eis))
        for c, ei, last in reveals.get(t, ()):
            eng.reveal_ei(c.id, ei.resource, ei.start, ei.finish, seal=last)
        chosen = eng.select(w.budget.at(t), policy)
        eng.probe(chosen)
        schedule.extend((t, r) for r in chosen)
    return schedule, eng
