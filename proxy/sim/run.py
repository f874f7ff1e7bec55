"""Drive the one engine over a workload, chronon by chronon, as the live loop would.

For ``t`` in ``0..K-1``: ``engine.advance(t)``; ``add_cei`` for the CEIs
released at ``t`` with the EIs known then (sealed unless some EI is revealed
later); ``reveal_ei`` for EIs revealed at ``t`` (the last one seals its CEI);
``select(C_t, policy)``; ``probe`` the chosen resources and record ``[t, r]``.

The offline names ``optimal`` and ``lp-bound`` solve the whole workload with
:mod:`proxy.core.optimum` instead.  Captures are counted by the independent
scorer (:mod:`proxy.sim.score`), never taken from the engine's word; the
engine's own count is kept beside it so a disagreement shows.

Deliberately not here: workload generation or file I/O.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.core.model import Workload
from proxy.sim.result import Result, result_of

if TYPE_CHECKING:
    from proxy.sim.pull import PullOptions

__all__ = ["OFFLINE", "Result", "arrivals", "simulate"]

OFFLINE = ("optimal", "lp-bound")


@dataclass(frozen=True, slots=True)
class ReleasedCei:
    """A CEI handed to the engine at its release, with the EIs known then."""

    cei_id: str
    profile: str
    eis: tuple[tuple[int, int, int], ...]
    sealed: bool


@dataclass(frozen=True, slots=True)
class RevealedEi:
    """An EI that becomes known after its CEI's release (spec: 4-element EIs)."""

    cei_id: str
    resource: int
    start: int
    finish: int
    seal: bool


def arrivals(workload: Workload) -> tuple[dict[int, list[ReleasedCei]], dict[int, list[RevealedEi]]]:
    """What the engine learns at each chronon, in file order."""
    released: dict[int, list[ReleasedCei]] = defaultdict(list)
    revealed: dict[int, list[RevealedEi]] = defaultdict(list)
    for cei in workload.ceis:
        eis = cei.eis
        if cei.release is None and all(e.reveal is None for e in eis):
            # The common case (the paper's setup): the whole CEI at its first start.
            released[min(e.start for e in eis)].append(
                ReleasedCei(cei.id, cei.profile, tuple((e.resource, e.start, e.finish) for e in eis), True)
            )
            continue
        rel = cei.effective_release
        reveals = [rel if e.reveal is None else e.reveal for e in eis]
        now = tuple((e.resource, e.start, e.finish) for e, v in zip(eis, reveals, strict=True) if v <= rel)
        later = sorted((v, i) for i, v in enumerate(reveals) if v > rel)
        released[rel].append(ReleasedCei(cei.id, cei.profile, now, sealed=not later))
        for j, (t, i) in enumerate(later):
            e = eis[i]
            revealed[t].append(RevealedEi(cei.id, e.resource, e.start, e.finish, seal=j == len(later) - 1))
    if revealed:
        # File order of CEIs within a chronon, as for releases.
        order = {c.id: i for i, c in enumerate(workload.ceis)}
        for events in revealed.values():
            events.sort(key=lambda ev: order[ev.cei_id])
    return released, revealed


def simulate(
    workload: Workload,
    policy_name: str,
    *,
    time_limit: float | None = None,
    max_variables: int | None = None,
    progress: Callable[[int], None] | None = None,
    reveal: str = "pushed",
    pull: PullOptions | None = None,
) -> Result:
    """Run ``policy_name`` (online, or ``optimal``/``lp-bound``) over ``workload``.

    ``progress`` is called with the number of chronons just completed.
    ``time_limit`` and ``max_variables`` (refuse larger models) apply to the
    offline solvers only. ``reveal="pull"``: update EIs are known only when a
    probe finds them (:func:`proxy.sim.pull.simulate_pull`, with ``pull``'s
    options); the offline solvers ignore it (they see everything anyway).
    ``sup`` and ``fbsup`` are pull-only planners and imply ``reveal="pull"``.
    """
    from proxy.sim.pull import PLANNERS, simulate_pull

    if reveal not in ("pushed", "pull"):
        raise ValueError(f"reveal must be 'pushed' or 'pull', got {reveal!r}")
    if policy_name not in OFFLINE and (reveal == "pull" or policy_name in PLANNERS):
        return simulate_pull(workload, policy_name, pull, progress=progress)
    if policy_name in OFFLINE:
        return _offline(workload, policy_name, time_limit, max_variables)
    from proxy.core.engine import Engine
    from proxy.core.policies import get_policy

    get_policy(policy_name)  # fail on an unknown name before any work
    began = time.perf_counter()
    released, revealed = arrivals(workload)
    engine = Engine(resources=workload.resources)
    schedule: list[tuple[int, int]] = []
    step = max(1, workload.chronons // 100)
    for t in range(workload.chronons):
        engine.advance(t)
        for rc in released.get(t, ()):
            engine.add_cei(rc.cei_id, rc.profile, rc.eis, sealed=rc.sealed)
        for ev in revealed.get(t, ()):
            engine.reveal_ei(ev.cei_id, ev.resource, ev.start, ev.finish, seal=ev.seal)
        chosen = engine.select(workload.budget.at(t), policy_name)
        engine.probe(chosen)
        engine.drain_events()  # the simulator scores independently; keep memory flat
        schedule.extend((t, int(r)) for r in chosen)
        if progress is not None and ((t + 1) % step == 0 or t + 1 == workload.chronons):
            progress(step if (t + 1) % step == 0 else (t + 1) % step)
    runtime = time.perf_counter() - began
    extra: dict[str, object] = {}
    engine_captured = _engine_captured(engine)
    if engine_captured is not None:
        extra["engine_captured"] = engine_captured
    return result_of(workload, policy_name, schedule, runtime, extra)


def _engine_captured(engine: object) -> int | None:
    from proxy.core.engine import CeiState

    captured = getattr(CeiState, "CAPTURED", None)
    if captured is None:
        return None
    counts = engine.counts()  # type: ignore[attr-defined]
    return int(counts.get(captured, 0))


def _offline(
    workload: Workload, name: str, time_limit: float | None, max_variables: int | None
) -> Result:
    from proxy.core.optimum import DEFAULT_MAX_VARIABLES, lp_bound, optimal

    began = time.perf_counter()
    solve = optimal if name == "optimal" else lp_bound
    res = solve(workload, time_limit=time_limit, max_variables=max_variables or DEFAULT_MAX_VARIABLES)
    runtime = time.perf_counter() - began
    extra: dict[str, object] = {
        "status": str(res.status),
        "objective": res.objective,
        "bound": round(res.bound, 6),
        "gap": round(res.gap, 6),
        "variables": res.variables,
        "constraints": res.constraints,
        "dropped_ceis": res.dropped_ceis,
    }
    return result_of(workload, name, list(res.schedule), runtime, extra)


