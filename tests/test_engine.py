"""The engine's state machine on hand-made cases: captures, deaths, reveals, slow probes."""

from __future__ import annotations

import pytest

from proxy.core.engine import CeiCaptured, CeiMissed, CeiState, EiCaptured, Engine
from proxy.core.policies import Policy, PoolView, policy_names
from tests.reference_engine import ALL_POLICIES


def test_one_probe_captures_overlapping_eis_across_ceis_and_profiles() -> None:
    eng = Engine(2)
    eng.add_cei("a", "alice", [(0, 0, 4)])
    eng.add_cei("b", "bob", [(0, 2, 6), (1, 0, 9)])
    eng.add_cei("c", "carol", [(0, 5, 8)])  # not active at 3
    eng.advance(3)
    events = eng.probe([0])
    assert events == [
        EiCaptured("a", 0, 0, 3),
        EiCaptured("b", 0, 0, 3),
        CeiCaptured("a", 3),
    ]
    assert eng.state("a") is CeiState.CAPTURED
    assert eng.state("b") is CeiState.PENDING
    assert eng.state("c") is CeiState.PENDING
    assert eng.probe([1]) == [EiCaptured("b", 1, 1, 3), CeiCaptured("b", 3)]
    assert eng.counts() == {CeiState.PENDING: 1, CeiState.CAPTURED: 2, CeiState.MISSED: 0}
    assert eng.drain_events()[-1] == CeiCaptured("b", 3)
    assert eng.drain_events() == []


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_budget_is_respected_and_resources_are_distinct(policy: str) -> None:
    eng = Engine(6)
    for i in range(12):
        eng.add_cei(f"c{i}", "p", [(i % 6, 0, 5 + i), ((i + 1) % 6, 0, 9)])
    for budget in range(8):
        chosen = eng.select(budget, policy)
        assert len(chosen) == min(budget, 6)
        assert len(set(chosen)) == len(chosen)
    with pytest.raises(ValueError, match="budget"):
        eng.select(-1, policy)


def test_dead_cei_leaves_the_candidates_but_still_counts_for_wic() -> None:
    eng = Engine(2)
    eng.add_cei("dead", "p", [(0, 0, 1), (1, 0, 5)])
    assert eng.select(2, "s-edf-p") == [0, 1]
    eng.advance(2)  # the EI on 0 expired uncaptured: spec step 2
    assert eng.drain_events() == [CeiMissed("dead", 2)]
    assert eng.state("dead") is CeiState.MISSED
    for policy in ("s-edf-p", "s-edf-np", "mrsf-p", "mrsf-np", "m-edf-p", "m-edf-np"):
        assert eng.select(1, policy) == []
    assert eng.select(1, "wic") == [1]
    eng.probe([1])  # WIC's probe still captures the EI; the CEI stays missed
    assert eng.drain_events() == [EiCaptured("dead", 1, 1, 2)]
    assert eng.select(1, "wic") == []
    assert eng.state("dead") is CeiState.MISSED


def test_unsealed_cei_is_not_captured_until_sealed() -> None:
    eng = Engine(3)
    eng.add_cei("grow", "p", [(0, 0, 3)], sealed=False)
    eng.probe([0])
    assert eng.state("grow") is CeiState.PENDING
    eng.advance(2)
    assert eng.reveal_ei("grow", 1, 2, 4) == 1
    eng.probe([1])
    assert eng.state("grow") is CeiState.PENDING
    assert eng.select(3, "mrsf-p") == []  # nothing left to capture, yet not complete
    eng.seal("grow")
    assert eng.state("grow") is CeiState.CAPTURED
    assert eng.drain_events()[-1] == CeiCaptured("grow", 2)
    with pytest.raises(ValueError, match="sealed"):
        eng.reveal_ei("grow", 2, 2, 4)


def test_reveal_of_an_ei_already_captured_by_an_earlier_probe() -> None:
    eng = Engine(2)
    eng.add_cei("late", "p", [(1, 0, 9)], sealed=False)
    eng.advance(3)
    eng.probe([0])  # nobody knows of an EI on 0 yet
    eng.advance(5)
    eng.drain_events()
    assert eng.reveal_ei("late", 0, 2, 6, seal=True) == 1
    assert eng.drain_events() == [EiCaptured("late", 1, 0, 3)]
    assert eng.select(2, "mrsf-p") == [1]
    cands = eng.cei_candidates()
    assert eng.remaining(cands.cei).tolist() == [1]
    # Outside the window the earlier probe does not count; past finish the CEI dies at once.
    eng.add_cei("other", "p", [(0, 4, 4)])
    assert eng.drain_events() == [CeiMissed("other", 5)]


def test_slow_probe_defers_death_then_captures() -> None:
    eng = Engine(2)
    eng.add_cei("slow", "p", [(0, 2, 3), (1, 0, 9)])
    eng.advance(3)
    eng.begin_probe(0)
    assert eng.select(2, "s-edf-p") == [1]  # 0 is in flight
    eng.advance(5)  # the EI on 0 finished at 3, but the probe started at 3 may capture it
    assert eng.state("slow") is CeiState.PENDING
    assert eng.drain_events() == []
    events = eng.complete_probe(0, 3, success=True)
    assert events == [EiCaptured("slow", 0, 0, 3)]
    assert eng.state("slow") is CeiState.PENDING
    eng.probe([1])
    assert eng.state("slow") is CeiState.CAPTURED


def test_failed_slow_probe_makes_the_deferred_cei_missed() -> None:
    eng = Engine(2)
    eng.add_cei("slow", "p", [(0, 2, 3), (1, 0, 9)])
    eng.advance(3)
    eng.begin_probe(0)
    eng.advance(5)
    assert eng.state("slow") is CeiState.PENDING
    assert eng.complete_probe(0, 3, success=False) == [CeiMissed("slow", 5)]
    assert eng.state("slow") is CeiState.MISSED
    assert eng.select(2, "mrsf-p") == []
    with pytest.raises(ValueError, match="no probe of resource 0 started at chronon 3"):
        eng.complete_probe(0, 3, success=True)


def test_probe_that_started_before_the_window_does_not_defer_death() -> None:
    eng = Engine(1)
    eng.advance(1)
    eng.begin_probe(0)
    eng.add_cei("x", "p", [(0, 2, 3)])
    eng.advance(4)
    assert eng.drain_events() == [CeiMissed("x", 4)]


@pytest.mark.parametrize("policy", policy_names())
def test_excluded_and_in_flight_resources_are_never_selected(policy: str) -> None:
    eng = Engine(4)
    for i in range(4):
        eng.add_cei(f"c{i}", "p", [(i, 0, 9)])
    eng.begin_probe(2)
    chosen = eng.select(4, policy, exclude=[0])
    assert 0 not in chosen and 2 not in chosen
    if policy in ALL_POLICIES:  # the spec's policies fill the budget when they can
        assert sorted(chosen) == [1, 3]
        eng.complete_probe(2, 0, success=False)
        assert 2 in eng.select(4, policy, exclude=[0])


def test_select_holds_its_contract_whatever_the_policy_returns() -> None:
    class Sloppy(Policy):
        @property
        def name(self) -> str:
            return "sloppy"

        def select(self, pool: PoolView, budget: int, blocked: object) -> list[int]:
            return [0, 1, 1, 2, 3, 4]

    eng = Engine(5)
    eng.begin_probe(2)
    assert eng.select(2, Sloppy(), exclude={0}) == [1, 3]
    assert eng.select(9, Sloppy()) == [0, 1, 3, 4]


def test_resources_grow_when_larger_ids_appear() -> None:
    eng = Engine()
    assert eng.resources == 0
    eng.add_cei("a", "p", [(7, 0, 0)])
    assert eng.resources == 8
    eng.probe([11])
    assert eng.resources == 12


def test_bad_input_is_rejected_with_a_clear_error() -> None:
    eng = Engine(2)
    eng.add_cei("a", "p", [(0, 0, 5)])
    with pytest.raises(ValueError, match="'a': duplicate id"):
        eng.add_cei("a", "p", [(0, 0, 5)])
    with pytest.raises(ValueError, match="'b', EI #1: bad window"):
        eng.add_cei("b", "p", [(0, 0, 5), (1, 4, 3)])
    with pytest.raises(ValueError, match="at least one EI"):
        eng.add_cei("c", "p", [])
    with pytest.raises(KeyError):
        eng.state("nope")
    with pytest.raises(KeyError):
        eng.reveal_ei("nope", 0, 0, 0)
    eng.advance(3)
    with pytest.raises(ValueError, match="already at 3"):
        eng.advance(2)


def test_resolved_ceis_release_their_slots_and_the_active_table_compacts() -> None:
    eng = Engine(10)
    for t in range(300):
        eng.advance(t)
        for i in range(5):
            eng.add_cei(f"{t}-{i}", "p", [((t + i) % 10, t, t + 3), ((t + 2 * i) % 10, t + 1, t + 4)])
        eng.probe(eng.select(2, "mrsf-p"))
    counts = eng.counts()
    assert counts[CeiState.CAPTURED] > 0 and counts[CeiState.MISSED] > 0
    assert sum(counts.values()) == 1500
    # Only the last few chronons' CEIs hold slots; everything older is resolved.
    assert counts[CeiState.PENDING] <= 5 * 6
    assert eng.active_eis <= 2 * 5 * 5
    assert len(eng._a_res) <= 1024  # the table was compacted, not grown without bound
    eng.forget("0-0")
    with pytest.raises(KeyError):
        eng.state("0-0")


def test_bounded_history_still_serves_recent_reveals() -> None:
    eng = Engine(3, history=5)
    eng.add_cei("short", "p", [(2, 0, 2)])  # longest EI seen: 3 chronons
    for t in range(0, 60, 3):
        eng.advance(t)
        eng.probe([0, 1])
    eng.advance(60)
    eng.add_cei("recent", "p", [(0, 55, 70)])  # probe of 0 at 57 is within the kept horizon
    assert eng.drain_events()[-2:] == [EiCaptured("recent", 0, 0, 57), CeiCaptured("recent", 60)]
    # Older probes were pruned: with history=None the same reveal would find chronon 3.
    unbounded = Engine(3)
    for t in range(0, 60, 3):
        unbounded.advance(t)
        unbounded.probe([1])
    unbounded.advance(60)
    unbounded.add_cei("old", "p", [(1, 2, 4)])
    assert unbounded.drain_events()[-2:] == [EiCaptured("old", 0, 1, 3), CeiCaptured("old", 60)]
    eng.add_cei("old", "p", [(1, 2, 4)])
    assert eng.state("old") is CeiState.MISSED  # documented: beyond max(history, longest EI)


def test_forgetting_a_resolved_cei() -> None:
    eng = Engine(2)
    eng.add_cei("open", "p", [(0, 0, 0)], sealed=False)
    eng.add_cei("pending", "p", [(1, 0, 9)])
    with pytest.raises(ValueError, match="still pending"):
        eng.forget("pending")
    with pytest.raises(KeyError):
        eng.forget("never")
    eng.advance(1)
    assert eng.state("open") is CeiState.MISSED
    eng.forget("open")
    assert eng.state("open") is CeiState.MISSED  # unsealed: still takes EIs, so still known
    eng.reveal_ei("open", 1, 1, 2, seal=True)
    eng.advance(3)
    with pytest.raises(KeyError):
        eng.state("open")
    assert eng.counts()[CeiState.MISSED] == 1


def test_sealing_a_cei_that_never_got_an_ei_resolves_it_missed() -> None:
    eng = Engine(1)
    eng.add_cei("empty", "p", [], sealed=False)
    assert eng.state("empty") is CeiState.PENDING
    eng.advance(4)
    eng.seal("empty")
    assert eng.state("empty") is CeiState.MISSED
    assert eng.drain_events() == [CeiMissed("empty", 4)]
    assert eng.counts() == {CeiState.PENDING: 0, CeiState.CAPTURED: 0, CeiState.MISSED: 1}
    eng.seal("empty")  # sealing twice changes nothing
    assert eng.drain_events() == []


def test_capture_share_follows_recent_resolutions() -> None:
    from proxy.core.engine import SHARE_MIN_RESOLVED, SHARE_WINDOW

    eng = Engine(2)
    eng.advance(0)
    for i in range(SHARE_MIN_RESOLVED - 1):
        eng.add_cei(f"a{i}", "p", [(0, 0, 0)])
    eng.probe([0])
    assert eng.capture_share() is None  # 49 resolved: too few to say
    eng.add_cei("b", "p", [(1, 0, 0)])
    eng.advance(1)  # b missed: 49 captured, 1 missed
    assert eng.capture_share() == pytest.approx(49 / 50, abs=0.002)
    # A long run of misses pushes the share down: old captures fade.
    for t in range(2, 2 + 2 * SHARE_WINDOW):
        eng.add_cei(f"m{t}", "p", [(1, t - 1, t - 1)])
        eng.advance(t)
    share = eng.capture_share()
    assert share is not None and share < 0.01
    assert eng.counts()[CeiState.CAPTURED] == 49  # the plain counts never fade
