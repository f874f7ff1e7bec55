"""The regime-shift detector (issue 45, item 3): a two-sided Poisson CUSUM on probe counts, bounded memory."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.changepoint import Shift, ShiftDetector


def _feed(detector: ShiftDetector, counts: list[int], gap: float, rate: float, r: int = 0) -> list[int]:
    """Probe indices at which ``detector`` reports a shift of feed ``r``."""
    return [i for i, k in enumerate(counts) if detector.observe(r, gap, k, rate) is not None]


def test_a_steady_feed_at_its_rate_raises_no_alarm() -> None:
    # One update every probe, as believed: each probe moves the upward sum by ln 4 - 3 < 0
    # and the downward one by -ln 4 + 0.75 < 0; neither leaves 0.
    d = ShiftDetector(ratio=4.0, threshold=5.0)
    assert _feed(d, [1] * 500, gap=1.0, rate=1.0) == []
    assert d.record(0) is None


def test_a_jump_is_found_and_the_new_regime_is_its_record() -> None:
    # 0.1 updates a chronon (one per ten-chronon probe), then ten a probe: the upward sum gains
    # 10·ln 4 - 3·λ₀·10 per probe, past 5 nats at the first such probe.
    d = ShiftDetector(ratio=4.0, threshold=5.0)
    counts = [1] * 40 + [10] * 5
    alarms = _feed(d, counts, gap=10.0, rate=0.1)
    assert alarms[0] == 40
    assert d.record(0) is not None
    updates, chronons = d.record(0)  # type: ignore[misc]
    assert updates / chronons > 0.5  # the old regime's 0.1 is gone from it


def test_the_shift_reports_its_direction_and_segment() -> None:
    d = ShiftDetector(ratio=4.0, threshold=5.0)
    for _ in range(30):
        assert d.observe(7, 1.0, 2, 2.0) is None
    shift = None
    probes = 0
    while shift is None:  # silence where two a chronon were usual
        shift = d.observe(7, 1.0, 0, 2.0)
        probes += 1
    assert isinstance(shift, Shift) and not shift.up
    assert shift.updates == 0.0 and shift.chronons == probes
    # λ₀ = (60 + 1)/(30 + 0.5) = 2; each silent chronon adds (1 - 1/4)·2 = 1.5 nats: 4 probes pass 5.
    assert probes == 4
    assert d.record(7) == (0.0, 4.0)


def test_feeds_are_independent_and_forgotten() -> None:
    d = ShiftDetector()
    _feed(d, [1] * 20 + [30] * 3, gap=10.0, rate=0.1, r=1)
    _feed(d, [1] * 23, gap=10.0, rate=0.1, r=2)
    assert d.record(1) is not None and d.record(2) is None
    assert len(d) == 2
    d.forget(1)
    assert d.record(1) is None and len(d) == 1


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"ratio": 1.0}, "ratio"), ({"ratio": math.inf}, "ratio"), ({"threshold": 0.0}, "threshold"),
    ({"prior_updates": -1.0}, "prior_updates"),
])
def test_bad_parameters_are_refused(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ShiftDetector(**kwargs)


@pytest.mark.parametrize(("args", "field"), [((-1.0, 0, 1.0), "chronons"), ((1.0, -1, 1.0), "updates"),
                                              ((1.0, 0, 0.0), "rate"), ((1.0, 0, math.nan), "rate")])
def test_bad_observations_are_refused(args: tuple[float, int, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ShiftDetector().observe(0, *args)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rate=st.floats(0.1, 2.0), factor=st.sampled_from([0.125, 8.0]))
def test_a_large_shift_is_found_within_bounded_probes(seed: int, rate: float, factor: float) -> None:
    """Poisson counts at ``rate`` (one update a probe or more on average), then at ``factor`` times it:
    found after the change within 60 probes of ten chronons (Lorden's bound for 5 nats against an 8×
    shift is a few probes; 60 leaves room for a shift found late because the counts before it were low)."""
    rng = np.random.default_rng(seed)
    d = ShiftDetector(ratio=4.0, threshold=5.0)
    before = rng.poisson(rate * 10.0, 200).tolist()
    after = rng.poisson(rate * factor * 10.0, 60).tolist()
    alarms = _feed(d, before + after, gap=10.0, rate=rate)
    assert any(i >= 200 for i in alarms)
    # Memory is bounded: one state per feed whatever its history.
    assert len(d) == 1
