"""adm-edf: admission by completability, probes by earliest deadline (proxy.core.policies._cover)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.engine import CeiState, Engine
from proxy.core.model import CEI, EI, Budget, Workload
from proxy.core.optimum import OptimumStatus, optimal
from proxy.core.policies import AdmissionEdf, get_policy, policy_names
from proxy.core.policies._cover import Execution, _probe_now
from proxy.sim.generate import GenParams, generate
from proxy.sim.run import simulate
from proxy.sim.score import score_schedule


def test_registered_under_its_own_name() -> None:
    assert "adm-edf" in policy_names()
    pol = get_policy("adm-edf")
    assert isinstance(pol, AdmissionEdf)
    assert pol.name == "adm-edf"


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="scan must be >= 1"):
        AdmissionEdf(scan=0)
    with pytest.raises(ValueError, match="horizon must be >= 0"):
        AdmissionEdf(horizon=-1)
    with pytest.raises(ValueError, match=r"long_horizon must be between 0 and horizon \(20\) or None, got 21"):
        AdmissionEdf(long_horizon=21)
    with pytest.raises(ValueError, match="long_horizon needs a horizon"):
        AdmissionEdf(horizon=None)
    assert AdmissionEdf(horizon=None, long_horizon=None).horizon is None
    for bad in (0.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="light_load must be in"):
            AdmissionEdf(light_load=bad)
    for bad in (1.2, -0.1):
        with pytest.raises(ValueError, match="heavy_horizon must be in"):
            AdmissionEdf(heavy_horizon=bad)
    with pytest.raises(ValueError, match="heavy_load must be in"):
        AdmissionEdf(heavy_load=0.0)


@pytest.mark.parametrize(
    ("jobs", "budget", "expected"),
    [
        # Rank order when nothing admitted would miss its deadline.
        ({7: 14, 3: 12, 5: 13}, 1, [7]),
        ({7: 14, 3: 12, 5: 13}, 2, [7, 3]),
        ({7: 15, 3: 11}, 1, [7]),  # 3 can still go at 11
        # A job due now goes first.
        ({7: 15, 3: 10}, 1, [3]),
        # Two jobs due by 11 and one probe per chronon: taking 7 now would
        # make 3 or 4 miss, so the best-ranked of those goes.
        ({7: 15, 3: 11, 4: 11}, 1, [3]),
        ({7: 13, 3: 11, 5: 11, 9: 13}, 1, [3]),
        ({1: 10}, 3, [1]),
    ],
)
def test_probe_now_takes_rank_order_unless_a_deadline_forbids(
    jobs: dict[int, int], budget: int, expected: list[int]
) -> None:
    assert _probe_now(jobs, 10, budget, 8) == expected


def urgent_vs_closest() -> Engine:
    """At t=5, C=1: a 2-EI CEI whose EI on r0 ends now, a 1-EI CEI on r1 that can wait until 9."""
    eng = Engine(3)
    eng.advance(5)
    eng.add_cei("a", "p", [(0, 5, 5), (2, 20, 22)])
    eng.add_cei("b", "p", [(1, 5, 9)])
    return eng


@pytest.mark.parametrize("execution", list(Execution))
def test_defers_the_ei_with_slack_that_mrsf_would_take(execution: Execution) -> None:
    eng = urgent_vs_closest()
    assert eng.select(1, "mrsf-p") == [1]  # fewest remaining EIs first
    # Both fit: the one due now goes first, the other waits.
    assert eng.select(1, AdmissionEdf(execution=execution)) == [0]


@pytest.mark.parametrize(("policy", "captured"), [("adm-edf", 2), ("mrsf-p", 1)])
def test_both_ceis_captured_where_mrsf_loses_one(policy: str, captured: int) -> None:
    eng = urgent_vs_closest()
    for t in range(5, 23):
        eng.advance(t)
        eng.probe(eng.select(1, policy))
    assert eng.counts()[CeiState.CAPTURED] == captured


def test_admission_prefers_fewest_remaining_when_not_both_fit() -> None:
    eng = Engine(3)
    eng.advance(5)
    eng.add_cei("a", "p", [(0, 5, 5), (2, 20, 22)])
    eng.add_cei("b", "p", [(1, 5, 5)])
    # Both due now, C=1: only one fits; the CEI one probe completes wins.
    assert eng.select(1, "adm-edf") == [1]
    assert eng.select(2, "adm-edf") == [1, 0]  # best ranked first


def test_one_probe_serves_every_ei_on_a_resource() -> None:
    eng = Engine(3)
    eng.advance(0)
    eng.add_cei("a", "p", [(0, 0, 3)])
    eng.add_cei("b", "p", [(0, 0, 1)])
    eng.add_cei("c", "p", [(1, 0, 1)])
    # r0's probe serves two CEIs (each counts 1/2 of an EI), r1's one.
    assert eng.select(1, "adm-edf") == [0]
    assert eng.select(2, "adm-edf") == [0, 1]
    assert eng.select(2, "adm-edf", exclude={0}) == [1]


def five_cheap_and_one_urgent(life: int) -> Engine:
    """At t=1, C=1: five 1-EI CEIs living ``life`` chronons, and a 2-EI CEI whose EI on r5 ends now.

    r0 was probed at t=0, so four cheap CEIs (r1..r4) are left.
    """
    eng = Engine(7)
    eng.advance(0)
    for r in range(5):
        eng.add_cei(f"a{r}", "p", [(r, 0, life)])
    eng.add_cei("b", "q", [(5, 0, 1), (6, 0, life)])
    eng.probe([0])
    eng.advance(1)
    return eng


def test_long_lived_candidates_trust_only_the_long_horizon() -> None:
    # Overwrite-style lives (median 100 > horizon 20): the horizon is 4, so
    # the four cheap CEIs fill it, "b" is not admitted and the best-ranked goes.
    eng = five_cheap_and_one_urgent(100)
    assert eng.select(1, "adm-edf") == [1]
    # Without the switch every job is due by t+20: "b" fits, and r5 must go now.
    assert eng.select(1, AdmissionEdf(long_horizon=None)) == [5]


def test_window_lives_keep_the_full_horizon() -> None:
    # Lives of 15 (median 15 <= 20): the switch stays off, "b" fits, r5 goes now.
    eng = five_cheap_and_one_urgent(15)
    assert eng.select(1, "adm-edf") == [5]
    assert eng.select(1, AdmissionEdf(long_horizon=None)) == [5]


def resolved_at_zero(resources: int, captured: int, missed: int) -> Engine:
    """An engine at t=1 whose ``captured`` and ``missed`` one-EI CEIs resolved at t=0.

    They sit on the last two resources (captured on the last one).
    """
    eng = Engine(resources)
    eng.advance(0)
    for i in range(captured):
        eng.add_cei(f"c{i}", "p", [(resources - 1, 0, 0)])
    for i in range(missed):
        eng.add_cei(f"m{i}", "p", [(resources - 2, 0, 0)])
    eng.probe([resources - 1])
    eng.advance(1)
    return eng


def after_resolving(captured: int, missed: int, life: int = 8) -> Engine:
    """At t=1, C=1, after ``captured`` and ``missed`` CEIs resolved at t=0.

    Then CEI "a" (two EIs: r0 due at 3, r4 later) and CEI "b" (one EI on r1,
    due at ``1 + life``): "b" ranks first, and both fit whichever goes first.
    """
    eng = resolved_at_zero(7, captured, missed)
    eng.add_cei("a", "q", [(0, 1, 3), (4, 6, 6 + life)])
    eng.add_cei("b", "q", [(1, 1, 1 + life)])
    return eng


def test_light_load_probes_earliest_deadline_first() -> None:
    eng = after_resolving(captured=60, missed=0)
    assert eng.capture_share() == 1.0
    assert eng.select(1, "adm-edf") == [0]  # EDF: r0 is due first
    assert eng.select(1, AdmissionEdf(light_load=None)) == [1]  # rank order
    # Long lives (median 100 > horizon): the long-life switch keeps rank order.
    assert after_resolving(captured=60, missed=0, life=100).select(1, "adm-edf") == [1]


def test_overload_keeps_rank_order() -> None:
    eng = after_resolving(captured=30, missed=30)
    assert eng.capture_share() == pytest.approx(0.5, abs=0.02)
    assert eng.select(1, "adm-edf") == [1]
    # Too little history to judge the load: rank order too.
    assert after_resolving(captured=10, missed=0).select(1, "adm-edf") == [1]


def eight_cheap_and_one_urgent() -> Engine:
    """At t=0, C=1: eight 1-EI CEIs due at 9, and a 2-EI CEI due now on r10 and at 9 on r11."""
    eng = Engine(12)
    eng.advance(0)
    for r in range(1, 9):
        eng.add_cei(f"a{r}", "p", [(r, 0, 9)])
    eng.add_cei("b", "q", [(10, 0, 0), (11, 0, 9)])
    return eng


def test_under_load_only_part_of_the_window_is_trusted() -> None:
    # Nothing resolved yet, so no sign of light load: the horizon is 0.8 of
    # the median life (9), i.e. 7.  The eight cheap CEIs fill it, "b" is
    # not admitted, and the best-ranked goes.
    eng = eight_cheap_and_one_urgent()
    assert eng.capture_share() is None
    assert eng.select(1, "adm-edf") == [1]
    # Trusting the whole window (9 chronons), "b" fits and r10 must go now.
    assert eng.select(1, AdmissionEdf(heavy_horizon=None)) == [10]


def three_cheap_and_one_costly(captured: int, missed: int) -> Engine:
    """At t=1, C=1: three 1-EI CEIs due at 5, and a 3-EI CEI whose first EI (r10) ends now."""
    eng = resolved_at_zero(22, captured, missed)
    for r in (1, 2, 3):
        eng.add_cei(f"a{r}", "q", [(r, 1, 5)])
    eng.add_cei("e", "q", [(10, 1, 1), (11, 3, 5), (12, 4, 6)])
    return eng


def test_heavy_load_gives_up_the_costliest_ceis() -> None:
    # 10 of 60 resolved CEIs captured: heavy load.  "e" still needs three EIs
    # (max(3, median 1 + 1)), so it is not admitted and the best-ranked goes.
    eng = three_cheap_and_one_costly(captured=10, missed=50)
    share = eng.capture_share()
    assert share is not None and share < 0.7
    assert eng.select(1, "adm-edf") == [1]
    # Admitted, "e"'s first EI would force the probe now.
    assert eng.select(1, AdmissionEdf(heavy_load=None)) == [10]
    # Not under heavy load (too little history to tell): "e" is admitted.
    assert three_cheap_and_one_costly(captured=10, missed=0).select(1, "adm-edf") == [10]


def test_spare_budget_still_probes() -> None:
    eng = Engine(4)
    eng.add_cei("a", "p", [(3, 0, 9)])
    eng.add_cei("b", "p", [(2, 0, 9)])
    assert sorted(eng.select(4, "adm-edf")) == [2, 3]
    assert eng.select(0, "adm-edf") == []
    assert Engine(2).select(1, "adm-edf") == []


def test_beats_mrsf_on_the_paper_baseline_seed_1() -> None:
    wl = generate(GenParams(), 1)
    ours = simulate(wl, "adm-edf")
    mrsf = simulate(wl, "mrsf-p")
    assert ours.captured > mrsf.captured
    rescored = score_schedule(wl, ours.schedule)
    assert rescored.ok and rescored.captured == ours.captured
    assert max(Counter(t for t, _ in ours.schedule).values()) <= 1


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    k = draw(st.integers(2, 10))
    n = draw(st.integers(1, 4))
    budget = Budget(draw(st.integers(1, 2)))
    ceis = []
    for i in range(draw(st.integers(1, 7))):
        eis = []
        for _ in range(draw(st.integers(1, 3))):
            r = draw(st.integers(0, n - 1))
            s = draw(st.integers(0, k - 1))
            eis.append(EI(r, s, draw(st.integers(s, min(k - 1, s + 4)))))
        ceis.append(CEI(f"c{i}", "p", tuple(eis)))
    wl = Workload(chronons=k, budget=budget, resources=n, ceis=tuple(ceis))
    wl.validate()
    return wl


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_rescores_to_its_claim_within_budget_and_never_beats_the_optimum(wl: Workload) -> None:
    res = simulate(wl, "adm-edf")  # raises on an invalid schedule
    rescored = score_schedule(wl, res.schedule)
    assert rescored.ok, rescored.problems
    assert rescored.captured == res.captured == res.extra["engine_captured"]
    per_chronon = Counter(t for t, _ in res.schedule)
    assert all(c <= wl.budget.at(t) for t, c in per_chronon.items())
    opt = optimal(wl)
    assert opt.status is OptimumStatus.OPTIMAL
    assert res.captured <= opt.objective
