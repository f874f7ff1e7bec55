"""Metric computations of the live benchmark on small hand-made logs with known answers."""

from __future__ import annotations

import math

import pytest

from proxy.bench.metrics import (
    ProbeRec,
    Pub,
    budget_per_chronon,
    cei_outcome,
    completeness_curve,
    entry_outcome,
    quantiles,
)
from proxy.core.model import CEI, EI, Budget, Workload
from proxy.sim.score import score_schedule


def _cei(cid: str, *eis: tuple[int, int, int]) -> CEI:
    return CEI(cid, "p0", tuple(EI(r, s, f) for r, s, f in eis))


# Two feeds. CEI a: feed 0 in [2, 5] and feed 1 in [3, 6]. CEI b: feed 0 in [8, 9].
CEIS = (_cei("a", (0, 2, 5), (1, 3, 6)), _cei("b", (0, 8, 9)))


@pytest.mark.parametrize(
    ("probes", "captured", "captured_at"),
    [
        # Both EIs probed in their windows: a is complete at the later probe.
        ([ProbeRec(0, 4, 4.0), ProbeRec(1, 6, 6.0)], 1, {"a": 6}),
        # Probe of feed 1 one chronon late: a missed.
        ([ProbeRec(0, 4, 4.0), ProbeRec(1, 7, 7.0)], 0, {}),
        # A failed probe captures nothing.
        ([ProbeRec(0, 4, 4.0), ProbeRec(1, 5, 5.0, ok=False)], 0, {}),
        # Window edges are inclusive; b captured at its finish.
        ([ProbeRec(0, 2, 2.0), ProbeRec(1, 3, 3.0), ProbeRec(0, 9, 9.0)], 2, {"a": 3, "b": 9}),
        # Probe before the window does not count, a later one in it does.
        ([ProbeRec(0, 1, 1.0), ProbeRec(0, 5, 5.0), ProbeRec(1, 3, 3.0)], 1, {"a": 5}),
    ],
)
def test_cei_outcome_table(probes: list[ProbeRec], captured: int, captured_at: dict[str, int]) -> None:
    out = cei_outcome(CEIS, probes)
    assert out.captured == captured
    assert out.total == 2
    assert dict(out.captured_at) == captured_at
    assert out.deadline == {"a": 6, "b": 9}
    assert out.completeness == captured / 2


def test_probe_before_the_publication_within_its_chronon_does_not_capture() -> None:
    # Published at 2.5 (mid-chronon 2); a probe decided at chronon 2 that started at 2.01 ran
    # before the entry existed. Another started at 2.7 in the same chronon did see it.
    published = {(0, 2): 2.5, (1, 3): 3.0, (0, 8): 8.0}
    early = [ProbeRec(0, 2, 2.01), ProbeRec(1, 3, 3.0)]
    assert cei_outcome(CEIS, early, published).captured == 0
    late = [ProbeRec(0, 2, 2.7), ProbeRec(1, 3, 3.0)]
    assert cei_outcome(CEIS, late, published).captured_at == {"a": 3}
    # Without publication times the convention is the simulator's: visible from the start chronon.
    assert cei_outcome(CEIS, early).captured == 1


def test_cei_outcome_agrees_with_the_simulator_scorer() -> None:
    wl = Workload(chronons=10, budget=Budget(2), resources=2, ceis=CEIS)
    schedule = [(4, 0), (6, 1), (8, 1), (9, 0)]
    ref = score_schedule(wl, schedule)
    out = cei_outcome(CEIS, [ProbeRec(r, t, float(t)) for t, r in schedule])
    assert (out.captured, set(out.captured_at)) == (ref.captured, set(ref.captured_ids))


def test_entry_window_rule_and_delays() -> None:
    # Feed 0 publishes at 0, 1, 2, 3 and shows its last N=2 entries: entry at 0 leaves at 2
    # (when the entry at 2 appears), entry at 1 leaves at 3. One probe at 2.5 sees 1 and 2.
    pubs = [Pub(0, 0.0), Pub(0, 1.0), Pub(0, 2.0), Pub(0, 3.0)]
    out = entry_outcome(pubs, [ProbeRec(0, 2, 2.5)], window=2)
    assert (out.captured, out.total) == (2, 4)
    assert sorted(out.delays) == [0.5, 1.5]
    # A probe exactly when the pushing entry appears no longer sees the old one (the farm
    # publishes what is due before it answers).
    out = entry_outcome(pubs, [ProbeRec(0, 2, 2.0)], window=2)
    assert sorted(out.delays) == [0.0, 1.0]
    # A large window keeps everything; the first probe after each publication counts.
    out = entry_outcome(pubs, [ProbeRec(0, 1, 1.0), ProbeRec(0, 4, 4.0)], window=20)
    assert out.completeness == 1.0
    assert sorted(out.delays) == [0.0, 1.0, 1.0, 2.0]  # entries at 0, 1 by the probe at 1; 2, 3 at 4


def test_entry_outcome_ignores_other_feeds_and_failed_probes() -> None:
    pubs = [Pub(0, 0.0), Pub(1, 0.0)]
    out = entry_outcome(pubs, [ProbeRec(0, 1, 1.0, ok=False), ProbeRec(1, 5, 5.0)], window=1)
    assert (out.captured, out.total, out.delays) == (1, 2, (5.0,))
    with pytest.raises(ValueError, match="window"):
        entry_outcome(pubs, [], window=0)


def test_budget_per_chronon_counts_failed_probes_and_ignores_outside() -> None:
    probes = [ProbeRec(0, 0, 0.0), ProbeRec(1, 0, 0.1, ok=False), ProbeRec(0, 2, 2.0), ProbeRec(0, 7, 7.0)]
    assert budget_per_chronon(probes, 4) == [2, 0, 1, 0]


def test_completeness_curve_counts_resolved_ceis_only() -> None:
    out = cei_outcome(CEIS, [ProbeRec(0, 4, 4.0), ProbeRec(1, 6, 6.0)])
    curve = completeness_curve(out, 10)
    assert all(math.isnan(v) for v in curve[:6])  # nothing resolved before chronon 6
    assert curve[6] == 1.0  # a captured at 6
    assert curve[8] == 1.0
    assert curve[9] == 0.5  # b missed at its deadline 9


def test_quantiles_nearest_rank() -> None:
    q = quantiles([float(i) for i in range(1, 101)])
    assert (q["p50"], q["p90"], q["p99"], q["max"], q["mean"]) == (50.0, 90.0, 99.0, 100.0, 50.5)
    assert math.isnan(quantiles([])["p50"])
