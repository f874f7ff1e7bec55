"""Issue 23, "a baseline, not a backlog": a new rule's first probe does not fire on old entries.

Fake chronons (60 s from ``ORIGIN``), no I/O: the rule is installed at chronon
``SINCE``; its first successful trigger probe sets its baseline. Entries published
before ``SINCE`` fire it only as far as the rule's ``backfill`` allows.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from proxy.rules import OpenCei, ProfileSpec, RevealEi, SealCei, TriggerEvaluator
from proxy.rules.evaluator import CARRY_MAX, RuleStateError
from tests.test_rules_evaluator import CNN, FEEDS, GRID, MISH, Entry, trigger_body

SINCE = 100
AT_SINCE = GRID.start_of(SINCE)
OLD = AT_SINCE - timedelta(days=330)  # "eleven months earlier" (the report)


def installed(backfill: int | None = None, *, since: int | None = SINCE, every_nth: int | None = None) -> TriggerEvaluator:
    when: dict[str, Any] = {"contains": ["oil"]}
    if every_nth is not None:
        when["every_nth"] = every_nth
    trigger: dict[str, Any] = {"feed": "FEED_MISH", "every": "5m", "slack": "2m", "when": when}
    if backfill is not None:
        trigger["backfill"] = backfill
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate(trigger_body(trigger)), FEEDS, since=since)
    assert ev.on_tick(SINCE) == [OpenCei("p/0:0", "p", "p/0", ((MISH, SINCE, SINCE + 2),), sealed=False)]
    return ev


def oil(published: Any, title: str = "oil") -> Entry:
    return Entry(title=title, published=published)


FIRES = [RevealEi("p/0:0", CNN, SINCE, SINCE + 10, seal=True)]
CHECKED = [SealCei("p/0:0")]


@pytest.mark.parametrize(
    ("backfill", "entries", "ops"),
    [
        # The backlog alone: the probe sets the baseline, the rule does not fire.
        (None, [oil(OLD)], CHECKED),
        (0, [oil(OLD)], CHECKED),
        # Undated entries cannot be shown to be new: baseline too.
        (None, [oil(None)], CHECKED),
        # Published in the chronon the rule was created, or later: new.
        (None, [oil(AT_SINCE)], FIRES),
        (None, [oil(OLD), oil(AT_SINCE + timedelta(seconds=90))], FIRES),
        # backfill N: the N newest old entries may fire it (undated ones count as oldest).
        (1, [oil(OLD)], FIRES),
        (1, [oil(OLD - timedelta(days=1)), Entry(title="markets", published=OLD)], CHECKED),
        (2, [oil(OLD - timedelta(days=1)), Entry(title="markets", published=OLD)], FIRES),
        (1, [oil(None), Entry(title="markets", published=OLD)], CHECKED),
        (2, [oil(None), Entry(title="markets", published=OLD)], FIRES),
    ],
)
def test_first_probe_sets_the_baseline(backfill: int | None, entries: list[Entry], ops: list[Any]) -> None:
    ev = installed(backfill)
    assert ev.on_probe(MISH, SINCE, True, entries) == ops


def test_without_since_every_new_entry_counts() -> None:
    ev = installed(since=None)
    assert ev.on_probe(MISH, SINCE, True, [oil(OLD)]) == FIRES


def test_after_the_baseline_every_new_entry_counts() -> None:
    ev = installed()
    assert ev.on_probe(MISH, SINCE, True, [oil(OLD)]) == CHECKED
    assert ev.on_tick(SINCE + 5) == [OpenCei("p/0:1", "p", "p/0", ((MISH, SINCE + 5, SINCE + 7),), sealed=False)]
    # An old-dated entry that appears later is new to the feed: it is an update, not backlog.
    assert ev.on_probe(MISH, SINCE + 5, True, [oil(OLD)], previous_success=SINCE) == [
        RevealEi("p/0:1", CNN, SINCE + 5, SINCE + 15, seal=True)
    ]


def test_a_failed_probe_does_not_take_the_baseline() -> None:
    ev = installed()
    assert ev.on_probe(MISH, SINCE, False, []) == []
    assert ev.on_probe(MISH, SINCE + 1, True, [oil(OLD)]) == CHECKED


def test_the_baseline_probe_need_not_decide_a_cei() -> None:
    ev = installed()
    # A probe before the window (another rule's, a background probe): it takes the baseline.
    assert ev.on_probe(MISH, SINCE - 1, True, [oil(OLD)]) == []
    assert ev.on_probe(MISH, SINCE, True, [oil(OLD)], previous_success=SINCE - 1) == FIRES


def test_every_nth_does_not_count_the_backlog() -> None:
    ev = installed(every_nth=2)
    assert ev.on_probe(MISH, SINCE, True, [oil(OLD), oil(OLD), oil(OLD)]) == CHECKED
    assert ev.snapshot_state("p/0")["nth_count"] == 0


def test_the_baseline_survives_a_restart() -> None:
    ev = installed()
    saved = ev.snapshot_state("p/0")
    assert saved["since"] == SINCE and saved["baselined"] is False
    again = TriggerEvaluator(GRID)
    again.add_profile("p", ProfileSpec.model_validate(trigger_body(
        {"feed": "FEED_MISH", "every": "5m", "slack": "2m", "when": {"contains": ["oil"]}})), FEEDS)
    again.restore_state("p/0", saved)
    assert again.on_probe(MISH, SINCE, True, [oil(OLD)]) == CHECKED
    assert again.snapshot_state("p/0")["baselined"] is True


def test_a_state_saved_before_the_baseline_existed_restores_as_taken() -> None:
    ev = installed()
    saved = {k: v for k, v in ev.snapshot_state("p/0").items() if k not in ("since", "baselined")}
    ev.restore_state("p/0", saved)
    assert ev.on_probe(MISH, SINCE, True, [oil(OLD)]) == FIRES


def test_an_update_from_before_the_rule_opens_nothing() -> None:
    body = trigger_body({"feed": "FEED_MISH", "on": "update", "slack": "2m"})
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate(body), FEEDS, since=SINCE)
    # The feed changed between a probe at 50 and one at 101, at 60 by its entries' dates.
    assert ev.on_probe(MISH, SINCE + 1, True, [oil(GRID.start_of(60))], previous_success=50) == []
    ops = ev.on_probe(MISH, SINCE + 3, True, [oil(GRID.start_of(SINCE + 2))], previous_success=SINCE + 1)
    assert ops[0] == OpenCei("p/0:0", "p", "p/0", ((MISH, SINCE + 2, SINCE + 4),), sealed=False)


@pytest.mark.parametrize("bad", [-1, 1001, "many", 1.5])
def test_backfill_is_validated(bad: Any) -> None:
    body = trigger_body({"feed": "FEED_MISH", "every": "5m", "backfill": bad})
    with pytest.raises(ValidationError) as info:
        ProfileSpec.model_validate(body)
    assert any(err["loc"][-1] == "backfill" for err in info.value.errors()), info.value.errors()


def test_the_baseline_reads_the_whole_document_when_an_earlier_probe_saw_the_backlog() -> None:
    """A feed polled before the rule existed (a poll, another user's rule): nothing is new, the backfill is."""
    ev = installed(1)
    assert ev.wants_document(MISH)  # the loop fetches it whole: no 304
    # Nothing new to the feed since its last probe, 50 chronons before the rule: the document still
    # holds the backlog, whose newest entry the backfill may fire on.
    assert ev.on_probe(MISH, SINCE, True, [], previous_success=SINCE - 50, document=[oil(OLD)]) == FIRES
    assert not ev.wants_document(MISH)


def test_without_the_document_an_earlier_probe_leaves_the_backfill_nothing() -> None:
    ev = installed(1)
    assert ev.on_probe(MISH, SINCE, True, [], previous_success=SINCE - 50) == CHECKED


def test_a_baseline_probe_that_decides_nothing_keeps_the_backfill_for_the_first_check() -> None:
    ev = installed(1)
    # In flight when the rule was made, so before its first window: it takes the baseline only.
    assert ev.on_probe(MISH, SINCE - 1, True, [oil(OLD)], document=[oil(OLD)]) == []
    assert ev.on_probe(MISH, SINCE, True, [], previous_success=SINCE - 1) == FIRES


def test_a_temporal_rules_check_sees_what_other_probes_found_since_its_last_check() -> None:
    ev = installed()
    assert ev.on_probe(MISH, SINCE, True, []) == CHECKED  # the baseline
    assert ev.on_tick(SINCE + 5) == [OpenCei("p/0:1", "p", "p/0", ((MISH, SINCE + 5, SINCE + 7),), sealed=False)]
    # Another rule's probe, between the windows, finds the oil post first...
    assert ev.on_probe(MISH, SINCE + 3, True, [oil(GRID.start_of(SINCE + 2))], previous_success=SINCE) == []
    # ...and the rule's own check in the window reads it: new since the rule last looked.
    assert ev.on_probe(MISH, SINCE + 5, True, [], previous_success=SINCE + 3) == [
        RevealEi("p/0:1", CNN, SINCE + 5, SINCE + 15, seal=True)]
    # Read once: the next check finds nothing new.
    assert ev.on_tick(SINCE + 10) == [
        OpenCei("p/0:2", "p", "p/0", ((MISH, SINCE + 10, SINCE + 12),), sealed=False)]
    assert ev.on_probe(MISH, SINCE + 10, True, [], previous_success=SINCE + 5) == [SealCei("p/0:2")]


def test_a_check_does_not_read_what_a_later_probe_found() -> None:
    ev = installed()
    assert ev.on_probe(MISH, SINCE, True, []) == CHECKED
    ev.on_tick(SINCE + 5)
    # A probe started after the window [SINCE + 5, SINCE + 7] ends first with the post...
    assert ev.on_probe(MISH, SINCE + 8, True, [oil(GRID.start_of(SINCE + 8))], previous_success=SINCE) == []
    # ...the window's own probe, started before it, decides without it.
    assert ev.on_probe(MISH, SINCE + 6, True, [], previous_success=SINCE) == [SealCei("p/0:1")]
    ev.on_tick(SINCE + 10)
    assert ev.on_probe(MISH, SINCE + 10, True, [], previous_success=SINCE + 8) == [
        RevealEi("p/0:2", CNN, SINCE + 10, SINCE + 20, seal=True)]


def test_what_other_probes_found_survives_a_restart() -> None:
    """The carry is part of the rule's state: a restart between two checks loses no match."""
    ev = installed()
    assert ev.on_probe(MISH, SINCE, True, []) == CHECKED
    ev.on_tick(SINCE + 5)
    ev.take_dirty()
    assert ev.on_probe(MISH, SINCE + 3, True, [oil(GRID.start_of(SINCE + 2))], previous_success=SINCE) == []
    assert ev.take_dirty() == ["p/0"]  # the match must be stored before the next check
    saved = ev.snapshot_state("p/0")
    assert saved["carry"] == [SINCE + 3]
    again = TriggerEvaluator(GRID)
    again.add_profile("p", ProfileSpec.model_validate(trigger_body(
        {"feed": "FEED_MISH", "every": "5m", "slack": "2m", "when": {"contains": ["oil"]}})), FEEDS)
    again.restore_state("p/0", saved)
    assert again.on_probe(MISH, SINCE + 5, True, [], previous_success=SINCE + 3) == [
        RevealEi("p/0:1", CNN, SINCE + 5, SINCE + 15, seal=True)]
    assert again.snapshot_state("p/0")["carry"] == []


def test_entries_that_do_not_meet_the_condition_are_not_carried() -> None:
    ev = installed()
    assert ev.on_probe(MISH, SINCE, True, []) == CHECKED
    ev.on_tick(SINCE + 5)
    ev.take_dirty()
    markets = Entry(title="markets", published=GRID.start_of(SINCE + 2))
    assert ev.on_probe(MISH, SINCE + 3, True, [markets], previous_success=SINCE) == []
    assert ev.take_dirty() == [] and ev.snapshot_state("p/0")["carry"] == []
    assert ev.on_probe(MISH, SINCE + 5, True, [], previous_success=SINCE + 3) == [SealCei("p/0:1")]


def test_the_carry_keeps_its_oldest_probe_and_the_newest() -> None:
    ev = installed()
    assert ev.on_probe(MISH, SINCE, True, []) == CHECKED
    ev.on_tick(SINCE + 5)
    # The check's window is [SINCE + 5, SINCE + 7]; probes started later keep finding posts
    # while its own probe is still in flight (a slow feed), more than the carry holds.
    for t in range(SINCE + 8, SINCE + 8 + CARRY_MAX + 5):
        assert ev.on_probe(MISH, t, True, [oil(GRID.start_of(t))], previous_success=t - 1) == []
        assert ev.on_probe(MISH, t, True, [oil(GRID.start_of(t))], previous_success=t - 1) == []  # same chronon
    carry = ev.snapshot_state("p/0")["carry"]
    assert len(carry) == CARRY_MAX
    assert carry[0] == SINCE + 8 and carry[-1] == SINCE + 8 + CARRY_MAX + 4
    assert carry[1:] == list(range(SINCE + 14, SINCE + 8 + CARRY_MAX + 5))  # the second oldest went
    assert ev.on_probe(MISH, SINCE + 6, True, [], previous_success=SINCE) == [SealCei("p/0:1")]
    ev.on_tick(SINCE + 10)
    # The next check reads only the probes that started by its start.
    assert ev.on_probe(MISH, SINCE + 10, True, [], previous_success=SINCE + 9) == [
        RevealEi("p/0:2", CNN, SINCE + 10, SINCE + 20, seal=True)]
    assert ev.snapshot_state("p/0")["carry"] == [t for t in carry if t > SINCE + 10]


def test_a_state_saved_before_the_carry_was_persisted_restores_with_none() -> None:
    ev = installed()
    saved = {k: v for k, v in ev.snapshot_state("p/0").items() if k != "carry"}
    ev.restore_state("p/0", saved)
    assert ev.snapshot_state("p/0")["carry"] == []


@pytest.mark.parametrize("bad", [5, [3, 2], [1, 1], ["x"], list(range(CARRY_MAX + 1))])
def test_a_malformed_carry_is_refused_and_names_the_rule(bad: Any) -> None:
    ev = installed()
    saved = ev.snapshot_state("p/0") | {"carry": bad}
    with pytest.raises(RuleStateError, match="rule 'p/0': malformed state"):
        ev.restore_state("p/0", saved)


def test_a_ping_costs_a_temporal_rule_no_state_write() -> None:
    """A temporal rule reads no updates, so it has no ping to remember (or to store)."""
    ev = installed()
    ev.take_dirty()
    assert ev.on_notification(MISH, SINCE + 1) == []
    assert ev.take_dirty() == [] and ev.snapshot_state("p/0")["pinged"] == []
