"""The evaluator's operations applied to the real engine: CEIs captured or missed as the paper says."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from proxy.core.engine import CeiMissed, CeiState, Engine
from proxy.rules import ChrononGrid, OpenCei, ProfileSpec, RevealEi, TriggerEvaluator, apply_ops

MISH, CNN, MONEY = 0, 1, 2
FEEDS = {"FEED_MISH": MISH, "FEED_CNN": CNN, "FEED_MONEY": MONEY, "A": 3, "B": 4}
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


@dataclass(frozen=True)
class Entry:
    title: str | None = None
    summary: str | None = None
    content: str | None = None
    published: datetime | None = None
    link: str | None = None
    author: str | None = None
    categories: tuple[str, ...] = ()


class Proxy:
    """The service's order of calls, minus I/O: tick, ops, probes (on_probe before the capture)."""

    def __init__(self, ev: TriggerEvaluator) -> None:
        self.ev = ev
        self.engine = Engine(5)
        self.last_success: dict[int, int] = {}  # what the service's FeedSlot remembers

    def chronon(self, t: int, probes: dict[int, list[Entry] | None], pings: tuple[int, ...] = ()) -> None:
        self.engine.advance(t)
        self._missed()
        apply_ops(self.engine, self.ev.on_tick(t))
        for r in pings:
            apply_ops(self.engine, self.ev.on_notification(r, t))
        for r, entries in probes.items():
            self.engine.begin_probe(r)
            ok = entries is not None
            ops = self.ev.on_probe(r, t, ok, entries or [], previous_success=self.last_success.get(r))
            apply_ops(self.engine, ops)
            self.engine.complete_probe(r, t, success=ok)
            if ok:
                self.last_success[r] = t
        self._missed()

    def _missed(self) -> None:
        for event in self.engine.drain_events():
            if isinstance(event, CeiMissed):
                apply_ops(self.engine, self.ev.on_trigger_missed(event.cei_id))


def _proxy(body: Any) -> Proxy:
    ev = TriggerEvaluator(ChrononGrid(datetime(2026, 1, 5, tzinfo=UTC), 60.0))
    ev.add_profile("p", ProfileSpec.model_validate(body), FEEDS)
    return Proxy(ev)


def test_motivating_example_on_the_engine() -> None:
    px = _proxy(MOTIVATING)
    oil, gold = [Entry(title="Oil at $90")], [Entry(title="Gold")]
    script: dict[int, dict[int, list[Entry] | None]] = {
        1: {MISH: oil},  # CEI 0 [0,2] fires: CNN, MONEY [1, 11]
        4: {MISH: gold},  # CEI 1 [3,5]: rank 1, captured by this probe
        5: {CNN: []},
        7: {MISH: None},  # CEI 2 [6,8]: the probe fails, nothing else -> missed at 9
        10: {MISH: oil},  # CEI 3 [9,11] fires: CNN, MONEY [10, 20]
        11: {CNN: [], MONEY: []},  # completes CEI 0 and CEI 3
        12: {MISH: oil},  # CEI 4 [12,14] fires: CNN, MONEY [12, 22]; never probed -> missed at 23
    }
    for t in range(25):
        px.chronon(t, script.get(t, {}))
        if t == 4:
            assert px.engine.state("p/0:1") is CeiState.CAPTURED
            assert px.engine.state("p/0:0") is CeiState.PENDING
    states = {f"p/0:{i}": px.engine.state(f"p/0:{i}") for i in range(5)}
    assert states == {
        "p/0:0": CeiState.CAPTURED,
        "p/0:1": CeiState.CAPTURED,
        "p/0:2": CeiState.MISSED,
        "p/0:3": CeiState.CAPTURED,
        "p/0:4": CeiState.MISSED,
    }
    # CEIs 5..7 opened at 15, 18, 21 and 24; those whose window ended were missed, and the
    # evaluator sealed them so the engine released them.
    assert px.ev.open_cei_ids() == ["p/0:8"]
    assert px.engine.pending_ceis == 1


def test_rank_one_cei_waits_for_its_trigger_capture() -> None:
    # on_probe runs before the capture: the seal alone must not complete the CEI.
    px = _proxy(MOTIVATING)
    px.engine.advance(0)
    apply_ops(px.engine, px.ev.on_tick(0))
    px.engine.begin_probe(MISH)
    apply_ops(px.engine, px.ev.on_probe(MISH, 0, True, []))
    assert px.engine.state("p/0:0") is CeiState.PENDING
    px.engine.complete_probe(MISH, 0, success=True)
    assert px.engine.state("p/0:0") is CeiState.CAPTURED


def test_auctionwatch_on_the_engine() -> None:
    body = {"name": "auctions", "rules": [{"name": "w", "watch": {"feeds": ["A", "B"], "within": "3m"}}]}
    px = _proxy(body)
    A, B = 3, 4
    pings = {1: (A,), 2: (B,), 6: (A,), 7: (A,), 12: (B,), 13: (A,), 14: (B,)}
    probes: dict[int, dict[int, list[Entry] | None]] = {3: {A: [], B: []}, 14: {A: [], B: []}}
    for t in range(20):
        px.chronon(t, probes.get(t, {}), pings.get(t, ()))
    # CEI 0 = A@1 [1,4] + B@2 [2,5], both probed at 3: captured.
    # CEI 1 = A@6 [6,9] + B@12: A is never probed, so the engine misses it at 10 and the
    # evaluator seals it; B's update at 12 still closes it (AuctionWatch keeps its place).
    # CEI 2 = A@13 [13,16] + B@14 [14,17] (strictly after 12), both probed at 14: captured.
    assert [px.engine.state(f"p/0:{i}") for i in range(3)] == [
        CeiState.CAPTURED,
        CeiState.MISSED,
        CeiState.CAPTURED,
    ]
    assert px.ev.open_cei_ids() == []
    assert px.engine.pending_ceis == 0


@pytest.mark.parametrize("policy", ["s-edf-p", "mrsf-p", "m-edf-np"])
def test_motivating_example_scheduled_by_a_policy(policy: str) -> None:
    """The live loop's order with the engine choosing the probes: budget 1 is enough for all."""
    px = _proxy(MOTIVATING)
    engine, ev = px.engine, px.ev
    opened: list[str] = []
    ranks: dict[str, int] = {}
    for t in range(60):
        engine.advance(t)
        px._missed()
        ops = ev.on_tick(t)
        opened += [op.cei_id for op in ops if isinstance(op, OpenCei)]
        apply_ops(engine, ops)
        for r in engine.select(1, policy):
            engine.begin_probe(r)
            # Mish posts about oil in every other 3-minute slot.
            entries = [Entry(title="oil" if (t // 3) % 2 == 0 else "gold")] if r == MISH else []
            ops = ev.on_probe(r, t, True, entries)
            for op in ops:  # rank = the trigger EI + the query EIs that joined
                ranks[op.cei_id] = ranks.get(op.cei_id, 1) + (1 if isinstance(op, RevealEi) else 0)
            apply_ops(engine, ops)
            engine.complete_probe(r, t, success=True)
        px._missed()
    resolved = [c for c in opened if engine.state(c) is not CeiState.PENDING]
    assert len(resolved) >= 17
    assert all(engine.state(c) is CeiState.CAPTURED for c in resolved)
    # Half the CEIs grew to rank 3 (oil), half closed at rank 1.
    assert sorted(set(ranks.values())) == [1, 3]
    assert sum(1 for c in resolved if ranks[c] == 3) >= 8
