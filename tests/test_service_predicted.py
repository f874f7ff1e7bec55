"""The service's predicted EIs (proxy.service.predicted): SUP/fbSUP from the learnt update models.

Real update models (``FeedUpdateModels``) fed with documents and probes, one-minute chronons
from ``BASE``; the planner decides which feeds to probe at which chronon.
"""

from __future__ import annotations

import datetime as dt
import random

import pytest

from proxy.rules import FeedUpdateModels
from proxy.rules.ports import ChrononGrid
from proxy.service.predicted import (
    HORIZON,
    ModelPredictor,
    Predicted,
    PredictedProbes,
    predicted_probes,
)

MINUTE, HOUR = 60.0, 3600.0
BASE = 1.7e9  # POSIX seconds of chronon 0 (the models drop dates before 1995 as placeholders)
NOW = 1200  # chronon of the first plan: 20 hours in


def _hourly(models: FeedUpdateModels, feed: int, hours: int = 20) -> None:
    """A document of a Poisson feed of one update an hour over ``hours`` (the same dates for every feed)."""
    rng, t, dates = random.Random(7), 0.0, []
    while (t := t + rng.expovariate(1 / HOUR)) < hours * HOUR:
        dates.append(BASE + t)
    models.observe_document(feed, BASE + hours * HOUR, dates)


def _due(planner: PredictedProbes, weights: dict[int, float], window: int, until: int,
         exclude: frozenset[int] = frozenset(), spare: int = 5) -> list[tuple[int, int]]:
    return [(t, r) for t in range(NOW, until) for r in planner.pick(spare, t, weights, window, set(exclude))]


def test_the_predictor_reads_the_models_next_expected_update_in_chronons() -> None:
    models = FeedUpdateModels()
    _hourly(models, 7)
    predictor = ModelPredictor(models, BASE, MINUTE)
    after = NOW - 1
    expected = models.next_expected_update(7, BASE + NOW * MINUTE)
    assert predictor.next_expected(7, after, horizon=HORIZON) == int((expected - BASE) // MINUTE)
    assert 30 < int((expected - BASE) // MINUTE) - NOW < 120  # about an hour away
    second = predictor.next_expected(7, after, 2, horizon=HORIZON)
    assert second is not None and second > predictor.next_expected(7, after, horizon=HORIZON)  # type: ignore[operator]
    assert predictor.next_expected(7, after, horizon=NOW + 5) is None  # not before the horizon
    with pytest.raises(ValueError, match="chronon length"):
        ModelPredictor(models, 0.0, 0.0)


def test_sup_probes_each_watched_feed_at_the_end_of_its_predicted_window() -> None:
    models = FeedUpdateModels()
    _hourly(models, 7)
    planner = PredictedProbes(models, BASE, MINUTE, feedback=False)
    u = ModelPredictor(models, BASE, MINUTE).next_expected(7, NOW - 1, horizon=HORIZON)
    assert u is not None
    # One probe, at u + window (paper 002 §3.1: the last chronon where the update is still in time).
    assert _due(planner, {7: 1.0}, 5, u + 6) == [(u + 5, 7)]
    assert planner.planned == 1 and planner.dropped == 0
    assert planner.watched() == {7}


def test_a_feed_no_rule_waits_for_gets_no_prediction_and_leaving_drops_its_chain() -> None:
    models = FeedUpdateModels()
    _hourly(models, 7)
    _hourly(models, 8)
    planner = PredictedProbes(models, BASE, MINUTE, feedback=False)
    assert planner.pick(5, NOW, {8: 1.0}, 5, set()) == []
    assert planner.watched() == {8}
    assert planner.pick(5, NOW + 1, {}, 5, set()) == []  # its rule got its update: no chain
    assert planner.watched() == set()
    assert _due(planner, {}, 5, NOW + 300) == []
    assert planner.pick(5, NOW, {7: 1.0}, None, set()) == []  # no window: no rule waits
    assert planner.watched() == set()


def test_a_predicted_probe_the_loop_cannot_make_is_dropped_and_the_heavier_feed_wins_the_budget() -> None:
    models = FeedUpdateModels()
    for feed in (7, 8, 9):
        _hourly(models, feed)  # the same dates: due at the same chronon
    planner = PredictedProbes(models, BASE, MINUTE, feedback=False)
    u = ModelPredictor(models, BASE, MINUTE).next_expected(7, NOW - 1, horizon=HORIZON)
    assert u is not None
    got = _due(planner, {7: 0.5, 8: 2.0, 9: 1.0}, 5, u + 6, exclude=frozenset({9}), spare=1)
    assert [r for _, r in got] == [8]  # 9 is busy; of 7 and 8 the heavier
    assert planner.dropped == 2


def test_fbsup_opens_the_next_predicted_ei_after_a_probe_that_found_nothing() -> None:
    weights = {7: 1.0}
    firsts: dict[bool, list[tuple[int, int]]] = {}
    for feedback in (False, True):
        models = FeedUpdateModels()
        _hourly(models, 7)
        planner = PredictedProbes(models, BASE, MINUTE, feedback=feedback)
        (p, _), = _due(planner, weights, 5, NOW + 200)[:1]
        # The probe at p found nothing: the model learns a censored empty interval, then fbSUP's feedback.
        models.observe_probe(7, BASE + 20 * HOUR, BASE + p * MINUTE, 0)
        planner.on_probe(7, p, found=False)
        u = ModelPredictor(models, BASE, MINUTE).next_expected(7, p, horizon=HORIZON)
        assert u is not None
        firsts[feedback] = [x for x in _due(planner, weights, 5, u + 6) if x[0] > p]
        assert planner.feedback_eis == int(feedback)
        if feedback:
            assert (u + 5, 7) in firsts[feedback]  # the EI of the update still to come, after p
    assert firsts[True] != firsts[False]


def test_a_feed_whose_pings_are_trusted_gets_no_prediction() -> None:
    models = FeedUpdateModels()
    _hourly(models, 7)
    at = BASE + 20 * HOUR
    for _ in range(4):  # every change a probe finds was pinged: the feed pings every update
        models.observe_ping(7, at + 600)
        models.observe_probe(7, at, at + 1200, 1)
        at += 1200
    assert models.trusts_pings(7)
    planner = PredictedProbes(models, BASE, MINUTE, feedback=True)
    assert _due(planner, {7: 1.0}, 5, NOW + 300) == []
    assert planner.watched() == set()


def test_off_is_no_planner_and_the_clock_gives_the_origin() -> None:
    models = FeedUpdateModels()
    grid = ChrononGrid(dt.datetime(2026, 1, 1, tzinfo=dt.UTC), MINUTE)
    assert predicted_probes(Predicted.OFF, models, grid) is None
    planner = predicted_probes(Predicted.FBSUP, models, grid)
    assert planner is not None and planner.feedback
    assert Predicted("sup") is Predicted.SUP


def test_kinds_limit_predictions_to_the_model_kinds_asked() -> None:
    models = FeedUpdateModels()
    _hourly(models, 7)  # a Poisson feed
    assert models.kind_counts((7,))["poisson"] == 1
    only_periodic = PredictedProbes(models, BASE, MINUTE, feedback=False, kinds={"periodic"})
    assert _due(only_periodic, {7: 1.0}, 5, NOW + 300) == []
    assert only_periodic.watched() == set()
    poisson_too = PredictedProbes(models, BASE, MINUTE, feedback=False, kinds={"periodic", "poisson"})
    assert _due(poisson_too, {7: 1.0}, 5, NOW + 300) != []
