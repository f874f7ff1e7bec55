"""The service's decision state without I/O: ops become persistence steps; restore after a restart."""

from __future__ import annotations

import datetime as dt

import pytest

from proxy.core.engine import CeiState
from proxy.feeds import Entry
from proxy.rules import ChrononGrid, ProfileSpec, RevealEi, UnknownFeedError
from proxy.service._persist import AddCei, AddEi, Captured, Resolved, RuleStates, Seal
from proxy.service.runtime import Runtime, check_feeds, rule_key
from proxy.store import Cei, Ei, Feed, Profile, Rule

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
MISH, CNN, MONEY = 11, 12, 13  # store feed ids; resources 0, 1, 2


def _feed(feed_id: int, resource: int) -> Feed:
    return Feed(id=feed_id, url=f"http://f/{feed_id}", url_normalised=f"http://f/{feed_id}",
                resource=resource, etag=None, last_modified=None, last_probe_at=None,
                last_outcome=None, consecutive_errors=0, next_allowed_at=None, disabled=False,
                disabled_reason=None, created_at=T0)


def _spec() -> dict[str, object]:
    return {"name": "p", "rules": [{
        "name": "oil", "trigger": {"feed": str(MISH), "every": "3m", "slack": "2m",
                                   "when": {"contains": ["oil"]}},
        "query": [{"feed": str(CNN), "within": "10m"}, {"feed": str(MONEY), "within": "10m"}]}]}


def _profile(state: object = None) -> Profile:
    spec = _spec()
    rule = Rule(id=7, profile_id=3, name="oil", position=0, spec=spec["rules"][0],  # type: ignore[index]
                state=state, feed_ids=(MISH, CNN, MONEY))
    return Profile(id=3, user_id=1, name="p", created_at=T0, updated_at=T0, rules=(rule,))


def _runtime() -> Runtime:
    rt = Runtime(ChrononGrid(T0, 60.0))
    for i, f in enumerate((MISH, CNN, MONEY)):
        rt.feeds.put(_feed(f, i))
    return rt


def _ei(ordinal: int, feed: int, start: int, finish: int, captured: int | None = None) -> Ei:
    return Ei(id=100 + ordinal, cei_id="r7:0", ordinal=ordinal, feed_id=feed, start=start,
              finish=finish, reveal=None, state="captured" if captured is not None else "pending",
              captured_chronon=captured, captured_probe_id=None)


def _cei(*eis: Ei, sealed: bool = True) -> Cei:
    return Cei(id="r7:0", profile_id=3, rule_id=7, release=0, sealed=sealed, state="pending",
               resolved_chronon=None, created_at=T0, eis=eis)


def test_ops_become_steps_with_store_ids_and_ordinals() -> None:
    rt = _runtime()
    steps = rt.install(_profile(), restore_states=False)
    assert steps and isinstance(steps[-1], RuleStates) and steps[-1].states[0][0] == 7
    rt.engine.advance(0)
    opened = rt.apply(rt.evaluator.on_tick(0))
    assert opened == [AddCei("r7:0", 3, 7, 0, opened[0].eis, False)]  # type: ignore[union-attr]
    (ei,) = opened[0].eis  # type: ignore[union-attr]
    assert (ei.ordinal, ei.feed_id, ei.start, ei.finish) == (0, MISH, 0, 2)

    class E:
        title, summary, content = "Oil up", None, None
        published = rt.clock.start_of(0)  # since the rule exists: its baseline lets it fire (issue 23)

    rt.engine.begin_probe(0)
    revealed = rt.apply(rt.evaluator.on_probe(0, 0, True, [E()]))
    assert [(s.ei.ordinal, s.ei.feed_id, s.ei.start, s.ei.finish, s.seal) for s in revealed  # type: ignore[union-attr]
            ] == [(1, CNN, 0, 10, False), (2, MONEY, 0, 10, True)]
    rt.engine.complete_probe(0, 0, success=True)
    direct, follow = rt.drain()
    assert direct == [Captured("r7:0", 0, 0)] and follow == []
    rt.engine.advance(11)  # the query EIs expire unprobed
    direct, follow = rt.drain()
    assert direct == [Resolved("r7:0", "missed", 11)]
    assert rt.tally.missed == 1


def test_unknown_feed_is_named_by_its_field() -> None:
    rt = _runtime()
    spec = ProfileSpec.model_validate(_spec())
    assert check_feeds(spec, rt.feeds) == [MISH, CNN, MONEY]
    body = _spec()
    body["rules"][0]["query"][1]["feed"] = "99"  # type: ignore[index]
    with pytest.raises(UnknownFeedError, match=r"rules\.0\.query\.1\.feed: unknown feed '99'"):
        check_feeds(ProfileSpec.model_validate(body), rt.feeds)


def test_an_op_the_engine_refuses_is_counted_not_hidden() -> None:
    from proxy.rules import RevealEi, SealCei

    rt = _runtime()
    assert rt.apply([SealCei("r7:41"), RevealEi("r7:41", 0, 0, 1, seal=True)]) == []
    assert rt.tally.refused_ops == 2


def test_restore_closes_ceis_resolved_before_the_crash() -> None:
    # r7:0 opened at 0 and was captured before the crash: the store holds it resolved (not
    # pending), the saved rule state still lists it open until its sweep (window + grace).
    rt = _runtime()
    rt.install(_profile(), restore_states=False)
    rt.engine.advance(0)
    rt.apply(rt.evaluator.on_tick(0))
    state = rt.evaluator.snapshot_state(rule_key(7))
    assert [c for c, _, _ in state["open"]] == ["r7:0"]

    again = _runtime()
    steps = again.restore([_profile(state)], [], now=1, high_water={7: 1})
    assert again.evaluator.open_cei_ids() == []
    saved = [s for s in steps if isinstance(s, RuleStates)]
    assert saved and saved[-1].states[0][1]["open"] == []  # the closed state is written back
    for t in range(1, 200):  # past the sweep of r7:0, with r7:1, r7:2 ... opening and sealing
        again.engine.advance(t)
        again.apply(again.evaluator.on_tick(t))
        again.drain_all()
    assert again.tally.refused_ops == 0  # without the close, r7:0's sweep SealCei is refused


def test_restore_after_a_long_downtime_keeps_captures_and_goes_on() -> None:
    # Trigger captured at 5, money captured at 9, cnn still open until 5000; down until 900.
    cei = _cei(_ei(0, MISH, 4, 6, captured=5), _ei(1, CNN, 5, 5000), _ei(2, MONEY, 5, 5000, captured=9))
    rt = _runtime()
    steps = rt.restore([_profile()], [cei], now=900)
    assert rt.engine.state("r7:0") is CeiState.PENDING
    assert not any(isinstance(s, Resolved) for s in steps)
    assert {s.ordinal for s in steps if isinstance(s, Captured)} == {0, 2}  # recaptured, idempotent
    assert rt.engine.select(5, "mrsf-p") == [1]  # only cnn is left to probe
    rt.engine.begin_probe(1)
    rt.engine.complete_probe(1, 900, success=True)
    direct, _ = rt.drain()
    assert Resolved("r7:0", "captured", 900) in direct
    assert str(3) in rt.evaluator.profile_ids()


def test_restore_misses_ceis_whose_window_passed_while_down() -> None:
    cei = _cei(_ei(0, MISH, 4, 6, captured=5), _ei(1, CNN, 5, 15), _ei(2, MONEY, 5, 15))
    rt = _runtime()
    steps = rt.restore([_profile()], [cei], now=900)
    assert Resolved("r7:0", "missed", 900) in steps
    assert rt.engine.state("r7:0") is CeiState.MISSED


def test_restore_brings_back_rule_state_so_ids_continue() -> None:
    rt = _runtime()
    rt.install(_profile(), restore_states=False)
    rt.engine.advance(0)
    rt.apply(rt.evaluator.on_tick(0))
    state = rt.evaluator.snapshot_state(rule_key(7))
    again = _runtime()
    again.restore([_profile(state)], [_cei(_ei(0, MISH, 0, 2), sealed=False)], now=1)
    again.engine.advance(3)
    ops = again.evaluator.on_tick(3)
    opened = again.apply(ops)
    assert [s.cei_id for s in opened if isinstance(s, AddCei)] == ["r7:1"]
    assert all(not isinstance(s, (AddEi, Seal)) or s.cei_id != "r7:1" for s in opened)


def test_blocked_feeds_are_holes_disabled_and_waiting_ones_until_their_time() -> None:
    from proxy.service._feeds import FeedTable

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    table = FeedTable()
    a, b, c = (table.put(_feed(i, i)) for i in (10, 11, 12))  # resources 10..12; 0..9 are holes
    assert table.blocked(13, now) == set(range(10))
    b.disabled = True
    c.not_before = now + dt.timedelta(seconds=30)
    table.note(b)
    table.note(c)
    assert table.blocked(13, now) == set(range(10)) | {11, 12}
    # The wait ends: only the disabled feed stays blocked.
    assert table.blocked(13, now + dt.timedelta(seconds=31)) == set(range(10)) | {11}
    # A resource the engine knows but no feed stands behind is blocked; a removed feed too.
    later = now + dt.timedelta(seconds=32)
    table.remove(a.id)
    assert table.blocked(14, later) == set(range(11)) | {11, 13}
    b.disabled = False
    table.note(b)
    assert table.blocked(14, later) == set(range(11)) | {13}


def test_overwrite_lives_read_the_models_the_loop_teaches() -> None:
    """One update model per feed: what the loop learns from probes sizes the evaluator's overwrite EIs."""
    rt = _runtime()
    assert rt.evaluator.models is rt.models
    spec = {"name": "p", "rules": [{"name": "o", "trigger": {"feed": str(MISH), "on": "update"},
                                    "query": [{"feed": str(CNN), "overwrite": True}]}]}
    rt.evaluator.add_profile("p", ProfileSpec.model_validate(spec), rt.feeds.resource_of)
    # CNN (resource 1) publishes every 20 min; its document teaches the shared models.
    now = T0.timestamp() + 86_400
    rt.models.observe_document(1, now, [now - 1200.0 * k - 30 * (k % 4) for k in range(72, 0, -1)])
    t = 24 * 60  # the chronon of `now`
    rt.evaluator.on_notification(0, t)
    ops = rt.evaluator.on_probe(0, t, True, [Entry(identity='x', title='x', link=None, summary=None, content=None, published=None)], previous_success=t - 1)
    reveal = ops[-1]
    assert isinstance(reveal, RevealEi) and reveal.resource == 1
    finish = reveal.finish
    assert t + 15 <= finish <= t + 25  # the prior alone would give 6 h (360 chronons)
