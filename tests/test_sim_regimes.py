"""Regime shifts on synthetic traces (``proxy sim synth-trace --regime-shift``, issue 45, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.sim.regimes import shift_regimes
from proxy.sim.synthetic import HOURS_PER_WEEK, weekly_trace


def test_no_share_is_the_trace_itself() -> None:
    trace = weekly_trace(30, 7, weeks=2.0, items_per_week=8.0)
    assert shift_regimes(trace, 0.0, 4.0, 7) == (trace, ())
    assert shift_regimes(trace, 0.5, 1.0, 7) == (trace, ())


def test_the_shifted_feeds_change_pace_at_their_shift_and_the_others_not_at_all() -> None:
    trace = weekly_trace(40, 3, weeks=2.0, items_per_week=20.0, sigma=0.3)
    shifted, shifts = shift_regimes(trace, 0.5, 6.0, 3)
    assert len(shifts) == 20 and len({s.feed for s in shifts}) == 20
    span = 2.0 * HOURS_PER_WEEK
    by_feed = {s.feed: s for s in shifts}
    ups = downs = 0
    for i, (old, new) in enumerate(zip(trace.hours, shifted.hours, strict=True)):
        assert list(new) == sorted(new)
        if i not in by_feed:
            assert new == old
            continue
        s = by_feed[i]
        assert 0.2 * span <= s.at <= 0.8 * span and s.factor in (6.0, 1 / 6.0)
        assert [h for h in new if h < s.at] == [h for h in old if h < s.at]  # the past is kept
        after_old = sum(1 for h in old if h >= s.at)
        after_new = sum(1 for h in new if h >= s.at)
        if s.factor > 1:
            ups += 1
            assert after_new >= after_old and set(old) <= set(new)
        else:
            downs += 1
            assert after_new <= after_old and set(new) <= set(old)
    assert ups > 0 and downs > 0
    # Over all the shifted feeds, the items after the shift follow the factor: about 6× or 1/6.
    up_ratio = (sum(sum(1 for h in shifted.hours[s.feed] if h >= s.at) for s in shifts if s.factor > 1)
                / sum(sum(1 for h in trace.hours[s.feed] if h >= s.at) for s in shifts if s.factor > 1))
    assert 4.0 < up_ratio < 8.0


def test_a_seed_reproduces_the_shifts() -> None:
    trace = weekly_trace(20, 1, weeks=2.0)
    assert shift_regimes(trace, 0.3, 4.0, 11) == shift_regimes(trace, 0.3, 4.0, 11)


@pytest.mark.parametrize(("share", "factor"), [(-0.1, 4.0), (1.5, 4.0), (0.5, 0.5), (0.5, float("inf"))])
def test_bad_options_are_refused(share: float, factor: float) -> None:
    with pytest.raises(ValueError, match="regime-shift"):
        shift_regimes(weekly_trace(5, 1), share, factor, 1)


def test_the_cli_option(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from proxy.sim.cli import sim_app

    out = tmp_path / "t.csv"
    base = ["synth-trace", "-o", str(out), "--feeds", "60", "--seed", "3"]
    res = CliRunner().invoke(sim_app, base)
    assert res.output == f"wrote {out}: 327 items from 60 feeds over 4 weeks\n"  # the option's default: none
    res = CliRunner().invoke(sim_app, [*base, "--regime-shift", "0.5", "--regime-factor", "6"])
    assert res.exit_code == 0 and ", 30 feeds shifting regime" in res.output
    assert CliRunner().invoke(sim_app, [*base, "--regime-shift", "2"]).exit_code == 2
