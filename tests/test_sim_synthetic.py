"""Paper 002's workloads (proxy.sim.synthetic): weekly trace, Num Update Watch, FPN."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from proxy.core.model import EI
from proxy.sim.cli import sim_app
from proxy.sim.generate import Life
from proxy.sim.synthetic import (
    HOURS_PER_WEEK,
    CoUpdates,
    WeekShape,
    fpn_predictions,
    num_update_watch,
    trace_chronons,
    weekly_trace,
    write_trace_csv,
)
from proxy.sim.traces import load_trace


def test_weekly_trace_is_seeded_and_follows_the_week(tmp_path: Path) -> None:
    a, b = weekly_trace(300, 7), weekly_trace(300, 7)
    assert a == b and a != weekly_trace(300, 8)
    hours = np.concatenate([np.asarray(h) for h in a.hours])
    assert 4000 / 792 * 300 * 0.7 < len(hours) < 4200 / 792 * 300 * 1.3  # ~5.3 items per feed, as 002
    h = hours.astype(int) % HOURS_PER_WEEK
    day, hour = h // 24, h % 24
    work = ((day < 5) & (hour >= 9) & (hour < 18)).mean() / (5 * 9 / 168)
    weekend = (day >= 5).mean() / (2 * 24 / 168)
    assert work > 1.8 and weekend < 0.6  # working hours busy, weekends quiet
    p1, p2 = tmp_path / "a.csv", tmp_path / "b.csv"
    assert write_trace_csv(a, p1) == len(hours)
    write_trace_csv(b, p2)
    assert p1.read_bytes() == p2.read_bytes()
    assert p1.read_text().splitlines()[0] == "feed_id,timestamp_utc_iso"
    tr = load_trace(p1, 1000, days=28)  # the real trace's loader reads it
    assert len(tr.names) <= 300 and tr.stats.kept > 0.95 * len(hours)


def test_week_shape_has_mean_one() -> None:
    assert np.mean(WeekShape().hourly()) == pytest.approx(1.0)
    per = WeekShape().per_chronon(1000, 4.0)
    assert len(per) == 1000 and np.mean(per) == pytest.approx(1.0)
    assert per[0] < per[125 // 5 * 2]  # Monday 00:00 is quieter than Monday noon


def test_num_update_watch_every_x_th_update() -> None:
    wl = num_update_watch([[2, 5, 9], [], [1]], 12, every=2, window=3)
    assert [c.eis for c in wl.ceis] == [(EI(0, 5, 8, 5),)]
    wl = num_update_watch([[2, 5, 9], [], [1]], 12, every=1, life=Life.OVERWRITE)
    assert [c.eis[0] for c in wl.ceis] == [EI(2, 1, 11, 1), EI(0, 2, 4, 2), EI(0, 5, 8, 5), EI(0, 9, 11, 9)]
    assert wl.meta["update_chronons"] == [[2, 5, 9], [], [1]]
    assert [c.profile for c in wl.ceis][:2] == ["f2", "f0"]


def test_fpn_keeps_or_moves_updates() -> None:
    ups = [[1, 5, 9], [3]]
    assert fpn_predictions(ups, 1.0, 20, np.random.default_rng(0)) == ups
    moved = fpn_predictions([list(range(0, 1000, 10))], 0.0, 1000, np.random.default_rng(0))
    assert len(set(moved[0]) & set(range(0, 1000, 10))) < 30
    with pytest.raises(ValueError, match="rho"):
        fpn_predictions(ups, 1.5, 20, np.random.default_rng(0))


def test_trace_chronons_and_cli(tmp_path: Path) -> None:
    tr = weekly_trace(5, 1, weeks=1.0, items_per_week=20.0)
    per = trace_chronons(tr, 168)
    assert all(0 <= t < 168 for ts in per for t in ts)
    out = tmp_path / "t.csv"
    res = CliRunner().invoke(sim_app, ["synth-trace", "-o", str(out), "--feeds", "60", "--seed", "3"])
    assert res.exit_code == 0 and "from 60 feeds" in res.output
    assert CliRunner().invoke(sim_app, ["synth-trace", "-o", str(out), "--feeds", "0"]).exit_code == 2


def _co_occurrence(a: tuple[float, ...], b: tuple[float, ...], lag_h: float) -> float:
    """Share of ``a``'s items with an item of ``b`` within ``lag_h`` hours."""
    bb = np.asarray(b)
    return float(np.mean([bool((np.abs(bb - h) <= lag_h).any()) for h in a])) if a and b else 0.0


def test_co_update_clusters_publish_together() -> None:
    co = CoUpdates(clusters=4, share=0.5, events_per_week=4.0, react_prob=0.8, lag_minutes=10.0)
    tr = weekly_trace(80, 5, weeks=3.0, coupdates=co)
    assert len(tr.clusters) == 4 and sum(map(len, tr.clusters)) == 40
    assert sorted(itertools.chain(*tr.clusters)) == sorted(set(itertools.chain(*tr.clusters)))
    inside = [_co_occurrence(tr.hours[i], tr.hours[j], 1 / 6) for c in tr.clusters
              for i, j in itertools.permutations(c, 2)]
    clustered = set(itertools.chain(*tr.clusters))
    lone = [i for i in range(80) if i not in clustered]
    outside = [_co_occurrence(tr.hours[i], tr.hours[j], 1 / 6) for i, j in itertools.permutations(lone[:20], 2)]
    # A cluster's feed: most of its items are reactions (12 events x 0.8 against ~3.9 own items), and
    # a partner reacts to the same event with probability 0.8; unclustered feeds coincide by chance alone.
    assert float(np.mean(inside)) > 0.45
    assert float(np.mean(outside)) < 0.02
    # Every reaction lies within the lag of an event: a clustered feed's items beyond its own.
    base = weekly_trace(80, 5, weeks=3.0)
    assert all(set(base.hours[i]) <= set(tr.hours[i]) for i in range(80))  # its own items unchanged
    added = sum(len(tr.hours[i]) - len(base.hours[i]) for i in clustered)
    assert 0.8 * 4 * 3 * 40 * 0.7 < added < 0.8 * 4 * 3 * 40 * 1.3
    assert all(tr.hours[i] == base.hours[i] for i in lone)


def test_co_updates_are_seeded_and_off_by_default(tmp_path: Path) -> None:
    co = CoUpdates(clusters=3, share=0.6)
    assert weekly_trace(50, 2, coupdates=co) == weekly_trace(50, 2, coupdates=co)
    assert weekly_trace(50, 2, coupdates=co) != weekly_trace(50, 3, coupdates=co)
    assert weekly_trace(50, 2, coupdates=CoUpdates()) == weekly_trace(50, 2)  # clusters 0: no co-updates
    with pytest.raises(ValueError, match="react"):
        CoUpdates(clusters=2, react_prob=1.5)
    # The CLI's defaults write the very file they wrote before the co-update options existed.
    out = tmp_path / "t.csv"
    res = CliRunner().invoke(sim_app, ["synth-trace", "-o", str(out), "--feeds", "60", "--seed", "3"])
    assert res.output == f"wrote {out}: 327 items from 60 feeds over 4 weeks\n"
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert digest == "70e70d1a483de0a8a0e14407c73d0bd5e67f82a2f2eff61c8c5bf5f39ac403c4"
    res = CliRunner().invoke(sim_app, ["synth-trace", "-o", str(out), "--feeds", "60", "--seed", "3",
                                       "--clusters", "5", "--cluster-share", "0.5", "--react-prob", "0.9",
                                       "--lag", "5"])
    assert res.exit_code == 0 and "5 co-update clusters of 30 feeds" in res.output
    tr = load_trace(out, 1000, days=28)
    assert tr.stats.kept > 327
    bad = CliRunner().invoke(sim_app, ["synth-trace", "-o", str(out), "--clusters", "2", "--cluster-share", "2"])
    assert bad.exit_code == 2
