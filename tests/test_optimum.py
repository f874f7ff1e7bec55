"""The exact optimum: hand-made instances with known answers, and brute force on small random ones."""

from __future__ import annotations

from itertools import combinations, product

import numpy as np
import pytest

from proxy.core.model import CEI, EI, Budget, Workload
from proxy.core.optimum import (
    OptimumStatus,
    OptimumTooLargeError,
    _fits,
    lp_bound,
    optimal,
)
from proxy.sim.score import score_schedule


def _wl(*ceis: CEI, k: int = 6, n: int = 3, budget: Budget | None = None) -> Workload:
    return Workload(chronons=k, budget=budget or Budget(1), resources=n, ceis=ceis)


def _brute_force(wl: Workload) -> int:
    """Best captured count over every schedule: each chronon picks <= C_t resources."""
    per_chronon = []
    for t in range(wl.chronons):
        cap = min(wl.budget.at(t), wl.resources)
        per_chronon.append(list(combinations(range(wl.resources), cap)))
    best = 0
    for choice in product(*per_chronon):
        schedule = [(t, r) for t, rs in enumerate(choice) for r in rs]
        best = max(best, score_schedule(wl, schedule).captured)
    return best


HAND = [
    # Two CEIs both needing resource 0 at the single chronon 2 and other things: one probe serves both.
    (_wl(CEI("a", "p", (EI(0, 2, 2),)), CEI("b", "q", (EI(0, 2, 2),))), 2),
    # Two CEIs need different resources at the same chronon, budget 1: only one.
    (_wl(CEI("a", "p", (EI(0, 2, 2),)), CEI("b", "q", (EI(1, 2, 2),))), 1),
    # ... unless the budget there is 2.
    (_wl(CEI("a", "p", (EI(0, 2, 2),)), CEI("b", "q", (EI(1, 2, 2),)),
         budget=Budget((1, 1, 2, 1, 1, 1))), 2),
    # A rank-3 CEI squeezed into two chronons cannot fit (dropped by the pre-solve).
    (_wl(CEI("a", "p", (EI(0, 1, 2), EI(1, 1, 2), EI(2, 1, 2)))), 0),
    # Greedy-by-deadline trap: "wide" must yield chronon 0 to "narrow" and take chronon 1.
    (_wl(CEI("wide", "p", (EI(0, 0, 1),)), CEI("narrow", "q", (EI(1, 0, 0),)),
         CEI("later", "q", (EI(2, 1, 1),))), 2),
    # Budget 0 where the EI lives.
    (_wl(CEI("a", "p", (EI(0, 0, 1),)), budget=Budget((0, 0, 1, 1, 1, 1))), 0),
]


@pytest.mark.parametrize(("wl", "best"), HAND)
def test_hand_made_optimum(wl: Workload, best: int) -> None:
    res = optimal(wl)
    assert res.status is OptimumStatus.OPTIMAL
    assert res.objective == best
    assert res.bound == best
    assert res.gap == 0.0
    score = score_schedule(wl, res.schedule)
    assert score.ok
    assert score.captured == best
    assert score.captured_ids == res.captured_ids
    assert _brute_force(wl) == best


def test_presolve_drops_what_cannot_fit() -> None:
    wl = _wl(CEI("a", "p", (EI(0, 1, 2), EI(1, 1, 2), EI(2, 1, 2))), CEI("b", "p", (EI(0, 4, 5),)))
    res = optimal(wl)
    assert res.dropped_ceis == 1
    assert res.objective == 1


@pytest.mark.parametrize(
    ("windows", "budget", "fits"),
    [
        ([(0, 0), (0, 0)], [1, 1, 1], False),
        ([(0, 1), (0, 0)], [1, 1, 1], True),
        ([(0, 1), (0, 1), (1, 2)], [1, 1, 1], True),
        ([(0, 1), (0, 1), (1, 1)], [1, 1, 1], False),
        ([(0, 0), (0, 0)], [2, 0, 0], True),
        ([(0, 2)], [0, 0, 0], False),
        ([(0, 0), (2, 2)], [1, 0, 1], True),
    ],
)
def test_fits_is_exact_for_distinct_resources(windows: list[tuple[int, int]], budget: list[int], fits: bool) -> None:
    cei = CEI("c", "p", tuple(EI(i, s, f) for i, (s, f) in enumerate(windows)))
    assert _fits(cei, np.array(budget)) is fits


def test_same_resource_eis_share_a_probe() -> None:
    # Two EIs of one CEI on resource 0 overlap at chronon 3: one probe captures both.
    wl = _wl(CEI("a", "p", (EI(0, 1, 3), EI(0, 3, 5))), CEI("b", "q", (EI(1, 0, 5),)), k=6)
    res = optimal(wl)
    assert res.objective == 2
    assert score_schedule(wl, res.schedule).captured == 2


def _random_workload(rng: np.random.Generator, k: int, n: int, m: int, budget: int) -> Workload:
    ceis = []
    for i in range(m):
        rank = int(rng.integers(1, 4))
        resources = rng.choice(n, size=min(rank, n), replace=False)
        eis = []
        for r in resources:
            s = int(rng.integers(0, k))
            eis.append(EI(int(r), s, min(k - 1, s + int(rng.integers(0, 3)))))
        ceis.append(CEI(f"c{i}", f"p{i % 3}", tuple(eis)))
    return Workload(chronons=k, budget=Budget(budget), resources=n, ceis=tuple(ceis))


@pytest.mark.parametrize("seed", range(12))
def test_matches_brute_force_on_small_random(seed: int) -> None:
    rng = np.random.default_rng(seed)
    wl = _random_workload(rng, k=5, n=3, m=6, budget=1 + seed % 2)
    res = optimal(wl)
    assert res.status is OptimumStatus.OPTIMAL
    assert res.objective == _brute_force(wl)
    assert score_schedule(wl, res.schedule).captured == res.objective


@pytest.mark.parametrize("seed", range(6))
def test_lp_bound_brackets_the_optimum(seed: int) -> None:
    wl = _random_workload(np.random.default_rng(100 + seed), k=12, n=5, m=15, budget=1)
    opt = optimal(wl)
    lp = lp_bound(wl)
    assert lp.status is OptimumStatus.LP
    assert lp.bound >= opt.objective - 1e-6
    # The rounded schedule is feasible and cannot beat the optimum.
    score = score_schedule(wl, lp.schedule)
    assert score.ok
    assert score.captured == lp.objective <= opt.objective


def test_refuses_too_large_saying_so() -> None:
    wl = _wl(CEI("a", "p", (EI(0, 0, 5),)), CEI("b", "p", (EI(1, 0, 5),)))
    with pytest.raises(OptimumTooLargeError, match="needs 12 probe variables, more than the allowed 10"):
        optimal(wl, max_variables=10)


def test_empty_workload() -> None:
    res = optimal(_wl())
    assert (res.objective, res.bound, res.schedule, res.status) == (0, 0.0, (), OptimumStatus.OPTIMAL)


@pytest.mark.parametrize("solver", [optimal, lp_bound])
def test_time_limit_reports_an_honest_bracket(solver: object) -> None:
    # A W=0, rank-3 instance is hard for HiGHS; a zero time limit stops it at once.
    from proxy.sim.generate import GenParams, generate

    wl = generate(GenParams(resources=300, profiles=60, chronons=300, window=0, exact_rank=True), seed=0)
    res = solver(wl, time_limit=0.0)  # type: ignore[operator]
    score = score_schedule(wl, res.schedule)
    assert score.ok
    assert score.captured >= res.objective
    assert res.bound >= res.objective
    if res.status is OptimumStatus.TIME_LIMIT:
        assert res.gap > 0 or res.bound == res.objective
        assert not res.proven
    else:
        assert res.status in (OptimumStatus.OPTIMAL, OptimumStatus.LP)
