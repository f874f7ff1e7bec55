"""``proxy.sim.plan``: expected completeness per budget and the least budget for a target (issue 18, part 5)."""

from __future__ import annotations

import functools
import os

import pytest

from proxy.service.loop import EVIDENCE_FADE, OPTIMISM_Z, POOL_STRENGTH, background_allocator
from proxy.sim.plan import (
    GridRates,
    PlanLearning,
    Planner,
    PlanQuery,
    PlanRule,
    PlanTrigger,
    PlanWatch,
    every_fires,
)

ALWAYS = 50.0  # expected updates per chronon: every chronon holds an update (P(none) = e^-50)


@pytest.mark.parametrize(
    ("feeds", "within", "budget", "expected"),
    [
        # One feed changing every chronon, watched with window W: probing it every chronon
        # finds each update at its own chronon.
        (1, 0, 1, 1.0),
        (1, 5, 1, 1.0),
        # Two such feeds, one probe per chronon: the greedy index alternates between them
        # (equal chances, the longer wait first). W=0 needs the probe at the update's very
        # chronon: every other update of each feed is found one chronon late.
        (2, 0, 1, 0.5),
        # W=1 forgives that chronon.
        (2, 1, 1, 1.0),
        (2, 0, 2, 1.0),
    ],
)
def test_hand_computed_completeness(feeds: int, within: int, budget: int, expected: float) -> None:
    rates = GridRates.constant([ALWAYS] * feeds, 100)
    rules = [PlanWatch(f"p{f}", (f,), within) for f in range(feeds)]
    point = Planner(rules, rates, futures=2, seed=1).evaluate(budget)
    assert point.completeness == pytest.approx(expected)
    assert point.probes_per_chronon == budget
    assert point.ceis == 100 * feeds  # one CEI per update in the horizon, found or not


def test_temporal_trigger_with_a_silent_feed_is_captured_by_its_one_probe() -> None:
    # every 10 chronons, slack 2, on a feed that never changes: rank 1, captured by the policy.
    rates = GridRates.constant([0.0, 0.0], 100)
    rule = PlanTrigger("p", 0, (PlanQuery(1, 3),), slack=2, fires=every_fires(10, 100))
    point = Planner([rule], rates, futures=1).evaluate(1)
    assert (point.completeness, point.ceis, point.probes_per_chronon) == (1.0, 10, 0.1)


def test_triggered_queries_join_at_the_trigger_probe() -> None:
    # The trigger feed changes every chronon, so every fire opens its query EI [p, p + 0].
    # The service selects before the trigger probe's result arrives: a query within 0 is
    # never captured, whatever the budget (as live); within 1, the next chronon's probe is.
    rates = GridRates.constant([ALWAYS, 0.0], 60)
    rule = PlanTrigger("p", 0, (PlanQuery(1, 0),), slack=0, fires=every_fires(6, 60))
    plan = Planner([rule], rates, futures=1, policy="s-edf-p")
    assert plan.evaluate(1).completeness == plan.evaluate(2).completeness == 0.0
    wider = PlanTrigger("p", 0, (PlanQuery(1, 1),), slack=0, fires=every_fires(6, 60))
    assert Planner([wider], rates, futures=1, policy="s-edf-p").evaluate(1).completeness == 1.0


@pytest.mark.parametrize(("every_nth", "expected"), [(None, 0.0), (1, 0.0), (10**9, 1.0)])
def test_on_update_trigger_fires_its_query_when_the_condition_holds(every_nth: int | None, expected: float) -> None:
    # on: update on a feed changing every chronon: one CEI per update, found by the background
    # probe at its own chronon. When it fires, its query EI [t, t] on another feed needs a
    # second probe in the same chronon, which budget 1 does not have; when the count of
    # updates never reaches every_nth, every CEI is rank 1 and captured by that one probe.
    rates = GridRates.constant([ALWAYS, 0.0], 90)
    rule = PlanTrigger("p", 0, (PlanQuery(1, 0),), slack=0, every_nth=every_nth)
    point = Planner([rule], rates, futures=1).evaluate(1)
    assert (point.ceis, point.completeness) == (90, expected)


@functools.cache
def _instance() -> Planner:
    """A small mixed instance; cached, so its evaluations (memoised per budget) are shared."""
    rates = GridRates.constant([0.08, 0.05, 0.2, 0.03, 0.3, 0.1, 0.15, 0.02], 400)
    rules: list[PlanRule] = [
        PlanWatch("a", (0, 1), 4),
        PlanWatch("b", (2,), 2),
        PlanWatch("c", (6, 7), 3),
        PlanTrigger("d", 3, (PlanQuery(4, 3), PlanQuery(5)), slack=2, fires=every_fires(10, 400)),
        PlanTrigger("e", 4, (PlanQuery(0, 2),), slack=1),
    ]
    return Planner(rules, rates, futures=6, seed=7)


def test_completeness_grows_with_the_budget_on_common_futures() -> None:
    plan = _instance()
    points = [plan.evaluate(b) for b in range(1, plan.max_budget + 1)]
    values = [p.completeness for p in points if p.completeness is not None]
    assert len(values) == len(points)
    assert values == sorted(values)
    assert values[0] < 0.8 and values[-1] == 1.0
    assert len({p.ceis for p in points}) == 1  # the same futures: the same CEIs at every budget
    assert all(0 < p.stderr < 0.05 for p in points if p.completeness != 1.0)


@pytest.mark.parametrize("target", [0.5, 0.8, 0.9, 0.95, 0.99])
@pytest.mark.parametrize("start", [1, 3, 8])
def test_least_budget_is_the_smallest_reaching_the_target(target: float, start: int) -> None:
    plan = _instance()
    answer = plan.least_budget(target, start=start)
    assert answer.budget is not None and answer.point is not None
    assert answer.point.completeness is not None and answer.point.completeness >= target
    below = plan.evaluate(answer.budget - 1) if answer.budget > 1 else None
    assert below is None or (below.completeness is not None and below.completeness < target)
    assert answer.point.probes_per_chronon == pytest.approx(answer.budget, rel=0.05)
    assert [p.budget for p in answer.evaluated] == sorted({p.budget for p in answer.evaluated})


def test_least_budget_is_none_when_out_of_reach() -> None:
    plan = _instance()
    answer = plan.least_budget(0.99, max_budget=2)
    assert answer.budget is None and answer.point is None
    assert answer.best is not None and answer.best.budget == 2
    assert answer.best.completeness is not None and answer.best.completeness < 0.99
    assert answer.max_budget == 2


def test_same_seed_same_plan_other_seed_other_futures() -> None:
    rates = GridRates.constant([0.08, 0.05, 0.2, 0.03, 0.3, 0.1, 0.15, 0.02], 400)
    a, b, c = (Planner(_instance().rules, rates, futures=6, seed=s) for s in (7, 7, 8))
    assert a.evaluate(2) == b.evaluate(2) == _instance().evaluate(2)
    assert c.evaluate(2) != a.evaluate(2)


def test_no_rules_plan_nothing() -> None:
    plan = Planner([], GridRates.constant([0.1], 10))
    point = plan.evaluate(3)
    assert point.completeness is None and point.ceis == 0
    assert plan.least_budget(0.9).budget is None


def test_rules_must_read_feeds_the_rates_cover() -> None:
    with pytest.raises(ValueError, match="reads feed 3"):
        Planner([PlanWatch("p", (3,), 1)], GridRates.constant([0.1], 10))


def test_grid_rates_is_a_rate_model_and_pads_with_the_mean() -> None:
    from proxy.core.rates import RateModel

    rates = GridRates([[1.0, 3.0], [0.0, 0.5]])
    assert isinstance(rates, RateModel)
    assert (rates.rate(0, 1), rates.rate(0, 7), rates.rate(5, 0)) == (3.0, 2.0, 0.0)
    assert rates.extended(4).tolist() == [[1.0, 3.0, 2.0, 2.0], [0.0, 0.5, 0.25, 0.25]]
    with pytest.raises(ValueError):
        GridRates([[-1.0]])


def test_every_fires_anchors_before_the_horizon() -> None:
    assert every_fires(5, 20) == (0, 5, 10, 15)
    assert every_fires(5, 20, anchor=-7) == (3, 8, 13, 18)
    assert every_fires(5, 20, anchor=18) == (18,)


# -- the service's background allocation (proxy.service.loop.background_allocator) --------------


def _service_plan(rules: list[PlanWatch], rates: GridRates) -> Planner:
    return Planner(rules, rates, futures=4, seed=3, allocator=background_allocator)


def test_the_loops_allocator_turns_to_the_feed_a_watch_rule_still_lacks() -> None:
    # A fast feed (an update every other chronon) and a slow one (every 50), W=3, one probe a
    # chronon. The greedy index ranks by the rules reading a feed times P(changed), so the fast
    # feed takes nearly every probe and the slow one is seen every 26 chronons or so: its
    # update is mostly found too late. The loop's allocator weighs only the feeds the rule's
    # CEI still lacks, so once the fast feed is found the slow one is probed within its window.
    rates = GridRates.constant([0.5, 0.02], 2000)
    rules = [PlanWatch("p", (0, 1), 3)]
    greedy = Planner(rules, rates, futures=4, seed=3).evaluate(1)
    loop = _service_plan(rules, rates).evaluate(1)
    assert greedy.ceis == loop.ceis  # the same futures
    assert greedy.completeness is not None and greedy.completeness < 0.3
    assert loop.completeness == 1.0
    assert loop.probes_per_chronon == 1.0


def test_the_loops_allocator_funds_whole_rules() -> None:
    # Two rules watch the pair (0, 1), a third feed 2 alone, all three feeds alike, one probe a
    # chronon for three feeds with W=3 (full funding is a probe every 4 chronons each: 3/4 of
    # the budget). The plan runs the loop's coordinated frequencies: every CEI is captured.
    rates = GridRates.constant([0.3, 0.3, 0.3], 2000)
    rules = [PlanWatch("a", (0, 1), 3), PlanWatch("b", (0, 1), 3), PlanWatch("c", (2,), 3)]
    greedy = Planner(rules, rates, futures=4, seed=3).evaluate(1)
    loop = _service_plan(rules, rates).evaluate(1)
    assert greedy.completeness is not None and greedy.completeness < 0.85
    assert loop.completeness == 1.0


def test_the_service_plans_with_the_loops_allocator() -> None:
    from proxy.core.discovery import DEAD_CEI_WEIGHT
    from proxy.service.planning import PlanInputs, service_planner

    rates = GridRates.constant([0.5, 0.02], 200)
    inputs = PlanInputs(rules=(PlanWatch("p", (0, 1), 3),), rates=rates, feeds=(10, 11), profiles=1, skipped=0,
                        start=0, chronon_seconds=60.0)
    planner = service_planner(inputs, futures=2)
    assert planner.allocator is background_allocator and planner.dead_weight == DEAD_CEI_WEIGHT
    assert planner.evaluate(1).completeness == 1.0


def test_dead_weight_must_be_a_share() -> None:
    with pytest.raises(ValueError, match="dead_weight must be in"):
        Planner([PlanWatch("p", (0,), 1)], GridRates.constant([0.1], 10), dead_weight=1.5)


@pytest.mark.parametrize(("feeds", "within", "budget"), [(1, 0, 1), (1, 5, 1), (2, 1, 1), (2, 0, 2), (3, 2, 1)])
def test_with_the_loops_allocator_feeds_changing_every_chronon_are_caught_when_the_budget_allows(
    feeds: int, within: int, budget: int
) -> None:
    # Each feed changes every chronon; a probe every within + 1 chronons catches each update in
    # time, and the budget covers that (feeds <= budget x (within + 1)): the allocator's
    # frequencies fund every feed in full, and every CEI is captured.
    rates = GridRates.constant([ALWAYS] * feeds, 100)
    rules = [PlanWatch(f"p{f}", (f,), within) for f in range(feeds)]
    point = _service_plan(rules, rates).evaluate(budget)
    assert point.completeness == 1.0
    assert point.probes_per_chronon == budget


def test_with_the_loops_allocator_temporal_triggers_alone_spend_only_the_engines_probes() -> None:
    # Nothing waits for updates (no watch rule, no on: update trigger): no background probe.
    rates = GridRates.constant([0.0, 0.3], 100)
    rules = [PlanTrigger("p", 0, (PlanQuery(1, 3),), slack=2, fires=every_fires(10, 100))]
    point = Planner(rules, rates, futures=2, allocator=background_allocator).evaluate(2)
    assert point.completeness == 1.0
    assert point.probes_per_chronon == pytest.approx(0.1)  # one probe per fire, of the trigger's feed


# -- learning the rates as the loop does (PlanLearning) ----------------------------------------

# Two feeds changing every other chronon, four changing once in a hundred; a rank-1 watch rule on
# each, W = 1, one probe per chronon: funding the two fast feeds in full captures nearly all CEIs.
_MIXED = GridRates.constant([0.5, 0.5, 0.01, 0.01, 0.01, 0.01], 400)
_SINGLES = [PlanWatch(f"p{f}", (f,), 1) for f in range(6)]


def _learning_plan(learning: PlanLearning | None) -> float:
    point = Planner(_SINGLES, _MIXED, futures=4, seed=3, allocator=background_allocator,
                    learning=learning).evaluate(1)
    assert point.completeness is not None
    return point.completeness


def test_a_record_that_matches_the_rates_plans_as_known_rates() -> None:
    # 10^5 chronons on record at each feed's true rate: the pooled rates are the feeds' own.
    record = PlanLearning((5e4, 5e4, 1e3, 1e3, 1e3, 1e3), (1e5,) * 6, POOL_STRENGTH, OPTIMISM_Z)
    known = _learning_plan(None)
    assert known > 0.95
    assert _learning_plan(record) == pytest.approx(known, abs=0.005)


def test_learning_from_nothing_costs_the_plan_what_exploring_costs() -> None:
    fresh = _learning_plan(PlanLearning.fresh(6, POOL_STRENGTH, OPTIMISM_Z, EVIDENCE_FADE))
    # Every feed looks alike at first, the slow ones are probed until they look slow.
    assert 0.80 < fresh < _learning_plan(None) - 0.05


def test_the_allocation_follows_the_record_not_the_planned_rates() -> None:
    # A record that swaps fast and slow: the allocation funds the slow feeds and starves the fast
    # ones, whose record no probe corrects; fading it lets the optimism of a feed unseen come back.
    wrong = (1e3, 1e3, 5e4, 5e4, 5e4, 5e4)
    kept = _learning_plan(PlanLearning(wrong, (1e5,) * 6, POOL_STRENGTH, OPTIMISM_Z))
    faded = _learning_plan(PlanLearning(wrong, (1e5,) * 6, POOL_STRENGTH, OPTIMISM_Z, EVIDENCE_FADE))
    assert kept < 0.05
    assert kept + 0.05 < faded < 0.5


def test_learning_must_hold_one_record_per_feed() -> None:
    with pytest.raises(ValueError, match="learning holds 2 feeds' records; the rates cover 6"):
        Planner(_SINGLES, _MIXED, allocator=background_allocator,
                learning=PlanLearning.fresh(2, POOL_STRENGTH, OPTIMISM_Z))
    with pytest.raises(ValueError, match="one value per feed"):
        PlanLearning((1.0,), (), POOL_STRENGTH, OPTIMISM_Z)
    with pytest.raises(ValueError, match="finite and >= 0"):
        PlanLearning((-1.0,), (1.0,), POOL_STRENGTH, OPTIMISM_Z)
    with pytest.raises(ValueError, match="strength must be finite and > 0"):
        PlanLearning((1.0,), (1.0,), 0.0, OPTIMISM_Z)
    with pytest.raises(ValueError, match="fade must be > 0"):
        PlanLearning((1.0,), (1.0,), POOL_STRENGTH, OPTIMISM_Z, fade=0.0)


def test_a_replay_is_the_one_future_its_recorded_updates_make() -> None:
    rates = GridRates.constant([ALWAYS, ALWAYS], 100)
    # Two feeds changing every chronon, one probe a chronon, W = 0: half the CEIs, as sampled futures give.
    both = Planner([PlanWatch("a", (0,), 0), PlanWatch("b", (1,), 0)], rates, futures=5,
                   replay=[range(100), range(100)]).evaluate(1)
    assert (both.completeness, both.ceis, both.futures) == (0.5, 200.0, 1)
    # Recorded updates, not the rates: feed 0 changed twice in the horizon (once past it), feed 1 never.
    plan = Planner([PlanWatch("a", (0,), 0), PlanWatch("b", (0, 1), 3)], rates, replay=[[3, 50, 120], []])
    point = plan.evaluate(1)
    assert (point.completeness, point.ceis) == (1.0, 2.0)
    with pytest.raises(ValueError, match="replay holds 1 feeds' updates; the rates cover 2"):
        Planner([PlanWatch("a", (0,), 0)], rates, replay=[[1]])


def test_forked_workers_plan_what_one_process_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setattr(threading, "active_count", lambda: 1)  # fork, whatever helpers the test runner keeps

    def plan(jobs: int) -> Planner:
        return Planner(_SINGLES, _MIXED, futures=4, seed=3, allocator=background_allocator, jobs=jobs,
                       learning=PlanLearning.fresh(6, POOL_STRENGTH, OPTIMISM_Z, EVIDENCE_FADE))

    alone, forked = plan(1), plan(3)
    assert forked.evaluate(1) == alone.evaluate(1)
    assert forked.least_budget(0.99) == alone.least_budget(0.99)
    # Each future's outcome, in order (not only their mean).
    assert plan(3)._outcomes(2) == plan(1)._outcomes(2)


def test_forked_workers_run_the_futures_in_other_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    import proxy.sim.plan as plan_module

    # Each run reports the process it ran in, through its probe count.
    monkeypatch.setattr(plan_module._Run, "run", lambda self: plan_module._Outcome(0, 1, os.getpid()))
    planner = Planner(_SINGLES, _MIXED, futures=4, seed=3, jobs=2)
    alone = {os.getpid()}
    assert {out.probes for out in Planner(_SINGLES, _MIXED, futures=4, seed=3)._outcomes(1)} == alone
    # With another thread running, a fork could copy a lock it holds: the futures run here.
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert {out.probes for out in planner._outcomes(1)} == alone
    finally:
        release.set()
        other.join()
    # The one thread of the process (as in ``proxy plan``; the test runner may keep helpers of its own).
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    pids = {out.probes for out in planner._outcomes(1)}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert plan_module._FORKED is None  # the workers' planner is let go once they are done


def test_jobs_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="jobs must be >= 1, got 0"):
        Planner(_SINGLES, _MIXED, jobs=0)


@pytest.mark.parametrize("every_nth", [None, 1])
def test_a_single_feed_alert_plans_as_a_one_feed_watch(every_nth: int | None) -> None:
    # Issue 43: an alert on: update (a trigger without query) is one EI [u, u + slack] per
    # update, the trigger's alone, decided (and sealed) by the probe that finds it: the same
    # completeness as a watch of that one feed with the same window, fired or not.
    rates = GridRates.constant([ALWAYS, ALWAYS], 120)
    for slack in (0, 1):
        alerts: list[PlanRule] = [PlanTrigger(f"a{f}", f, (), slack=slack, every_nth=every_nth)
                                  for f in range(2)]
        watches: list[PlanRule] = [PlanWatch(f"w{f}", (f,), slack) for f in range(2)]
        alert = Planner(alerts, rates, futures=2, seed=1).evaluate(1)
        watch = Planner(watches, rates, futures=2, seed=1).evaluate(1)
        assert alert.ceis == watch.ceis == 240
        assert alert.completeness == pytest.approx(watch.completeness)
        assert alert.completeness == pytest.approx(0.5 if slack == 0 else 1.0)
