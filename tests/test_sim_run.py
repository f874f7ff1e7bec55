"""The simulation driver: what the engine learns when, and results that re-score to their claims."""

from __future__ import annotations

import pytest

from proxy.core.model import CEI, EI, Budget, Workload
from proxy.core.policies import policy_names
from proxy.sim.generate import GenParams, Reveal, generate
from proxy.sim.run import ReleasedCei, RevealedEi, arrivals, simulate
from proxy.sim.score import check_result, score_schedule


def test_arrivals_split_release_and_later_reveals() -> None:
    wl = Workload(
        chronons=10, budget=Budget(1), resources=3,
        ceis=(
            CEI("a", "p", (EI(0, 2, 4), EI(1, 3, 5))),  # whole CEI at its release 2
            CEI("b", "p", (EI(0, 1, 6), EI(1, 4, 8, 4), EI(2, 5, 9, 4), EI(2, 7, 9, 7)), release=1),
            CEI("c", "q", (EI(1, 6, 6, 6),)),  # reveal == release: known at release, sealed
        ),
    )
    released, revealed = arrivals(wl)
    assert released == {
        2: [ReleasedCei("a", "p", ((0, 2, 4), (1, 3, 5)), sealed=True)],
        1: [ReleasedCei("b", "p", ((0, 1, 6),), sealed=False)],
        6: [ReleasedCei("c", "q", ((1, 6, 6),), sealed=True)],
    }
    assert revealed == {
        4: [RevealedEi("b", 1, 4, 8, seal=False), RevealedEi("b", 2, 5, 9, seal=False)],
        7: [RevealedEi("b", 2, 7, 9, seal=True)],
    }


# S-EDF(P) by hand: K = 4, C = 1.  At t=0 candidates a:[0,0] (value 1) and b:[0,2] (value 3):
# probe r0 (captures a).  t=1: b's EI on r1 [0, 2] value 2, c's [1, 1] on r2 value 1 → probe r2.
# t=2: b → probe r1.  t=3: nothing active.
HAND = Workload(
    chronons=4, budget=Budget(1), resources=3,
    ceis=(CEI("a", "p", (EI(0, 0, 0),)), CEI("b", "p", (EI(1, 0, 2),)), CEI("c", "p", (EI(2, 1, 1),))),
)


def test_s_edf_on_a_hand_made_workload() -> None:
    res = simulate(HAND, "s-edf-p")
    assert res.schedule == ((0, 0), (1, 2), (2, 1))
    assert (res.captured, res.total, res.probes) == (3, 3, 3)
    assert res.completeness == 1.0


def test_round_robin_follows_the_spec_formula() -> None:
    wl = Workload(chronons=3, budget=Budget(2), resources=5, ceis=(CEI("a", "p", (EI(4, 1, 1),)),))
    res = simulate(wl, "round-robin")
    # (t * C + i) mod n for i = 0 .. C-1.
    assert res.schedule == ((0, 0), (0, 1), (1, 2), (1, 3), (2, 4), (2, 0))
    assert res.captured == 0


@pytest.mark.parametrize("reveal", [Reveal.RELEASE, Reveal.UPDATE])
def test_every_policy_rescores_and_agrees_with_the_engine(reveal: Reveal) -> None:
    wl = generate(GenParams(resources=80, profiles=30, chronons=200, lam=10.0, budget=2, reveal=reveal), seed=4)
    for name in policy_names():
        res = simulate(wl, name)
        _, problems = check_result(wl, res.to_file())
        assert problems == [], name
        assert res.extra["engine_captured"] == res.captured, name
        assert all(0 <= t < 200 for t, _ in res.schedule)


def test_optimal_run_reports_its_status() -> None:
    wl = generate(GenParams(resources=40, profiles=15, chronons=120, lam=8.0), seed=2)
    res = simulate(wl, "optimal")
    assert res.extra["status"] == "optimal"
    assert res.extra["objective"] == res.captured
    best_online = max(simulate(wl, p).captured for p in policy_names())
    assert res.captured >= best_online
    lp = simulate(wl, "lp-bound")
    assert lp.extra["status"] == "lp-bound"
    assert float(lp.extra["bound"]) >= res.captured - 1e-6  # type: ignore[arg-type]
    assert score_schedule(wl, lp.schedule).ok


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(LookupError, match="nope"):
        simulate(HAND, "nope")


def test_progress_covers_every_chronon() -> None:
    seen: list[int] = []
    simulate(generate(GenParams(resources=20, profiles=5, chronons=250), seed=0), "mrsf-p", progress=seen.append)
    assert sum(seen) == 250
