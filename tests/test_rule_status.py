"""Rule status (``GET /api/v1/profiles/{id}/status``): what each rule waits for, named in wall
time and feed ids, from the evaluator's own states.

The pure part here: a real :class:`TriggerEvaluator` is driven by pings and ticks, its
states (:meth:`TriggerEvaluator.snapshot_state`) are read by :func:`profile_status`. The
service, the API and a replica are in ``tests/test_e2e_rule_status.py``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from proxy.rules import (
    ChrononGrid,
    FeedModelEstimate,
    ProfileSpec,
    RuleStateError,
    TriggerEvaluator,
    rule_progress,
)
from proxy.service.rule_status import profile_status
from proxy.store import Cei, Ei, Feed, Profile, RegisteredFeed, Registration, Rule

ORIGIN = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)  # a Monday
CLOCK = ChrononGrid(ORIGIN, 60.0)
FEEDS = {11: 0, 12: 1, 13: 2}  # feed id -> engine resource


def _feed(fid: int) -> RegisteredFeed:
    feed = Feed(id=fid, url=f"http://shared/{fid}", url_normalised=f"http://shared/{fid}", resource=FEEDS[fid],
                etag=None, last_modified=None, last_probe_at=ORIGIN, last_outcome="ok", consecutive_errors=0,
                next_allowed_at=None, disabled=False, disabled_reason=None, created_at=ORIGIN)
    return RegisteredFeed(Registration(id=fid, user_id=1, feed_id=fid, url=f"https://mine.example/{fid}",
                                       ping_token="t", created_at=ORIGIN), feed)


def _setup(rules: list[dict[str, Any]], since: int | None = 0) -> tuple[TriggerEvaluator, Profile]:
    ev = TriggerEvaluator(CLOCK)
    spec = ProfileSpec.model_validate({"name": "p", "rules": rules})
    ev.add_profile("1", spec, {str(f): r for f, r in FEEDS.items()},
                   rule_ids=[f"r{i + 1}" for i in range(len(rules))], since=since)
    stored = tuple(
        Rule(id=i + 1, profile_id=1, name=r["name"], position=i, spec=r, state=None,
             feed_ids=tuple(dict.fromkeys(
                 int(f) for f in (r["watch"]["feeds"] if "watch" in r
                                  else [r["trigger"]["feed"], *(q["feed"] for q in r["query"])]))))
        for i, r in enumerate(rules))
    return ev, Profile(id=1, user_id=1, name="p", created_at=ORIGIN, updated_at=ORIGIN, rules=stored)


def _status(ev: TriggerEvaluator, profile: Profile, t: int,
            models: dict[int, FeedModelEstimate | None] | None = None, pending: tuple[Cei, ...] = ()) -> Any:
    states = {rule.id: ev.snapshot_state(f"r{rule.id}") for rule in profile.rules}
    return profile_status(profile, states, {f: _feed(f) for f in FEEDS}, models or {}, CLOCK,
                          CLOCK.start_of(t), "live", pending)


def _cei(cei_id: str, rule: int, eis: list[tuple[int, int, int, str]]) -> Cei:
    """A stored pending CEI: EIs as (feed id, start, finish, state)."""
    return Cei(id=cei_id, profile_id=1, rule_id=rule, release=eis[0][1], sealed=True, state="pending",
               resolved_chronon=None, created_at=ORIGIN, fired=True, eis=tuple(
                   Ei(id=i, cei_id=cei_id, ordinal=i, feed_id=f, start=a, finish=b, reveal=None, state=st,
                      captured_chronon=a if st == "captured" else None, captured_probe_id=None)
                   for i, (f, a, b, st) in enumerate(eis)))


def test_a_watch_rule_names_the_feeds_it_still_waits_for() -> None:
    ev, profile = _setup([{"name": "both", "watch": {"feeds": ["11", "12", "13"], "within": "10m"}}])
    rule = _status(ev, profile, 1).rules[0]
    assert (rule.kind, rule.state, rule.waiting_for, rule.seen) == ("watch", "waiting", (11, 12, 13), ())
    assert rule.updates_from is None and rule.building_cei is None

    ev.on_notification(FEEDS[12], 5)  # feed 12 changed at chronon 5: the CEI begins
    ev.on_notification(FEEDS[11], 7)
    rule = _status(ev, profile, 8).rules[0]
    assert rule.state == "building"
    assert rule.waiting_for == (13,)  # the one feed holding the CEI back
    assert rule.seen == ((12, CLOCK.start_of(5)), (11, CLOCK.start_of(7)))
    assert rule.building_cei == "r1:0" and not rule.building_missed
    assert rule.explanation == "r1:0 has 2 of 3 feeds; waiting for feed 13"

    ev.on_notification(FEEDS[13], 9)  # complete: the next CEI counts updates after chronon 9
    rule = _status(ev, profile, 10).rules[0]
    assert (rule.state, rule.waiting_for, rule.building_cei) == ("waiting", (11, 12, 13), None)
    assert rule.updates_from == CLOCK.start_of(10)
    assert rule.explanation == "waiting for an update of feeds 11, 12, 13 from 2026-11-02T00:10:00Z on"


def test_a_watch_cei_the_engine_missed_is_shown_as_missed_while_it_finishes() -> None:
    ev, profile = _setup([{"name": "both", "watch": {"feeds": ["11", "12"], "within": "2m"}}])
    ev.on_notification(FEEDS[11], 3)
    ev.on_trigger_missed("r1:0")
    rule = _status(ev, profile, 20).rules[0]
    assert (rule.state, rule.building_cei, rule.building_missed, rule.waiting_for) == (
        "building", "r1:0", True, (12,))
    assert rule.explanation.endswith("(already missed; it still takes the other feeds' updates, so the next CEI "
                                     "starts after them)")


def test_an_update_trigger_waits_for_its_baseline_then_for_updates_then_decides() -> None:
    ev, profile = _setup([{"name": "oil", "trigger": {"feed": "11", "on": "update", "slack": "5m"},
                           "query": [{"feed": "12", "within": "5m"}]}])
    rule = _status(ev, profile, 1).rules[0]
    assert (rule.kind, rule.state, rule.waiting_for) == ("trigger", "baseline", (11,))
    assert "first successful probe of feed 11" in rule.explanation

    ev.on_probe(FEEDS[11], 2, True, [])  # the baseline: the document as it was
    rule = _status(ev, profile, 3).rules[0]
    assert (rule.state, rule.waiting_for, rule.open_ceis, rule.last_fired_at) == ("waiting", (11,), (), None)

    ev.on_notification(FEEDS[11], 4)  # an update: fired, the trigger EI is [4, 9]
    rule = _status(ev, profile, 5).rules[0]
    assert rule.state == "deciding"
    assert rule.open_ceis == (("r1:0", CLOCK.start_of(4), CLOCK.start_of(10)),)
    assert rule.last_fired_at == CLOCK.start_of(4)
    assert rule.explanation == "fired; waiting for a probe of feed 11 before 2026-11-02T00:10:00Z"


def test_a_temporal_trigger_shows_its_next_check() -> None:
    ev, profile = _setup([{"name": "digest", "trigger": {"feed": "11", "every": "15m", "slack": "2m"},
                           "query": [{"feed": "13", "within": "5m"}]}], since=None)
    rule = _status(ev, profile, 0).rules[0]
    assert (rule.state, rule.next_check_at) == ("scheduled", None)  # anchored at the next tick
    assert rule.explanation == "its schedule starts at the next tick"
    ev.on_tick(0)  # fires at 0: the next check is 15 chronons on
    rule = _status(ev, profile, 1).rules[0]
    assert rule.state == "deciding" and rule.open_ceis[0][0] == "r1:0"
    assert rule.next_check_at == CLOCK.start_of(15)  # known while this one is being decided
    ev.on_probe(FEEDS[11], 1, True, [])  # decided (rank 1: nothing new)
    rule = _status(ev, profile, 2).rules[0]
    assert (rule.state, rule.next_check_at, rule.waiting_for) == ("scheduled", CLOCK.start_of(15), ())
    assert rule.explanation == "next check at 2026-11-02T00:15:00Z"


def test_a_fired_trigger_names_the_probes_its_query_feeds_still_need() -> None:
    ev, profile = _setup([{"name": "digest", "trigger": {"feed": "11", "every": "15m", "slack": "2m"},
                           "query": [{"feed": "12", "within": "5m"}, {"feed": "13", "within": "8m"}]}],
                         since=None)
    ev.on_tick(0)
    ev.on_probe(FEEDS[11], 1, True, [])  # decided: the trigger EI captured at 1
    # As stored: the trigger EI captured, the query EIs [1, 6] and [1, 9] not yet.
    stored = _cei("r1:0", 1, [(11, 0, 2, "captured"), (12, 1, 6, "pending"), (13, 1, 9, "pending")])
    other = _cei("r9:0", 9, [(12, 0, 3, "pending")])  # another rule's: not this one's
    rule = _status(ev, profile, 2, pending=(stored, other)).rules[0]
    assert (rule.state, rule.pending_ceis) == ("capturing", 1)
    assert rule.probes_due == (("r1:0", 12, CLOCK.start_of(1), CLOCK.start_of(7)),
                               ("r1:0", 13, CLOCK.start_of(1), CLOCK.start_of(10)))
    assert rule.explanation == ("fired; still to probe feed 12 before 2026-11-02T00:07:00Z, "
                                "feed 13 before 2026-11-02T00:10:00Z")
    assert rule.next_check_at == CLOCK.start_of(15)
    # Resolved (nothing pending): back to its schedule.
    assert _status(ev, profile, 8).rules[0].state == "scheduled"


def test_periods_pending_rules_and_unreadable_states_are_named() -> None:
    rules: list[dict[str, Any]] = [
        {"name": "later", "watch": {"feeds": ["11"], "within": "5m"},
         "period": {"start": "2026-12-01T00:00:00Z"}},
        {"name": "over", "watch": {"feeds": ["12"], "within": "5m"},
         "period": {"end": "2026-11-01T00:00:00Z"}},
        {"name": "new", "watch": {"feeds": ["13"], "within": "5m"}},
        {"name": "odd", "watch": {"feeds": ["13"], "within": "5m"}},
    ]
    ev, profile = _setup(rules)
    states: dict[int, Any] = {1: ev.snapshot_state("r1"), 2: ev.snapshot_state("r2"), 3: None,
                              4: {"version": 99, "kind": "watch"}}
    status = profile_status(profile, states, {f: _feed(f) for f in FEEDS}, {}, CLOCK, CLOCK.start_of(1), "saved")
    assert [(r.name, r.state) for r in status.rules] == [
        ("later", "not_started"), ("over", "ended"), ("new", "pending"), ("odd", "unknown")]
    assert status.rules[0].explanation == "its period starts at 2026-12-01T00:00:00Z"
    assert "version 99" in status.rules[3].explanation
    assert status.source == "saved"


def test_feeds_are_named_by_the_users_own_url_with_their_next_expected_update() -> None:
    ev, profile = _setup([{"name": "w", "watch": {"feeds": ["12", "11"], "within": "5m"}}])
    expected = ORIGIN + dt.timedelta(hours=3)
    model = FeedModelEstimate("poisson", 0.5, expected.timestamp(), 4)
    status = _status(ev, profile, 1, {11: model, 12: None})
    assert [f.id for f in status.feeds] == [11, 12]
    first = status.feeds[0]
    assert first.url == "https://mine.example/11"  # never the shared URL
    assert (first.model_kind, first.next_expected_update_at) == ("poisson", expected)
    assert (status.feeds[1].model_kind, status.feeds[1].next_expected_update_at) == (None, None)


def test_rule_progress_refuses_what_is_not_a_state() -> None:
    with pytest.raises(RuleStateError, match="version"):
        rule_progress({"kind": "watch"})
    with pytest.raises(RuleStateError, match="malformed"):
        rule_progress({"version": 1, "kind": "watch", "cei_id": None, "alive": True, "covered": "x",
                       "prev_last_start": -1})
