"""Feeds that never ping: a probe that finds new entries is an update for every rule on the feed.

The engine is the real one; the calls follow the service's order (tick, pings,
``on_probe`` before the capture, the previous successful probe passed in).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from proxy.core.engine import CeiState
from proxy.rules import ChrononGrid, OpenCei, ProfileSpec, RevealEi, SealCei, TriggerEvaluator
from proxy.rules.evaluator import RuleStateError
from proxy.rules.updates import changes_since, estimate_update_chronon, update_chronons
from tests.test_rules_engine import FEEDS, Entry, Proxy

GRID = ChrononGrid(datetime(2026, 1, 5, tzinfo=UTC), 60.0)
MISH, CNN, A, B = FEEDS["FEED_MISH"], FEEDS["FEED_CNN"], FEEDS["A"], FEEDS["B"]


def at(t: float) -> datetime:
    """The instant ``t`` chronons after the grid's origin."""
    return GRID.origin + timedelta(seconds=t * GRID.length)


@pytest.mark.parametrize(
    ("published", "previous", "probe", "expected"),
    [
        ([at(13.5)], 10, 20, 13),  # dated inside (10, 20]: its chronon
        ([at(17), at(12.2), None], 10, 20, 12),  # the earliest new entry
        ([], 10, 20, 16),  # no date: the midpoint of [11, 20], rounded up
        ([None, None], 10, 20, 16),
        ([at(8)], 10, 20, 11),  # a little before the previous probe (cache lag): clipped to 11
        ([at(24)], 10, 20, 20),  # a little ahead (publisher's clock): clipped to the probe
        ([datetime(1, 1, 1, tzinfo=UTC)], 10, 20, 16),  # junk: ignored
        ([at(10 - 500)], 10, 20, 16),  # back-dated by days: says nothing about (10, 20]
        ([at(20 + 500)], 10, 20, 16),  # far future: ignored
        ([datetime(1, 1, 1, tzinfo=UTC), at(19)], 10, 20, 19),  # junk beside a good date
        ([at(3)], 4, 5, 5),  # a one-chronon interval: the only possible chronon
        ([], 4, 5, 5),
    ],
)
def test_estimate_update_chronon(published: list[datetime | None], previous: int, probe: int, expected: int) -> None:
    assert estimate_update_chronon(published, previous, probe, GRID) == expected


@pytest.mark.parametrize(
    ("published", "expected"),
    [
        ([at(17), at(12.2), None, at(12.7)], [12, 17]),  # distinct chronons, ascending, undated left out
        ([at(8), at(11.5)], [11]),  # cache lag clips onto the first chronon: one change
        ([datetime(1, 1, 1, tzinfo=UTC), at(19), at(24)], [19, 20]),  # junk ignored, the future clipped
        ([None], [16]),  # no usable date: the midpoint alone
    ],
)
def test_update_chronons_lists_each_dated_change(published: list[datetime | None], expected: list[int]) -> None:
    assert update_chronons(published, 10, 20, GRID) == expected
    assert estimate_update_chronon(published, 10, 20, GRID) == expected[0]


def test_estimate_needs_a_probe_after_the_previous_success() -> None:
    with pytest.raises(ValueError, match="must come after"):
        estimate_update_chronon([], 7, 7, GRID)


def _proxy(rules: list[dict[str, object]]) -> Proxy:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": rules}), FEEDS)
    return Proxy(ev)


ON_UPDATE = {
    "name": "oil",
    "trigger": {"feed": "FEED_MISH", "on": "update", "slack": "3m", "when": {"contains": ["oil"]}},
    "query": [{"feed": "FEED_CNN", "within": "10m"}],
}


def test_an_on_update_trigger_fires_from_a_probe_that_found_new_entries() -> None:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [ON_UPDATE]}), FEEDS)
    oil = [Entry(title="Oil at $90", published=at(11.4))]
    # The first success is the feed's backlog: nothing fires.
    assert ev.on_probe(MISH, 5, True, oil) == []
    # Changed in (5, 12], dated at 11: the trigger EI [11, 14] opens and this probe decides it.
    assert ev.on_probe(MISH, 12, True, oil, previous_success=5) == [
        OpenCei("p/0:0", "p", "p/0", ((MISH, 11, 14),), sealed=False),
        RevealEi("p/0:0", CNN, 12, 22, seal=True),
    ]
    # Nothing new, or a failed probe: no update.
    assert ev.on_probe(MISH, 13, True, [], previous_success=12) == []
    assert ev.on_probe(MISH, 14, False, oil, previous_success=13) == []
    # New entries without the keyword: the update still opens a CEI, sealed at rank 1.
    assert ev.on_probe(MISH, 20, True, [Entry(title="Gold")], previous_success=13) == [
        OpenCei("p/0:1", "p", "p/0", ((MISH, 17, 20),), sealed=False),
        SealCei("p/0:1"),
    ]


def test_a_ping_and_the_probe_that_confirms_it_count_once() -> None:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [ON_UPDATE]}), FEEDS)
    opened = ev.on_notification(MISH, 11)
    assert opened == [OpenCei("p/0:0", "p", "p/0", ((MISH, 11, 14),), sealed=False)]
    oil = [Entry(title="oil", published=at(10.5))]
    # The probe finds the announced entry: it decides the pinged CEI, opens no second one.
    assert ev.on_probe(MISH, 12, True, oil, previous_success=8) == [RevealEi("p/0:0", CNN, 12, 22, seal=True)]
    # The update models count the ping and its probe once themselves (test_update_models); their
    # owner, the service's loop, teaches them: the evaluator only reads them.
    assert ev.models.feeds() == []
    # A later change with no ping is the probe's own observation again.
    later = [Entry(title="oil", published=at(25.2))]
    assert ev.on_probe(MISH, 30, True, later, previous_success=12) == [
        OpenCei("p/0:1", "p", "p/0", ((MISH, 25, 28),), sealed=False),
    ]


def test_on_update_trigger_on_the_engine_captured_when_found_in_time_missed_when_late() -> None:
    px = _proxy([ON_UPDATE])
    oil = [Entry(title="oil")]
    script = {
        0: {MISH: [Entry(title="old news")]},  # backlog
        4: {MISH: oil},  # changed in (0, 4], no date: 3 -> [3, 6], probed at 4: fires, CNN [4, 14]
        6: {CNN: []},  # captures CNN: CEI 0 complete
        30: {MISH: oil},  # changed in (4, 30], no date: 18 -> [18, 21]: found too late, missed
    }
    for t in range(32):
        px.chronon(t, script.get(t, {}))
    assert px.engine.state("p/0:0") is CeiState.CAPTURED
    assert px.engine.state("p/0:1") is CeiState.MISSED
    assert px.ev.open_cei_ids() == []
    assert px.engine.pending_ceis == 0


def test_watch_rule_over_two_feeds_that_never_ping_is_captured_by_probes() -> None:
    px = _proxy([{"name": "w", "watch": {"feeds": ["A", "B"], "within": "3m"}}])
    new = [Entry(title="bid")]
    probes: dict[int, dict[int, list[Entry] | None]] = {
        0: {A: [], B: []},  # first successes: nothing known before them
        2: {A: new},  # A changed in (0, 2]: midpoint 2 -> EI [2, 5], captured by this probe
        3: {B: new},  # B changed in (0, 3]: 2 -> EI [2, 5], captured: CEI 0 captured
        14: {A: new},  # A changed in (2, 14]: midpoint 9 -> [9, 12]: found late, CEI 1 missed
        15: {B: new},  # B changed in (3, 15]: 10 -> CEI 1's second EI (it keeps its place)
        17: {A: new, B: new},  # (14, 17] and (15, 17]: CEI 2 = A@16, B@17, captured at 17
    }
    for t in range(20):
        px.chronon(t, probes.get(t, {}))
    assert [px.engine.state(f"p/0:{i}") for i in range(3)] == [
        CeiState.CAPTURED,
        CeiState.MISSED,
        CeiState.CAPTURED,
    ]
    assert px.engine.pending_ceis == 0


def test_a_probe_whose_changes_straddle_a_watch_ceis_start_advances_it_with_the_later_one() -> None:
    """AuctionWatch takes each feed's first update after the previous CEI's last start, not the probe's first."""
    px = _proxy([{"name": "w", "watch": {"feeds": ["A", "B"], "within": "5m"}}])
    script: dict[int, dict[int, list[Entry] | None]] = {
        0: {A: [], B: []},  # baselines
        4: {A: [Entry(title="a1", published=at(3.5))]},  # A@3: CEI 0's first EI [3, 8]
        10: {B: [Entry(title="b1", published=at(9.5))]},  # B@9: CEI 0 = A@3, B@9, captured; CEI 1 starts after 9
        # A changed at 5 (before CEI 1's start: CEI 0 already has A) and at 11: CEI 1 takes A@11.
        12: {A: [Entry(title="a2", published=at(5.5)), Entry(title="a3", published=at(11.5))]},
        14: {B: [Entry(title="b2", published=at(13.5))]},  # B@13: CEI 1 = A@11, B@13, captured
    }
    for t in range(20):
        px.chronon(t, script.get(t, {}))
    assert [px.engine.state(f"p/0:{i}") for i in range(2)] == [CeiState.CAPTURED, CeiState.CAPTURED]
    assert px.engine.pending_ceis == 0


def test_one_probe_can_complete_a_watch_cei_and_begin_the_next() -> None:
    px = _proxy([{"name": "w", "watch": {"feeds": ["A", "B"], "within": "5m"}}])
    script: dict[int, dict[int, list[Entry] | None]] = {
        0: {A: [], B: []},
        4: {B: [Entry(title="b1", published=at(3.5))]},  # B@3: CEI 0's first EI
        # A changed at 5 (completes CEI 0: A@5, B@3) and at 8, after CEI 0's last start: CEI 1's A EI.
        9: {A: [Entry(title="a1", published=at(5.5)), Entry(title="a2", published=at(8.5))]},
        11: {B: [Entry(title="b2", published=at(10.5))]},  # B@10 completes CEI 1 (A@8, B@10)
    }
    for t in range(16):
        px.chronon(t, script.get(t, {}))
    assert [px.engine.state(f"p/0:{i}") for i in range(2)] == [CeiState.CAPTURED, CeiState.CAPTURED]
    assert px.engine.pending_ceis == 0


def _installed_at(since: int, rules: list[dict[str, object]]) -> Proxy:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": rules}), FEEDS, since=since)
    return Proxy(ev)


def test_a_feeds_first_probe_counts_the_changes_dated_since_the_rule_was_installed() -> None:
    """The backlog before the install is history; what was published after it is what the rule waited for."""
    px = _installed_at(10, [{"name": "w", "watch": {"feeds": ["A", "B"], "within": "5m"}}])
    script: dict[int, dict[int, list[Entry] | None]] = {
        # A's first document: two old entries (one undated) and one published at 13, after the install.
        16: {A: [Entry(title="old", published=at(2.5)), Entry(title="undated"),
                 Entry(title="a1", published=at(13.5))]},  # A@13: EI [13, 18], captured by this very probe
        17: {B: [Entry(title="b1", published=at(15.2))]},  # B@15: CEI 0 = A@13, B@15, captured
        30: {A: [Entry(title="a2", published=at(29.5))]},  # then as before: (16, 30]
        31: {B: [Entry(title="b2", published=at(30.5))]},
    }
    for t in range(10, 35):
        px.chronon(t, script.get(t, {}))
    assert [px.engine.state(f"p/0:{i}") for i in range(2)] == [CeiState.CAPTURED, CeiState.CAPTURED]
    assert px.engine.pending_ceis == 0


@pytest.mark.parametrize(
    "entries",
    [
        [Entry(title="old", published=at(9.95))],  # 3 s before the install: backlog, not cache lag
        [Entry(title="undated")],  # nothing says when
        [Entry(title="junk", published=datetime(1, 1, 1, tzinfo=UTC))],
        [Entry(title="far ahead", published=at(16 + 500))],
    ],
)
def test_a_first_probe_with_nothing_dated_since_the_install_is_a_baseline(entries: list[Entry]) -> None:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [ON_UPDATE]}), FEEDS, since=10)
    assert ev.on_probe(MISH, 16, True, entries) == []


def test_a_date_in_the_installs_own_second_counts_at_the_install() -> None:
    """Feed dates are whole seconds: an entry published just after the install may read up to 1 s before it."""
    assert changes_since([at(10) - timedelta(seconds=0.9)], 10, 16, GRID) == [10]
    assert changes_since([at(10) - timedelta(seconds=1.1)], 10, 16, GRID) == []
    assert changes_since([at(12.5), at(12.7), at(20)], 10, 16, GRID) == [12, 16]  # 4 ahead: clipped to the probe
    assert changes_since([at(30)], 10, 16, GRID) == []  # 14 ahead, more than the 7 since the install: junk
    assert changes_since([at(12.5)], 10, 9, GRID) == []  # a probe before the install sees nothing of it


def test_an_on_update_triggers_first_probe_opens_a_cei_for_a_change_since_its_install() -> None:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [ON_UPDATE]}), FEEDS, since=10)
    backlog = [Entry(title="oil, old", published=at(3)), Entry(title="oil", published=at(14.5)),
               Entry(title="oil again", published=at(15.5))]
    # The first change since the install (14) opens [14, 17] and this probe, inside it, decides it.
    assert ev.on_probe(MISH, 16, True, backlog) == [
        OpenCei("p/0:0", "p", "p/0", ((MISH, 14, 17),), sealed=False),
        RevealEi("p/0:0", CNN, 16, 26, seal=True),
    ]
    # Without a known install chronon (rules restored from before it was kept) the backlog says nothing.
    unknown = TriggerEvaluator(GRID)
    unknown.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [ON_UPDATE]}), FEEDS)
    assert unknown.on_probe(MISH, 16, True, backlog) == []


def test_a_ping_since_the_install_already_told_the_rule_of_the_first_probes_change() -> None:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [ON_UPDATE]}), FEEDS, since=10)
    assert ev.on_notification(MISH, 14) == [OpenCei("p/0:0", "p", "p/0", ((MISH, 14, 17),), sealed=False)]
    ops = ev.on_probe(MISH, 16, True, [Entry(title="oil", published=at(14.5))])
    assert not any(isinstance(op, OpenCei) for op in ops)


def test_a_ping_for_one_user_leaves_the_others_to_the_probe() -> None:
    """Issue 22 meets issue 18: a ping reaches only its token owner's rules; the probe tells the rest."""
    ev = TriggerEvaluator(GRID)
    for who in ("alice", "bob"):
        ev.add_profile(who, ProfileSpec.model_validate({"name": who, "rules": [ON_UPDATE]}), FEEDS)
    assert ev.on_notification(MISH, 11, profiles={"alice"}) == [
        OpenCei("alice/0:0", "alice", "alice/0", ((MISH, 11, 14),), sealed=False),
    ]
    ops = ev.on_probe(MISH, 12, True, [Entry(title="oil", published=at(10.5))], previous_success=8)
    assert ops == [
        OpenCei("bob/0:0", "bob", "bob/0", ((MISH, 10, 13),), sealed=False),  # Bob learns from the probe
        RevealEi("alice/0:0", CNN, 12, 22, seal=True),
        RevealEi("bob/0:0", CNN, 12, 22, seal=True),
    ]
    assert ev.models.feeds() == []  # the models are the loop's to teach (one update: test_update_models)


def test_update_watchers_count_the_rules_waiting_for_each_feeds_next_update() -> None:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [
        {"name": "w", "watch": {"feeds": ["A", "B"], "within": "3m"}}, ON_UPDATE]}), FEEDS)
    assert dict(ev.update_watchers()) == {A: 1, B: 1, MISH: 1}  # the query feed CNN waits for nothing
    assert ev.update_window() == 3  # the watch rule's 3m (the trigger's slack is 3m too)
    ev.on_notification(A, 2)
    assert dict(ev.update_watchers()) == {B: 1, MISH: 1}  # A is in the current CEI: its next update waits
    ev.on_notification(A, 3)
    assert dict(ev.update_watchers()) == {B: 1, MISH: 1}
    # A restart restores the watch state, and with it who waits for what.
    again = TriggerEvaluator(GRID)
    again.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [
        {"name": "w", "watch": {"feeds": ["A", "B"], "within": "3m"}}, ON_UPDATE]}), FEEDS)
    again.restore_state("p/0", ev.snapshot_state("p/0"))
    assert dict(again.update_watchers()) == {B: 1, MISH: 1}
    ev.on_notification(B, 4)  # the CEI is complete: both feeds wait for the next one
    assert dict(ev.update_watchers()) == {A: 1, B: 1, MISH: 1}
    ev.on_notification(B, 5)
    assert dict(ev.update_watchers()) == {A: 1, MISH: 1}
    ev.remove_profile("p")
    assert dict(ev.update_watchers()) == {}
    assert ev.update_window() is None


def test_reads_names_every_feed_a_rule_triggers_on_watches_or_queries_while_the_rule_lasts() -> None:
    """The loop's unwatched probes go only to feeds no rule reads: a query feed is read too."""
    ev = TriggerEvaluator(GRID)
    assert not any(ev.reads(r) for r in (A, B, MISH, CNN))
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [ON_UPDATE]}), FEEDS)
    assert [ev.reads(r) for r in (A, B, MISH, CNN)] == [False, False, True, True]
    ev.add_profile("q", ProfileSpec.model_validate({"name": "q", "rules": [
        {"name": "w", "watch": {"feeds": ["A", "FEED_CNN"], "within": "3m"}}]}), FEEDS)
    assert [ev.reads(r) for r in (A, B, MISH, CNN)] == [True, False, True, True]
    ev.on_notification(A, 2)  # A is in q's current CEI: no rule waits for it, but q still reads it
    assert A not in ev.update_watchers() and ev.reads(A)
    ev.remove_profile("p")  # CNN is still q's
    assert [ev.reads(r) for r in (A, B, MISH, CNN)] == [True, False, False, True]
    ev.replace_profile("q", ProfileSpec.model_validate({"name": "q", "rules": [
        {"name": "w", "watch": {"feeds": ["B", "FEED_CNN"], "within": "3m"}}]}), FEEDS)
    assert [ev.reads(r) for r in (A, B, MISH, CNN)] == [False, True, False, True]
    ev.remove_profile("q")
    assert not any(ev.reads(r) for r in (A, B, MISH, CNN))


def test_update_weights_spread_each_rules_worth_over_the_feeds_it_still_waits_for() -> None:
    """What the background allocation weighs: a CEI needs every remaining find, a missed one counts a quarter."""
    from proxy.core.discovery import DEAD_CEI_WEIGHT

    watch3 = {"name": "w", "watch": {"feeds": ["A", "B", "FEED_CNN"], "within": "3m"}}
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [watch3, ON_UPDATE]}), FEEDS)
    third = pytest.approx(1 / 3)
    assert dict(ev.update_weights()) == {A: third, B: third, CNN: third, MISH: 1.0}
    ev.on_notification(A, 2)  # A is in the CEI: the rule now waits for two feeds, a half each
    assert dict(ev.update_weights()) == {B: 0.5, CNN: 0.5, MISH: 1.0}
    # The engine misses the CEI (B found too late, say): what is left of it counts a quarter.
    (cei_id,) = ev.open_cei_ids()
    ev.on_cei_missed(cei_id)
    assert dict(ev.update_weights()) == {B: DEAD_CEI_WEIGHT / 2, CNN: DEAD_CEI_WEIGHT / 2, MISH: 1.0}
    # A restart restores the state and with it the weights.
    again = TriggerEvaluator(GRID)
    again.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [watch3, ON_UPDATE]}), FEEDS)
    again.restore_state("p/0", ev.snapshot_state("p/0"))
    assert dict(again.update_weights()) == dict(ev.update_weights())
    ev.on_notification(B, 4)
    assert dict(ev.update_weights()) == {CNN: DEAD_CEI_WEIGHT, MISH: 1.0}
    ev.on_notification(CNN, 5)  # the missed CEI ends; the next one is not missed yet: full worth again
    assert dict(ev.update_weights()) == {A: third, B: third, CNN: third, MISH: 1.0}
    # The groups behind the weights (what the coordinated frequencies read): one per waiting rule.
    assert sorted(ev.update_groups()) == sorted([((A, B, CNN), third), ((MISH,), 1.0)])
    ev.on_notification(A, 7)
    assert sorted(ev.update_groups()) == sorted([((B, CNN), 0.5), ((MISH,), 1.0)])
    ev.remove_profile("p")
    assert dict(ev.update_weights()) == {}
    assert list(ev.update_groups()) == []


WATCH = {"name": "w", "watch": {"feeds": ["FEED_MISH", "FEED_CNN"], "within": "10m"}}


@pytest.mark.parametrize(
    ("rule", "pings", "published"),
    [
        # The entry is dated a little before the ping (the hub was slow): a second CEI at 10.
        (ON_UPDATE, [MISH], at(10.5)),
        # Both feeds pinged, the watch CEI is complete; the entry is dated after the ping
        # (the publisher's clock): a new CEI would begin at 12.
        (WATCH, [MISH, CNN], at(12.3)),
    ],
)
def test_a_ping_and_its_confirming_probe_count_once_across_a_restart(
    rule: dict[str, object], pings: list[int], published: datetime
) -> None:
    """The rule's last ping per feed is part of its stored state."""
    def fresh() -> TriggerEvaluator:
        ev = TriggerEvaluator(GRID)
        ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [rule]}), FEEDS)
        ev.take_dirty()
        return ev

    ev = fresh()
    for feed in pings:
        assert ev.on_notification(feed, 11) != []
    assert ev.take_dirty() == ["p/0"]
    saved = ev.snapshot_state("p/0")
    assert saved["pinged"] == sorted([feed, 11] for feed in pings)
    oil = [Entry(title="oil", published=published)]
    # Restored, the probe that finds the announced entry opens nothing new...
    again = fresh()
    again.restore_state("p/0", saved)
    assert not [op for op in again.on_probe(MISH, 14, True, oil, previous_success=8) if isinstance(op, OpenCei)]
    # ...where a service that forgot the ping counts the update a second time.
    forgot = fresh()
    forgot.restore_state("p/0", {k: v for k, v in saved.items() if k != "pinged"})
    assert forgot.snapshot_state("p/0")["pinged"] == []
    assert [op for op in forgot.on_probe(MISH, 14, True, oil, previous_success=8) if isinstance(op, OpenCei)]


def test_a_malformed_ping_record_is_refused_and_changes_nothing() -> None:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate({"name": "p", "rules": [ON_UPDATE]}), FEEDS)
    ev.on_notification(MISH, 11)
    before = ev.snapshot_state("p/0")
    with pytest.raises(RuleStateError, match="rule 'p/0': malformed state"):
        ev.restore_state("p/0", before | {"seq": 7, "pinged": [[MISH]]})
    assert ev.snapshot_state("p/0") == before
