"""The trigger evaluator on fake chronons: exact operations for ticks, probes and pings."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.rules import (
    ChrononGrid,
    FeedUpdateModels,
    GammaPrior,
    Op,
    OpenCei,
    ProfileSpec,
    RevealEi,
    RuleStateError,
    SealCei,
    TriggerEvaluator,
    UnknownFeedError,
    UpdateModelSettings,
    apply_ops,
)
from proxy.rules.evaluator import MAX_OVERWRITE
from proxy.sim.generate import Life, Reveal, profile_ceis

ORIGIN = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)  # a Monday, midnight UTC
GRID = ChrononGrid(ORIGIN, 60.0)
MISH, CNN, MONEY = 0, 1, 2
FEEDS = {"FEED_MISH": MISH, "FEED_CNN": CNN, "FEED_MONEY": MONEY, "A": 10, "B": 11, "C": 12, "Q": 20}

MOTIVATING = {
    "name": "business analyst",
    "rules": [
        {
            "name": "oil news",
            "trigger": {"feed": "FEED_MISH", "every": "3m", "slack": "2m", "when": {"contains": ["oil"]}},
            "query": [{"feed": "FEED_CNN", "within": "10m"}, {"feed": "FEED_MONEY", "within": "10m"}],
        }
    ],
}
AUCTIONS = {"name": "auctions", "rules": [{"name": "watch 3", "watch": {"feeds": ["A", "B", "C"], "within": "10m"}}]}


@dataclass(frozen=True)
class Entry:
    title: str | None = None
    summary: str | None = None
    content: str | None = None
    published: datetime | None = None
    link: str | None = None
    author: str | None = None
    categories: tuple[str, ...] = ()


def evaluator(body: dict[str, Any], profile_id: str = "p", **kwargs: Any) -> TriggerEvaluator:
    ev = TriggerEvaluator(GRID, **kwargs)
    ev.add_profile(profile_id, ProfileSpec.model_validate(body), FEEDS)
    return ev


def trigger_body(trigger: dict[str, Any], query: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    rule = {"name": "r", "trigger": trigger, "query": query or [{"feed": "FEED_CNN", "within": "10m"}], **extra}
    return {"name": "p", "rules": [rule]}


def ticks(ev: TriggerEvaluator, chronons: range) -> dict[int, list[Op]]:
    return {t: ops for t in chronons if (ops := ev.on_tick(t))}


# --------------------------------------------------------------------------- motivating example


def test_motivating_example_opens_a_trigger_cei_every_three_minutes() -> None:
    ev = evaluator(MOTIVATING)
    assert ticks(ev, range(10)) == {
        t: [OpenCei(f"p/0:{i}", "p", "p/0", ((MISH, t, t + 2),), sealed=False)]
        for i, t in enumerate([0, 3, 6, 9])
    }


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        # A new post mentioning oil (any case, any field): CNN and MONEY join, rank 3.
        (
            [Entry(title="Oil prices surge")],
            [RevealEi("p/0:0", CNN, 1, 11, seal=False), RevealEi("p/0:0", MONEY, 1, 11, seal=True)],
        ),
        (
            [Entry(title="markets"), Entry(summary="crude OIL and gold")],
            [RevealEi("p/0:0", CNN, 1, 11, seal=False), RevealEi("p/0:0", MONEY, 1, 11, seal=True)],
        ),
        # Issue 43: keywords are whole words ("boiling" is not "oil"), in title and summary
        # unless the rule's 'fields' says otherwise (content is not read by default).
        ([Entry(content="boiling point")], [SealCei("p/0:0")]),
        ([Entry(content="oil spill")], [SealCei("p/0:0")]),
        ([Entry(summary="(oil)")], [RevealEi("p/0:0", CNN, 1, 11, False), RevealEi("p/0:0", MONEY, 1, 11, True)]),
        # New posts without oil, or no new post at all: complete at rank 1.
        ([Entry(title="gold", summary="silver", content=None)], [SealCei("p/0:0")]),
        ([], [SealCei("p/0:0")]),
    ],
)
def test_motivating_example_trigger_outcome(entries: list[Entry], expected: list[Op]) -> None:
    ev = evaluator(MOTIVATING)
    ev.on_tick(0)
    assert ev.on_probe(MISH, 1, True, entries) == expected
    # Decided once: a later probe in the same window changes nothing.
    assert ev.on_probe(MISH, 2, True, [Entry(title="oil")]) == []
    assert ev.open_cei_ids() == []


def test_only_a_successful_probe_inside_the_window_decides() -> None:
    ev = evaluator(MOTIVATING)
    ev.on_tick(0)
    ev.on_tick(3)  # second CEI, window [3, 5]
    assert ev.on_probe(CNN, 1, True, [Entry(title="oil")]) == []  # another feed
    assert ev.on_probe(MISH, 1, False, []) == []  # failed: still open
    assert ev.on_probe(MISH, 2, True, [Entry(title="oil")]) == [
        RevealEi("p/0:0", CNN, 2, 12, False),
        RevealEi("p/0:0", MONEY, 2, 12, True),
    ]
    assert ev.open_cei_ids() == ["p/0:1"]
    assert ev.on_probe(MISH, 6, True, [Entry(title="oil")]) == []  # after [3, 5]
    assert ev.on_probe(MISH, 5, True, []) == [SealCei("p/0:1")]


def test_overlapping_trigger_windows_are_decided_by_one_probe() -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "every": "2m", "slack": "2m"}))
    ev.on_tick(0)
    ev.on_tick(1)
    ev.on_tick(2)  # windows [0, 2] and [2, 4]
    assert ev.on_probe(MISH, 2, True, [Entry(title="x")]) == [
        RevealEi("p/0:0", CNN, 2, 12, True),
        RevealEi("p/0:1", CNN, 2, 12, True),
    ]


# --------------------------------------------------------------------------- temporal schedules


@pytest.mark.parametrize(
    ("trigger", "chronons", "fires"),
    [
        ({"every": "3m"}, range(10), [0, 3, 6, 9]),
        ({"every": "90s"}, range(7), [0, 2, 4, 6]),  # 1.5 chronons rounds up to 2
        ({"every": "1m", "slack": "0s"}, range(3), [0, 1, 2]),
        ({"every": "5m"}, range(3, 14), [3, 8, 13]),  # anchored at the first tick seen
        ({"cron": "*/5 * * * *"}, range(16), [0, 5, 10, 15]),
        ({"cron": "2-4 * * * *"}, range(8), [2, 3, 4]),
        ({"cron": "0 1 * * *"}, range(200), [60]),
        # 01:00 in Paris is 00:00 UTC in January.
        ({"cron": "0 1 * * *", "timezone": "Europe/Paris"}, range(200), [0]),
        ({"cron": "0 0 * * tue"}, range(3000), [1440]),  # origin is a Monday
    ],
)
def test_fire_chronons(trigger: dict[str, Any], chronons: range, fires: list[int]) -> None:
    # A long grace: no stale trigger CEI is swept (sealed) inside these ranges.
    ev = evaluator(trigger_body({"feed": "FEED_MISH", **trigger}), probe_grace=10_000)
    opened = ticks(ev, chronons)
    assert sorted(opened) == fires
    slack = 1 if "slack" not in trigger else 0
    for t, ops in opened.items():
        [op] = ops
        assert isinstance(op, OpenCei) and op.eis == ((MISH, t, t + slack),) and not op.sealed


def test_cron_fire_times_inside_a_chronon_map_to_that_chronon() -> None:
    # 5-minute chronons: fires at :00 :05 :10 ... are chronons 0, 1, 2; "*/2" fires at
    # minutes 0,2,4 (chronon 0), 6,8 (1), 10,12,14 (2): coalesced into one CEI per chronon.
    ev = TriggerEvaluator(ChrononGrid(ORIGIN, 300.0))
    ev.add_profile("p", ProfileSpec.model_validate(trigger_body({"feed": "FEED_MISH", "cron": "*/2 * * * *"})), FEEDS)
    assert sorted(ticks(ev, range(4))) == [0, 1, 2, 3]
    ev2 = TriggerEvaluator(ChrononGrid(ORIGIN + timedelta(seconds=30), 60.0))
    ev2.add_profile("p", ProfileSpec.model_validate(trigger_body({"feed": "FEED_MISH", "cron": "*/5 * * * *"})), FEEDS)
    # Chronon c covers [00:00:30 + c min, ...): 00:05 falls in chronon 4.
    assert sorted(ticks(ev2, range(12))) == [4, 9]


def test_missed_fires_are_coalesced_after_a_gap_in_ticks() -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "every": "3m", "slack": "2m"}))
    assert ev.on_tick(0) == [OpenCei("p/0:0", "p", "p/0", ((MISH, 0, 2),), False)]
    # Down from 1 to 13: fires 3, 6, 9, 12 were missed; 12's window [12, 14] still reaches 13.
    assert ev.on_tick(13) == [OpenCei("p/0:1", "p", "p/0", ((MISH, 13, 14),), False)]
    assert ticks(ev, range(14, 19)) == {15: [OpenCei("p/0:2", "p", "p/0", ((MISH, 15, 17),), False)], 18: [OpenCei("p/0:3", "p", "p/0", ((MISH, 18, 20),), False)]}
    # The same for cron: fires 5 and 10 missed, 10's window [10, 14] reaches 13.
    cron = evaluator(trigger_body({"feed": "FEED_MISH", "cron": "*/5 * * * *", "slack": "4m"}))
    assert cron.on_tick(0) == [OpenCei("p/0:0", "p", "p/0", ((MISH, 0, 4),), False)]
    assert cron.on_tick(13) == [OpenCei("p/0:1", "p", "p/0", ((MISH, 13, 14),), False)]
    assert cron.on_tick(15) == [OpenCei("p/0:2", "p", "p/0", ((MISH, 15, 19),), False)]
    # 20's window [20, 24] is over, 25's [25, 29] reaches 27.
    assert cron.on_tick(27) == [OpenCei("p/0:3", "p", "p/0", ((MISH, 27, 29),), False)]
    assert cron.snapshot_state("p/0")["next_fire"] == 30
    # A gap past the window opens nothing for it.
    ev2 = evaluator(trigger_body({"feed": "FEED_MISH", "every": "5m", "slack": "1m"}))
    ev2.on_tick(0)
    assert ev2.on_tick(12) == []  # fire 10's window [10, 11] is over
    assert sorted(ticks(ev2, range(13, 21))) == [15, 20]


@pytest.mark.parametrize(
    ("period", "fires"),
    [
        ({"start": "2026-01-05T00:05:00Z", "end": "2026-01-05T00:10:00Z"}, [5, 6, 7, 8, 9]),
        ({"start": "2026-01-05T00:04:30Z"}, [5, 6, 7, 8, 9, 10, 11]),  # from the first chronon beginning after
        ({"end": "2026-01-05T00:03:30Z"}, [0, 1, 2, 3]),  # chronon 3 begins before the end
        ({"start": "2026-01-06T00:00:00Z"}, []),
        ({"end": "2026-01-04T00:00:00Z"}, []),
    ],
)
def test_period_bounds(period: dict[str, str], fires: list[int]) -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "every": "1m"}, period=period))
    assert sorted(ticks(ev, range(12))) == fires


def test_every_is_anchored_at_the_period_start() -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "every": "4m"}, period={"start": "2026-01-05T00:06:00Z"}))
    assert sorted(ticks(ev, range(20))) == [6, 10, 14, 18]


def test_period_applies_to_notifications() -> None:
    body = trigger_body({"feed": "FEED_MISH", "on": "ping"}, period={"start": "2026-01-05T00:05:00Z", "end": "2026-01-05T00:07:00Z"})
    ev = evaluator(body)
    opened = [t for t in range(10) if ev.on_notification(MISH, t)]
    assert opened == [5, 6]


# --------------------------------------------------------------------------- conditions


@pytest.mark.parametrize(
    ("when", "batches", "fired"),
    [
        # every 3rd new entry: counts cross 3 and 6
        ({"every_nth": 3}, [1, 1, 1, 1, 1, 1, 0], [False, False, True, False, False, True, False]),
        ({"every_nth": 3}, [2, 2, 2], [False, True, True]),
        ({"every_nth": 1}, [1, 0, 2], [True, False, True]),
        ({"every_nth": 4}, [9], [True]),
    ],
)
def test_every_nth(when: dict[str, Any], batches: list[int], fired: list[bool]) -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "every": "1m", "slack": "0s", "when": when}))
    outcome = []
    for t, n in enumerate(batches):
        ev.on_tick(t)
        ops = ev.on_probe(MISH, t, True, [Entry(title=f"e{t}.{i}") for i in range(n)])
        outcome.append(isinstance(ops[0], RevealEi))
    assert outcome == fired


def test_every_nth_counts_entries_seen_outside_windows_and_only_matching_ones() -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "every": "10m", "slack": "0s", "when": {"contains": ["oil"], "every_nth": 2}}))
    ev.on_tick(0)
    assert ev.on_probe(MISH, 0, True, [Entry(title="gold")]) == [SealCei("p/0:0")]  # not counted
    assert ev.on_probe(MISH, 4, True, [Entry(title="oil 1")]) == []  # counted, no open CEI
    ev.on_tick(10)
    assert ev.on_probe(MISH, 10, True, [Entry(title="oil 2")]) == [RevealEi("p/0:1", CNN, 10, 20, True)]
    assert ev.snapshot_state("p/0")["nth_count"] == 2


@pytest.mark.parametrize(
    ("regex", "entry", "fires"),
    [
        (r"\boil\b", Entry(title="Big oil news"), True),
        (r"\boil\b", Entry(title="boiling"), False),
        (r"(?i)^BREAKING", Entry(summary="breaking: oil"), True),
        (r"^BREAKING", Entry(summary="breaking: oil"), False),  # case-sensitive unless (?i)
        (r"\$\d+", Entry(summary="up $42 today"), True),
        (r"\$\d+", Entry(content="up $42 today"), False),  # content only with 'fields' (issue 43)
        (r"\$\d+", Entry(), False),
    ],
)
def test_regex_condition(regex: str, entry: Entry, fires: bool) -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "every": "1m", "when": {"regex": regex}}))
    ev.on_tick(0)
    [op] = ev.on_probe(MISH, 0, True, [entry])
    assert isinstance(op, RevealEi) == fires


def test_contains_and_regex_must_both_hold_on_one_entry() -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "every": "1m", "when": {"contains": ["oil"], "regex": r"\d"}}))
    ev.on_tick(0)
    assert ev.on_probe(MISH, 0, True, [Entry(title="oil"), Entry(title="42")]) == [SealCei("p/0:0")]
    ev.on_tick(1)
    assert ev.on_probe(MISH, 1, True, [Entry(title="oil at 42")]) == [RevealEi("p/0:1", CNN, 1, 11, True)]


def test_no_condition_fires_on_any_new_entry() -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "every": "1m"}))
    ev.on_tick(0)
    assert ev.on_probe(MISH, 0, True, []) == [SealCei("p/0:0")]
    ev.on_tick(1)
    assert ev.on_probe(MISH, 1, True, [Entry()]) == [RevealEi("p/0:1", CNN, 1, 11, True)]


# --------------------------------------------------------------------------- notifications and overwrite


def test_ping_trigger_opens_one_cei_per_chronon() -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "on": "ping", "slack": "3m"}))
    assert ev.on_notification(MISH, 7) == [OpenCei("p/0:0", "p", "p/0", ((MISH, 7, 10),), False)]
    assert ev.on_notification(MISH, 7) == []  # hubs repeat pings
    assert ev.on_notification(CNN, 8) == []
    assert ev.on_notification(MISH, 9) == [OpenCei("p/0:1", "p", "p/0", ((MISH, 9, 12),), False)]
    assert ev.on_tick(10) == []  # not temporal
    assert ev.on_probe(MISH, 9, True, [Entry(title="x")]) == [
        RevealEi("p/0:0", CNN, 9, 19, True),
        RevealEi("p/0:1", CNN, 9, 19, True),
    ]


def test_update_trigger_default_slack_is_one_chronon() -> None:
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "on": "update"}))
    assert ev.on_notification(MISH, 4) == [OpenCei("p/0:0", "p", "p/0", ((MISH, 4, 5),), False)]


def overwrite_finish(models: FeedUpdateModels, t: int) -> int:
    """The finish of the overwrite query EI a trigger at chronon ``t`` opens for feed Q."""
    body = trigger_body({"feed": "FEED_MISH", "on": "ping"},
                        query=[{"feed": "Q", "overwrite": True}, {"feed": "FEED_CNN", "within": "0s"}])
    ev = evaluator(body, update_models=models)
    ev.on_notification(MISH, t)
    ops = ev.on_probe(MISH, t, True, [Entry()])
    assert ops[1] == RevealEi("p/0:0", CNN, t, t, True)  # within 0s: [t, t]
    assert isinstance(ops[0], RevealEi) and (ops[0].resource, ops[0].start) == (20, t)
    return ops[0].finish


def test_overwrite_life_lasts_until_the_models_expected_next_update() -> None:
    models = FeedUpdateModels()
    # Nothing known of Q: the population prior, one update per 6 h at first: [t, t + 360 - 1].
    assert 1 / models.prior.mean == 6 * 3600
    assert overwrite_finish(models, 100) == 100 + 359
    # Q learnt as a Poisson feed of 2 updates per hour: about its mean interval of 30 min.
    start = ORIGIN.timestamp() - 2 * 86_400
    models.observe_document(20, ORIGIN.timestamp(), [start + 1800 * k + 60 * (k % 3) for k in range(96)])
    assert models.estimate(20).kind == "poisson"
    expected = models.next_expected_update(20, GRID.start_of(100).timestamp())
    assert overwrite_finish(models, 100) == 100 + math.ceil((expected - GRID.start_of(100).timestamp()) / 60) - 1
    assert 100 + 25 <= overwrite_finish(models, 100) <= 100 + 35


def test_overwrite_life_of_a_daily_digest_ends_before_its_next_slot() -> None:
    """A near-periodic model: the life depends on when the EI opens, not only on the mean interval."""
    models = FeedUpdateModels()
    rng = np.random.default_rng(5)
    day = 86_400.0
    times = [ORIGIN.timestamp() - 60 * day + k * day + 6 * 3600 + float(rng.normal(0, 300)) for k in range(60)]
    for k in range(10, 61, 10):
        models.observe_document(20, times[k - 1] + 3600, times[k - 10:k])
    assert models.estimate(20).kind == "periodic"
    # ORIGIN is a Monday 00:00 UTC: chronon 5 * 60 is 05:00, the slot at 06:00.
    assert 5 * 60 + 55 <= overwrite_finish(models, 5 * 60) <= 5 * 60 + 60
    # Opened at 07:00, just after the slot: it lives until the next day's, about 23 h (1,380 chronons).
    assert 7 * 60 + 1370 <= overwrite_finish(models, 7 * 60) <= 7 * 60 + 1385


def test_overwrite_life_is_at_least_one_chronon_and_at_most_a_day() -> None:
    models = FeedUpdateModels()
    start = ORIGIN.timestamp() - 86_400
    models.observe_document(20, ORIGIN.timestamp(), [start + 10.0 * k * 60 for k in range(144)])  # every 10 min
    slow = FeedUpdateModels(UpdateModelSettings(default_prior=GammaPrior(1.0, 1e9)))  # one update per ~30 years
    assert overwrite_finish(slow, 50) == 50 + MAX_OVERWRITE - 1
    assert 50 + 5 <= overwrite_finish(models, 50) <= 50 + 15


def test_the_evaluator_reads_the_update_models_and_never_feeds_them() -> None:
    """Whoever owns the models teaches them (the service's loop); an update a probe found is not counted twice."""
    models = FeedUpdateModels()
    ev = evaluator(trigger_body({"feed": "FEED_MISH", "on": "update"}), update_models=models)
    ev.on_notification(MISH, 3)
    ev.on_probe(MISH, 12, True, [Entry()], previous_success=11)
    assert models.feeds() == []


# --------------------------------------------------------------------------- AuctionWatch


def test_watch_rule_builds_auctionwatch_ceis_by_hand() -> None:
    ev = evaluator(AUCTIONS, profile_id="a")
    A, B, C = 10, 11, 12
    pings = [(A, 1), (A, 2), (B, 3), (A, 4), (C, 5), (A, 5), (B, 6), (C, 7), (C, 8), (A, 9), (B, 9), (A, 10)]
    ops = [op for r, t in pings for op in ev.on_notification(r, t)]
    assert ops == [
        # CEI 0: first update of each feed.
        OpenCei("a/0:0", "a", "a/0", ((A, 1, 11),), sealed=False),
        RevealEi("a/0:0", B, 3, 13, seal=False),
        RevealEi("a/0:0", C, 5, 15, seal=True),
        # CEI 1: each feed's first update strictly after 5 (A at 5 does not count).
        OpenCei("a/0:1", "a", "a/0", ((B, 6, 16),), sealed=False),
        RevealEi("a/0:1", C, 7, 17, seal=False),
        RevealEi("a/0:1", A, 9, 19, seal=True),
        # CEI 2: strictly after 9, so B at 9 waits; A at 10 opens it.
        OpenCei("a/0:2", "a", "a/0", ((A, 10, 20),), sealed=False),
    ]


def test_single_feed_watch_opens_sealed_ceis() -> None:
    ev = evaluator({"name": "w", "rules": [{"name": "one", "watch": {"feeds": ["A"], "within": "2m"}}]})
    ops = [op for t in (3, 3, 4) for op in ev.on_notification(10, t)]
    assert ops == [OpenCei("p/0:0", "p", "p/0", ((10, 3, 5),), True), OpenCei("p/0:1", "p", "p/0", ((10, 4, 6),), True)]


def test_missed_watch_cei_is_sealed_and_keeps_its_place() -> None:
    ev = evaluator(AUCTIONS)
    ev.on_notification(10, 1)
    assert ev.on_trigger_missed("p/0:0") == [SealCei("p/0:0")]
    assert ev.on_trigger_missed("p/0:0") == []
    # The rest of CEI 0 is built silently; CEI 1 starts after its last start (5).
    assert [op for r, t in [(11, 3), (12, 5), (10, 5), (10, 6)] for op in ev.on_notification(r, t)] == [
        OpenCei("p/0:1", "p", "p/0", ((10, 6, 16),), False)
    ]


def test_closed_watch_cei_emits_nothing_and_keeps_its_place() -> None:
    # close() is on_trigger_missed without the seal: the verdict is already stored elsewhere.
    ev = evaluator(AUCTIONS)
    ev.on_notification(10, 1)
    assert ev.open_cei_ids() == ["p/0:0"]
    ev.close(["p/0:0", "p/0:99"])  # an unknown id is ignored
    assert ev.open_cei_ids() == [] and ev.take_dirty() == ["p/0"]
    assert ev.on_trigger_missed("p/0:0") == []
    assert [op for r, t in [(11, 3), (12, 5), (10, 5), (10, 6)] for op in ev.on_notification(r, t)] == [
        OpenCei("p/0:1", "p", "p/0", ((10, 6, 16),), False)
    ]


def _ceis_from_ops(ops: list[Op]) -> list[frozenset[tuple[int, int, int]]]:
    eis: dict[str, list[tuple[int, int, int]]] = {}
    done: list[str] = []
    for op in ops:
        if isinstance(op, OpenCei):
            eis[op.cei_id] = list(op.eis)
            if op.sealed:
                done.append(op.cei_id)
        elif isinstance(op, RevealEi):
            eis[op.cei_id].append((op.resource, op.start, op.finish))
            if op.seal:
                done.append(op.cei_id)
    return [frozenset(eis[c]) for c in done]


@settings(max_examples=60, deadline=None)
@given(
    updates=st.lists(st.lists(st.integers(0, 60), max_size=12, unique=True).map(sorted), min_size=1, max_size=4),
    window=st.integers(0, 5),
)
def test_watch_rule_matches_the_simulators_auctionwatch_generator(updates: list[list[int]], window: int) -> None:
    k = len(updates)
    feeds = {f"F{i}": i for i in range(k)}
    ev = TriggerEvaluator(GRID)
    body = {"name": "w", "rules": [{"name": "w", "watch": {"feeds": list(feeds), "within": f"{window}m"}}]}
    ev.add_profile("w", ProfileSpec.model_validate(body), feeds)
    pings = sorted((t, r) for r, ups in enumerate(updates) for t in ups)
    ops = [op for t, r in pings for op in ev.on_notification(r, t)]
    expected = profile_ceis(list(range(k)), updates, Life.WINDOW, window, 10_000, Reveal.RELEASE)
    assert _ceis_from_ops(ops) == [frozenset((e.resource, e.start, e.finish) for e in c) for c in expected]


# --------------------------------------------------------------------------- lifecycle and state


def test_unknown_feed_names_the_field() -> None:
    ev = TriggerEvaluator(GRID)
    with pytest.raises(UnknownFeedError, match=r"rules\.0\.query\.1\.feed: unknown feed 'FEED_MONEY'"):
        ev.add_profile("p", ProfileSpec.model_validate(MOTIVATING), {"FEED_MISH": 0, "FEED_CNN": 1})
    with pytest.raises(UnknownFeedError, match=r"rules\.0\.watch\.feeds\.2\.*"):
        ev.add_profile("a", ProfileSpec.model_validate(AUCTIONS), lambda f: {"A": 1, "B": 2}[f])
    assert ev.profile_ids() == []


def test_remove_profile_seals_open_ceis_and_replace_continues_ids() -> None:
    ev = evaluator(MOTIVATING)
    ev.add_profile("a", ProfileSpec.model_validate(AUCTIONS), FEEDS)
    ev.on_tick(0)
    ev.on_notification(10, 0)
    assert ev.remove_profile("a") == [SealCei("a/0:0")]
    rule_ids, ops = ev.replace_profile("p", ProfileSpec.model_validate(MOTIVATING), FEEDS)
    assert (rule_ids, ops) == (["p/0"], [SealCei("p/0:0")])
    assert ev.on_tick(1) == [OpenCei("p/0:1", "p", "p/0", ((MISH, 1, 3),), False)]
    ev.add_profile("a", ProfileSpec.model_validate(AUCTIONS), FEEDS)
    assert ev.on_notification(10, 2) == [OpenCei("a/0:1", "a", "a/0", ((10, 2, 12),), False)]
    assert ev.on_notification(MISH, 2) == []
    with pytest.raises(ValueError, match="already installed"):
        ev.add_profile("a", ProfileSpec.model_validate(AUCTIONS), FEEDS)


def test_missed_trigger_is_sealed_once_and_stale_ones_are_swept() -> None:
    ev = evaluator(MOTIVATING, probe_grace=5)
    ev.on_tick(0)
    ev.on_tick(3)
    assert ev.on_trigger_missed("p/0:0") == [SealCei("p/0:0")]
    assert ev.on_probe(MISH, 1, True, [Entry(title="oil")]) == []
    assert ticks(ev, range(4, 11)) == {
        6: [OpenCei("p/0:2", "p", "p/0", ((MISH, 6, 8),), False)],
        9: [OpenCei("p/0:3", "p", "p/0", ((MISH, 9, 11),), False)],
    }
    assert ev.on_tick(11) == [SealCei("p/0:1")]  # window [3, 5] ended more than 5 chronons ago


def _script() -> list[tuple[Any, ...]]:
    oil, gold = [Entry(title="oil")], [Entry(title="gold")]
    events: list[tuple[Any, ...]] = []
    for t in range(40):
        events.append(("tick", t))
        if t % 3 == 1:
            events.append(("probe", MISH, t, True, oil if t % 2 else gold))
        if t % 7 == 2:
            events.append(("ping", 10 + t % 3, t))
            events.append(("ping", 20, t))
        if t % 5 == 0:
            events.append(("probe", 20, t, True, [Entry(title=str(t))]))
    return events


def _run(ev: TriggerEvaluator, events: list[tuple[Any, ...]]) -> list[Op]:
    out: list[Op] = []
    for kind, *args in events:
        if kind == "tick":
            out += ev.on_tick(*args)
        elif kind == "probe":
            out += ev.on_probe(*args)
        else:
            out += ev.on_notification(*args)
    return out


def _all_profiles() -> dict[str, dict[str, Any]]:
    return {
        "p": MOTIVATING,
        "a": AUCTIONS,
        "n": trigger_body(
            {"feed": "FEED_MISH", "cron": "*/4 * * * *", "when": {"every_nth": 2}},
            query=[{"feed": "Q", "overwrite": True}],
        ),
        "q": trigger_body({"feed": "Q", "on": "ping", "slack": "2m"}),
        # Checks with gaps between them (windows [0, 1], [5, 6], ...): probes in the gaps are carried.
        "g": trigger_body({"feed": "FEED_MISH", "every": "5m", "slack": "1m", "when": {"contains": ["oil"]}}),
        # Updates found by probes, and pings a later probe confirms.
        "u": trigger_body({"feed": "FEED_MISH", "on": "update", "slack": "2m", "when": {"contains": ["oil"]}}),
    }


def _full_evaluator() -> TriggerEvaluator:
    ev = TriggerEvaluator(GRID)
    for pid, body in _all_profiles().items():
        ev.add_profile(pid, ProfileSpec.model_validate(body), FEEDS)
    return ev


@pytest.mark.parametrize("cut", [0, 17, 45, 80])
def test_snapshot_restore_continues_identically(cut: int) -> None:
    events = _script()
    expected = _run(_full_evaluator(), events)
    assert any(isinstance(op, RevealEi) for op in expected) and any(isinstance(op, SealCei) for op in expected)

    first = _full_evaluator()
    before = _run(first, events[:cut])
    # What the service stores of the evaluator: rule states, as JSON (the update models are the service's).
    stored = json.dumps(
        {
            "rules": {rid: first.snapshot_state(rid) for pid in first.profile_ids() for rid in first.rule_ids(pid)},
        }
    )

    restarted = TriggerEvaluator(GRID)
    loaded = json.loads(stored)
    for pid, body in _all_profiles().items():
        for rid in restarted.add_profile(pid, ProfileSpec.model_validate(body), FEEDS):
            restarted.restore_state(rid, loaded["rules"][rid])
    assert before + _run(restarted, events[cut:]) == expected


def test_take_dirty_and_bad_state() -> None:
    ev = evaluator(MOTIVATING)
    assert ev.take_dirty() == ["p/0"]
    assert ev.take_dirty() == []
    ev.on_tick(1)
    assert ev.take_dirty() == ["p/0"]
    ev.on_tick(2)
    assert ev.take_dirty() == []
    with pytest.raises(RuleStateError, match="not installed"):
        ev.restore_state("nope", {})
    with pytest.raises(RuleStateError, match="expected version 1 kind 'trigger'"):
        ev.restore_state("p/0", {"version": 1, "kind": "watch"})
    with pytest.raises(RuleStateError, match="malformed"):
        ev.restore_state("p/0", {"version": 1, "kind": "trigger", "seq": 1})


class RecordingEngine:
    """Records calls; stands in for the engine only to test apply_ops' translation."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def add_cei(self, cei_id: str, profile: str, eis: Any, *, sealed: bool = True) -> None:
        self.calls.append(("add_cei", cei_id, profile, tuple(eis), sealed))

    def reveal_ei(self, cei_id: str, resource: int, start: int, finish: int, *, seal: bool = False) -> int:
        self.calls.append(("reveal_ei", cei_id, resource, start, finish, seal))
        return 0

    def seal(self, cei_id: str) -> None:
        self.calls.append(("seal", cei_id))


def test_apply_ops_translates_each_op() -> None:
    engine = RecordingEngine()
    apply_ops(engine, [OpenCei("c", "p", "r", ((1, 2, 3),), False), RevealEi("c", 4, 2, 12, True), SealCei("d")])
    assert engine.calls == [("add_cei", "c", "p", ((1, 2, 3),), False), ("reveal_ei", "c", 4, 2, 12, True), ("seal", "d")]


def test_failed_replace_keeps_the_old_profile_and_custom_rule_ids_name_ceis() -> None:
    ev = TriggerEvaluator(GRID)
    assert ev.add_profile("p", ProfileSpec.model_validate(MOTIVATING), FEEDS, rule_ids=["17"]) == ["17"]
    assert ev.on_tick(0) == [OpenCei("17:0", "p", "17", ((MISH, 0, 2),), False)]
    bad = trigger_body({"feed": "NOPE", "every": "1m"})
    with pytest.raises(UnknownFeedError, match=r"rules\.0\.trigger\.feed: unknown feed 'NOPE'"):
        ev.replace_profile("p", ProfileSpec.model_validate(bad), FEEDS, rule_ids=["17"])
    with pytest.raises(ValueError, match="1 rules"):
        ev.replace_profile("p", ProfileSpec.model_validate(MOTIVATING), FEEDS, rule_ids=["17", "18"])
    ev.add_profile("other", ProfileSpec.model_validate(AUCTIONS), FEEDS, rule_ids=["18"])
    with pytest.raises(ValueError, match="unique"):
        ev.replace_profile("p", ProfileSpec.model_validate(MOTIVATING), FEEDS, rule_ids=["18"])
    assert ev.profile_ids() == ["p", "other"]
    assert ev.on_tick(3) == [OpenCei("17:1", "p", "17", ((MISH, 3, 5),), False)]


_EVENT = st.one_of(
    st.tuples(st.just("probe"), st.sampled_from([MISH, 10, 20]), st.booleans(), st.sampled_from(["oil", "gold", ""])),
    st.tuples(st.just("ping"), st.sampled_from([10, 11, 12, 20, MISH])),
    st.tuples(st.just("missed"), st.integers(0, 5)),
)


@settings(max_examples=150, deadline=None)
@given(script=st.lists(st.lists(_EVENT, max_size=3), min_size=1, max_size=25), data=st.data())
def test_snapshot_restore_at_any_chronon_property(script: list[list[tuple[Any, ...]]], data: st.DataObject) -> None:
    """Random ticks, probes, pings and misses: stopping, storing JSON and restoring changes nothing.

    Probes pass the feed's previous successful probe, as the service does (the loop's own
    record, restored from the store), so they are update observations too."""
    cut = data.draw(st.integers(0, len(script)))
    previous: list[dict[int, int]] = []  # before each chronon: feed -> its last successful probe
    last: dict[int, int] = {}
    for t, events in enumerate(script):
        previous.append(dict(last))
        last.update({e[1]: t for e in events if e[0] == "probe" and e[2]})

    def play(ev: TriggerEvaluator, chronons: range) -> list[Op]:
        out: list[Op] = []
        for t in chronons:
            out += ev.on_tick(t)
            for event in script[t]:
                if event[0] == "probe":
                    _, r, ok, word = event
                    out += ev.on_probe(r, t, ok, [Entry(title=word)] if word else [],
                                       previous_success=previous[t].get(r))
                elif event[0] == "ping":
                    out += ev.on_notification(event[1], t)
                else:
                    opened = ev.open_cei_ids()
                    if opened:
                        out += ev.on_trigger_missed(opened[event[1] % len(opened)])
        return out

    expected = play(_full_evaluator(), range(len(script)))
    first = _full_evaluator()
    before = play(first, range(cut))
    stored = json.dumps(
        {
            "rules": {rid: first.snapshot_state(rid) for pid in first.profile_ids() for rid in first.rule_ids(pid)},
        }
    )
    loaded = json.loads(stored)
    restarted = TriggerEvaluator(GRID)
    for pid, body in _all_profiles().items():
        for rid in restarted.add_profile(pid, ProfileSpec.model_validate(body), FEEDS):
            restarted.restore_state(rid, loaded["rules"][rid])
    assert before + play(restarted, range(cut, len(script))) == expected


def test_the_feed_layers_entry_satisfies_entrylike() -> None:
    from proxy.feeds.results import Entry as FeedEntry
    from proxy.rules import EntryLike

    entry: EntryLike = FeedEntry(
        identity="urn:1", title=None, link=None, summary="<p>Crude OIL</p>", content=None, published=None
    )
    ev = evaluator(MOTIVATING)
    ev.on_tick(0)
    assert ev.on_probe(MISH, 0, True, [entry]) == [
        RevealEi("p/0:0", CNN, 0, 10, False),
        RevealEi("p/0:0", MONEY, 0, 10, True),
    ]


# --------------------------------------------------------------------------- issue 43: alerts

def alert_body(when: dict[str, Any] | None = None, **trigger: Any) -> dict[str, Any]:
    spec = {"feed": "FEED_MISH", "on": "update", **trigger}
    if when is not None:
        spec["when"] = when
    return {"name": "p", "rules": [{"name": "oil alert", "trigger": spec}]}


def test_an_alert_is_the_trigger_ei_alone_sealed_fired_when_its_condition_holds() -> None:
    ev = evaluator(alert_body({"contains": ["oil"]}, slack="3m"))
    assert ev.on_notification(MISH, 4) == [OpenCei("p/0:0", "p", "p/0", ((MISH, 4, 7),), False)]
    (seal,) = ev.on_probe(MISH, 5, True, [Entry(title="Oil prices jump")])
    assert seal == SealCei("p/0:0") and seal.fired
    ev.on_notification(MISH, 9)
    (seal,) = ev.on_probe(MISH, 10, True, [Entry(title="Gold prices jump")])
    assert seal == SealCei("p/0:1") and not seal.fired


def test_an_alerts_default_slack_is_fifteen_minutes_and_a_late_probe_still_decides_it() -> None:
    ev = evaluator(alert_body({"contains": ["oil"]}))
    # 60 s chronons: [4, 4 + 15]
    assert ev.on_notification(MISH, 4) == [OpenCei("p/0:0", "p", "p/0", ((MISH, 4, 19),), False)]
    # The probe that finds the entry after the window: the engine has missed the CEI, but
    # the user is told that the rule fired (the missed event carries it).
    (seal,) = ev.on_probe(MISH, 30, True, [Entry(summary="crude oil at $90")])
    assert seal == SealCei("p/0:0") and seal.fired


def test_an_alert_found_by_a_probe_opens_and_decides_in_the_same_probe() -> None:
    # Pull only: the probe finds an entry dated in chronon 6, after a success at 2.
    ev = evaluator(alert_body({"contains": ["oil"]}, slack="5m"))
    assert ev.on_probe(MISH, 2, True, [Entry(title="old")]) == []
    ops = ev.on_probe(MISH, 8, True, [Entry(title="Oil!", published=GRID.start_of(6))],
                      previous_success=2)
    assert ops == [OpenCei("p/0:0", "p", "p/0", ((MISH, 6, 11),), False), SealCei("p/0:0")]
    assert ops[1].fired  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("when", "entry", "fires"),
    [
        ({"all": ["oil", "iran"]}, Entry(title="Oil and Iran"), True),
        ({"all": ["oil", "iran"]}, Entry(title="Oil and gas"), False),
        ({"exclude": ["opinion"]}, Entry(title="Opinion: oil"), False),
        ({"exclude": ["opinion"]}, Entry(title="Oil"), True),
        ({"contains": ["oil"], "exclude": ["opinion"]}, Entry(title="oil", summary="an OPINION piece"), False),
        ({"contains": ["oil"], "fields": ["author"]}, Entry(title="oil", author="Mr Smith"), False),
        ({"contains": ["smith"], "fields": ["author"]}, Entry(title="oil", author="Mr Smith"), True),
        ({"contains": ["energy"], "fields": ["categories"]}, Entry(categories=("Energy", "World")), True),
        ({"contains": ["oil"], "fields": ["content"]}, Entry(content="oil spill"), True),
    ],
)
def test_conditions_on_fields_all_and_exclude_decide_the_alert(
    when: dict[str, Any], entry: Entry, fires: bool
) -> None:
    ev = evaluator(alert_body(when))
    ev.on_notification(MISH, 1)
    (seal,) = ev.on_probe(MISH, 1, True, [entry])
    assert seal == SealCei("p/0:0") and seal.fired is fires


def test_removing_a_rule_takes_its_keywords_out_of_the_feeds_index() -> None:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("a", ProfileSpec.model_validate(alert_body({"contains": ["oil"]})), FEEDS)
    ev.add_profile("b", ProfileSpec.model_validate(alert_body({"contains": ["gold"]})), FEEDS)
    ev.remove_profile("a")
    ev.on_notification(MISH, 1)
    (seal,) = ev.on_probe(MISH, 1, True, [Entry(title="oil"), Entry(title="gold")])
    assert seal == SealCei("b/0:0") and seal.fired
    ev.remove_profile("b")
    assert not ev._index  # no empty automaton left behind
