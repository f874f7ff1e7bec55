"""Hypothesis: no online policy beats the optimum, and the optimum's schedule re-scores to its claim."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.model import CEI, EI, Budget, Workload
from proxy.core.optimum import OptimumStatus, lp_bound, optimal
from proxy.core.policies import policy_names
from proxy.sim.run import simulate
from proxy.sim.score import score_schedule


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    k = draw(st.integers(2, 8))
    n = draw(st.integers(1, 4))
    if draw(st.booleans()):
        budget = Budget(draw(st.integers(1, 2)))
    else:
        budget = Budget(tuple(draw(st.lists(st.integers(0, 2), min_size=k, max_size=k))))
    ceis = []
    for i in range(draw(st.integers(1, 6))):
        eis = []
        for _ in range(draw(st.integers(1, 3))):
            r = draw(st.integers(0, n - 1))
            s = draw(st.integers(0, k - 1))
            f = draw(st.integers(s, min(k - 1, s + 3)))
            eis.append((r, s, f))
        release = min(s for _, s, _ in eis)
        # Some EIs become known only later (a CEI that grows when a trigger fires).
        with_reveal = [
            EI(r, s, f, draw(st.integers(release, k - 1)) if draw(st.booleans()) else None)
            for r, s, f in eis
        ]
        ceis.append(CEI(f"c{i}", f"p{i % 2}", tuple(with_reveal)))
    wl = Workload(chronons=k, budget=budget, resources=n, ceis=tuple(ceis))
    wl.validate()
    return wl


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_no_online_policy_beats_the_optimum(wl: Workload) -> None:
    opt = optimal(wl)
    assert opt.status is OptimumStatus.OPTIMAL
    rescored = score_schedule(wl, opt.schedule)
    assert rescored.ok, rescored.problems
    assert rescored.captured == opt.objective
    assert lp_bound(wl).bound >= opt.objective - 1e-6
    for name in policy_names():
        res = simulate(wl, name)
        # Budget never exceeded, only known resources, every chronon in range.
        assert score_schedule(wl, res.schedule).ok, name
        assert res.captured <= opt.objective, name
        # The engine's own count agrees with the independent scorer.
        assert res.extra.get("engine_captured", res.captured) == res.captured, name
