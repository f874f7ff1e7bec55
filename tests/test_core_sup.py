"""SUP and fbSUP (paper 002) and the rate models they plan from (proxy.core.sup, proxy.core.rates)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.rates import (
    KnownRates,
    OnlineRates,
    PlannedUpdates,
    RateModel,
    UpdatePredictor,
    expected_arrival,
)
from proxy.core.sup import (
    Life,
    PredictedEi,
    SupPlanner,
    WatchSpec,
    predicted_ei,
    sup_plan,
    sup_probes,
)


@pytest.mark.parametrize(
    ("base", "cycle", "after", "count", "horizon", "expected"),
    [
        ([0.1], (1.0,), -1, 1, 100, 9),  # λ=0.1: one update expected 10 chronons on
        ([0.1], (1.0,), 9, 2, 100, 29),
        ([0.25], (1.0,), 0, 1, 100, 4),
        ([0.1], (1.0,), 95, 1, 100, None),  # beyond the epoch
        ([0.0], (1.0,), 0, 1, 100, None),  # a silent feed
        # A two-chronon cycle (0, 2) x 0.25: updates only at odd chronons, 0.5 each.
        ([0.25], (0.0, 2.0), -1, 1, 100, 3),
        ([0.25], (0.0, 2.0), 3, 1, 100, 7),
    ],
)
def test_known_rates_next_expected(
    base: list[float], cycle: tuple[float, ...], after: int, count: int, horizon: int, expected: int | None
) -> None:
    model = KnownRates(base, cycle)
    assert model.next_expected(0, after, count, horizon=horizon) == expected
    assert expected_arrival(model, 0, after, count, horizon) == expected


def test_known_rates_cycle_keeps_the_mean_and_protocols_hold() -> None:
    model = KnownRates([0.5, 2.0], (1.0, 3.0))
    assert model.rate(0, 0) == pytest.approx(0.25) and model.rate(0, 1) == pytest.approx(0.75)
    assert model.rate(7, 0) == 0.0  # unknown resources never change
    assert isinstance(model, RateModel) and isinstance(model, UpdatePredictor)
    assert KnownRates.from_counts([10, 0], 100).base == (0.1, 0.0)
    with pytest.raises(ValueError, match="cycle"):
        KnownRates([1.0], ())
    with pytest.raises(ValueError, match="base"):
        KnownRates([-1.0])


def test_online_rates_start_at_the_prior_and_learn() -> None:
    model = OnlineRates(prior_count=1.0, prior_chronons=10.0)
    assert model.rate(3, 0) == pytest.approx(0.1)
    model.observe_probe(3, 0, 5)  # the baseline: backlog, not a rate
    assert model.rate(3, 0) == pytest.approx(0.1)
    model.observe_probe(3, 90, 19)  # 19 updates in 90 chronons
    assert model.rate(3, 0) == pytest.approx(20 / 100)
    assert model.next_expected(3, 90, 1, horizon=1000) == 95
    with pytest.raises(ValueError, match="updates_found"):
        model.observe_probe(3, 91, -1)


def test_planned_updates_are_fpn_predictions() -> None:
    pred = PlannedUpdates([[5, 9, 9, 20], []])
    assert pred.next_expected(0, -1, 1, horizon=100) == 5
    assert pred.next_expected(0, 5, 2, horizon=100) == 20
    assert pred.next_expected(0, 5, 2, horizon=20) is None
    assert pred.next_expected(1, 0, 1, horizon=100) is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # λ = 0.1, window(3): updates expected at 9, 19, 29, ...; probe at each EI's last chronon.
        (WatchSpec(0, 1, 3), [(9, 12), (19, 22), (29, 32), (39, 42)]),
        # every 2nd update: expected at 19, 39.
        (WatchSpec(0, 2, 3), [(19, 22), (39, 42)]),
        # overwrite: until the chronon before the next expected update (the last one: the epoch's end).
        (WatchSpec(0, 1, 0, Life.OVERWRITE), [(9, 18), (19, 28), (29, 38), (39, 44)]),
        # window longer than the epoch's rest: clipped to K-1.
        (WatchSpec(0, 4, 10), [(39, 44)]),
    ],
)
def test_sup_plan_exact_predicted_eis(spec: WatchSpec, expected: list[tuple[int, int]]) -> None:
    eis = sup_plan(KnownRates([0.1]), [spec], 45)
    assert [(e.start, e.finish) for e in eis] == expected
    assert all(e.probe_at == e.finish for e in eis)


def test_sup_probes_once_per_overlap_at_the_last_chronon() -> None:
    eis = [PredictedEi(0, 0, 5), PredictedEi(0, 3, 8), PredictedEi(0, 6, 9), PredictedEi(1, 2, 2)]
    # [0,5] probed at 5 also satisfies [3,8]; [6,9] needs its own probe at 9.
    assert sup_probes(eis) == [(2, 1), (5, 0), (9, 0)]


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(0, 6)), max_size=25))
def test_sup_probes_satisfy_every_predicted_ei(raw: list[tuple[int, int, int]]) -> None:
    eis = [PredictedEi(r, s, s + w) for r, s, w in raw]
    probes = sup_probes(eis)
    for e in eis:
        assert any(e.start <= t <= e.finish and r == e.resource for t, r in probes)
    # Minimal: the probes of one resource are pairwise separated by some EI (no two inside one EI's slack).
    assert len(probes) <= len(eis)


def _plan_all(planner: SupPlanner, horizon: int) -> list[PredictedEi]:
    return [e for t in range(horizon) for e in planner.plan(t)]


def test_planner_with_known_rates_is_the_static_plan() -> None:
    model = KnownRates([0.1, 0.05])
    specs = [WatchSpec(0, 1, 3), WatchSpec(1, 2, 5, Life.OVERWRITE)]
    online = _plan_all(SupPlanner(model, specs, 100), 100)
    assert sorted(online, key=lambda e: (e.resource, e.start)) == sup_plan(model, specs, 100)


def test_planner_skips_an_ei_a_planned_probe_already_lies_in() -> None:
    # λ = 0.5, window(4): expected at 1, 3, 5, ...; the probe at 5 (for [1,5]) satisfies [3,7] and [5,9].
    planner = SupPlanner(KnownRates([0.5]), [WatchSpec(0, 1, 4)], 20)
    eis = _plan_all(planner, 20)
    assert [(e.start, e.finish) for e in eis] == [(1, 5), (7, 11), (13, 17)]
    assert sup_probes(sup_plan(KnownRates([0.5]), [WatchSpec(0, 1, 4)], 20)) == [(5, 0), (11, 0), (17, 0), (19, 0)]


def test_fbsup_reopens_after_an_empty_probe() -> None:
    model = KnownRates([0.1])
    spec = WatchSpec(0, 2, 3)  # every 2nd update; SUP expects it at 19, probes at 22
    for feedback, expected_extra in ((False, 0), (True, 1)):
        planner = SupPlanner(model, [spec], 100, feedback=feedback)
        assert [(e.start, e.finish) for e in planner.plan(0)] == [(19, 22)]
        for t in range(1, 22):
            assert planner.plan(t) == []
        planner.on_probe(0, 22, 1)  # one update found, the rule needs two: not satisfied
        got = planner.plan(23)
        if feedback:
            # fbSUP: one more update expected 10 chronons after 22, its EI [32, 35].
            assert PredictedEi(0, 32, 35) in got
        assert planner.extra == expected_extra


def test_fbsup_adds_nothing_after_a_satisfying_probe_or_inside_a_planned_probe() -> None:
    model = KnownRates([0.1])
    planner = SupPlanner(model, [WatchSpec(0, 1, 3)], 100, feedback=True)
    planner.plan(0)  # SUP: [9, 12]
    planner.on_probe(0, 12, 1)  # satisfied
    assert planner.extra == 0
    planner.plan(13)  # SUP's next: [19, 22]
    planner.on_probe(0, 13, 0)  # empty: one update expected at 23, EI [23, 26]
    planner.on_probe(0, 20, 0)  # empty: next expected at 30 -> [30, 33]: no planned probe inside
    assert planner.extra == 2
    planner.on_probe(0, 21, 0)  # [31, 34] holds the planned probe at 33: nothing new
    assert planner.extra == 2


def test_watch_spec_and_planner_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="every"):
        WatchSpec(0, 0)
    with pytest.raises(ValueError, match="window"):
        WatchSpec(0, 1, -1)
    with pytest.raises(ValueError, match="horizon"):
        SupPlanner(KnownRates([0.1]), [], 0)
    assert predicted_ei(KnownRates([0.0]), WatchSpec(0), -1, 1, 10) is None


def test_planner_rules_can_come_and_go_while_it_runs() -> None:
    # The service's watched feeds change as CEIs fill: a rule added at 10 starts its chain
    # from 10 (λ = 0.1: expected at 19, window(3): [19, 22]); an unwatched feed plans nothing.
    planner = SupPlanner(KnownRates([0.1, 0.1]), [WatchSpec(0, 1, 3)], 1000)
    assert [(e.resource, e.start, e.finish) for e in planner.plan(0)] == [(0, 9, 12)]
    assert planner.watched() == {0}
    planner.watch(WatchSpec(1, 1, 3))
    assert [(e.resource, e.start, e.finish) for e in planner.plan(10)] == [(1, 19, 22)]
    planner.unwatch(0)
    assert planner.watched() == {1}
    got = [(e.resource, e.start, e.finish) for t in range(11, 34) for e in planner.plan(t)]
    assert got == [(1, 29, 32), (1, 39, 42)]  # resource 0's chain (next at [19, 22]) was dropped with its rule
    planner.on_probe(0, 40, 0)  # a probe of a feed no rule watches teaches nothing
    assert planner.extra == 0


def test_unwatching_a_feed_withdraws_its_feedback_ei_not_yet_handed_out() -> None:
    planner = SupPlanner(KnownRates([0.1]), [WatchSpec(0, 1, 3)], 1000, feedback=True)
    assert [(e.start, e.finish) for e in planner.plan(0)] == [(9, 12)]
    planner.on_probe(0, 13, 0)  # empty: fbSUP opens [23, 26] for the next plan ...
    assert planner.extra == 1
    planner.unwatch(0)  # ... but the rule got its update meanwhile
    assert planner.plan(14) == []


def test_a_long_running_planner_forgets_old_planned_probes() -> None:
    planner = SupPlanner(KnownRates([0.5]), [WatchSpec(0, 1, 2)], 10**9)
    for t in range(10_000):
        planner.plan(t)
    assert len(planner._planned[0]) <= 3  # only probes recent enough to lie in an EI still to come


@given(st.lists(st.tuples(st.sampled_from(["watch", "unwatch", "probe", "empty"]), st.integers(0, 2),
                          st.integers(0, 6), st.booleans()), max_size=40),
       st.booleans())
def test_a_planner_whose_rules_come_and_go_plans_only_for_watched_feeds_and_never_in_the_past(
    ops: list[tuple[str, int, int, bool]], feedback: bool
) -> None:
    planner = SupPlanner(KnownRates([0.2, 0.1, 0.05]), [], 500, feedback=feedback)
    watched: set[int] = set()
    t = 0
    for op, r, window, tick in ops:  # several changes may come between two plans
        t += tick
        if op == "watch":
            planner.watch(WatchSpec(r, 1, window))
            watched.add(r)
        elif op == "unwatch":
            planner.unwatch(r)
            watched.discard(r)
        elif op in ("probe", "empty"):
            planner.on_probe(r, t, 1 if op == "probe" else 0)
        if tick:
            for ei in planner.plan(t):
                assert ei.resource in watched
                assert ei.probe_at >= t and ei.start <= ei.finish
        assert planner.watched() == watched
