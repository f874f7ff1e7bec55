"""proxy.core.hazard.AgeHazard: the hazard by age since a feed's last publication, relative to its mean rate."""

from __future__ import annotations

import math

import pytest

from proxy.core.hazard import AGE_EDGES, REBUILD, AgeHazard


def _ratio_of(gaps: list[float], rate: float, *, strength: float = 1.0) -> AgeHazard:
    """One feed publishing at ``gaps`` apart, probed just after each publication."""
    h = AgeHazard(strength=strength)
    t = 0.0
    h.observe(1, t, [t], rate)
    for g in gaps:
        t += g
        h.observe(1, t, [t], rate)
    return h


def test_a_regular_feed_has_its_hazard_at_its_period() -> None:
    # Every 5 chronons: 20 events in (4, 6], exposure 1 per gap in each of (0, 1] ... (3, 4] and 1 in (4, 6].
    h = _ratio_of([5.0] * 20, 0.2, strength=1.0)
    ratios = h.ratios()
    assert ratios[0] == pytest.approx((0 + 1) / (20 * 0.2 + 1))  # (0, 1]: exposure 20 x 0.2, no event
    assert ratios[4] == pytest.approx((20 + 1) / (20 * 0.2 + 1))  # (4, 6]: 20 events, 20 chronons at risk
    assert ratios[-1] == 1.0  # the open bin: never reached, shrunk to Poisson
    assert h.ratio(4.5) == ratios[4] and h.ratio(0.5) == ratios[0]


@pytest.mark.parametrize(("gap", "bin_index"), [(1.0, 0), (1.5, 1), (2.0, 1), (7.0, 5), (64.0, 11), (65.0, 12)])
def test_an_event_lands_in_the_bin_of_its_age(gap: float, bin_index: int) -> None:
    h = _ratio_of([gap], 0.0, strength=1.0)  # rate 0: no exposure, so only the event moves its bin
    assert [i for i, r in enumerate(h.ratios()) if r != 1.0] == [bin_index]
    assert len(h.ratios()) == len(AGE_EDGES) + 1


def test_dates_already_seen_and_merged_ones_count_once() -> None:
    h = AgeHazard(strength=1.0)
    h.observe(7, 10.0, [2.0, 4.0], 0.0)  # the first document: 2 starts the ages, 4 is a gap of 2
    h.observe(7, 12.0, [2.0, 4.0, 4.3], 0.0)  # 4.3 is within merge (0.5) of 4: the same publication
    h.observe(7, 14.0, [4.0, 13.0], 0.0)  # 13: a gap of 9
    assert h.ratios()[1] == 2.0 and h.ratios()[6] == 2.0 and sum(h.ratios()) == len(AGE_EDGES) + 1 + 2
    assert h.age(7) == 13.0


def test_survival_probes_count_as_exposure_and_only_once() -> None:
    h = AgeHazard(strength=1.0)
    h.observe(3, 0.0, [0.0], 1.0)
    h.observe(3, 1.0, [0.0], 1.0)  # nothing new: ages (0, 1] observed, one expected update
    h.observe(3, 1.0, [0.0], 1.0)  # the same probe again: nothing more observed
    h.observe(3, 3.0, [2.5], 1.0)  # ages (1, 2] and (2, 2.5], an event at 2.5, then ages (0, 0.5] to 3
    assert h.ratios()[:3] == pytest.approx((1 / 2.5, 1 / 2, 2 / 1.5))


def test_a_bursty_feed_is_read_high_just_after_a_publication_and_flat_past_the_horizon() -> None:
    gaps = [1.0, 20.0] * 30
    h = _ratio_of(gaps, 2 / 21, strength=5.0)
    newest = h.age(1)
    assert newest is not None
    shape = h.shape(1, newest + 0.5)
    assert shape is not None
    assert shape.mass(newest, newest + 1) > 3 * shape.mass(newest + 5, newest + 6)
    assert h.shape(1, newest + 64.5) is None  # past the horizon: read at its mean
    assert h.shape(2, newest) is None  # never dated


def test_a_poisson_like_table_gives_a_flat_shape() -> None:
    h = AgeHazard(strength=5.0)
    shape = None
    for f in range(3):
        h.observe(f, 0.0, [0.0], 0.1)
        shape = h.shape(f, 1.0)
    assert shape is not None and all(w == 1.0 for w in shape.weights)  # nothing learnt: Poisson
    assert shape.mass(0.0, 10.0) == pytest.approx(10.0)


def test_the_shapes_weights_follow_the_table_within_rebuild_observations() -> None:
    h = AgeHazard(strength=1.0)
    h.observe(1, 0.0, [0.0], 0.0)
    first = h.shape(1, 0.5)
    assert first is not None
    t = 0.0
    for _ in range(REBUILD):
        t += 1.0
        h.observe(1, t, [t], 0.0)  # events at age 1, no exposure: bin (0, 1] grows
    later = h.shape(1, t + 0.5)
    assert later is not None and later.start == t
    assert later.weights[0] > later.weights[1] and first.weights[0] == first.weights[1]
    assert math.isclose(sum(later.weights) / len(later.weights), 1.0)


def test_drop_forgets_the_feed_but_not_the_table() -> None:
    h = _ratio_of([1.0] * 5, 0.0)
    before = h.ratios()
    h.drop(1)
    assert len(h) == 0 and h.age(1) is None and h.shape(1, 0.0) is None and h.ratios() == before


@pytest.mark.parametrize("kwargs", [{"strength": 0.0}, {"horizon": 0}, {"merge": -1.0}, {"edges": (2.0, 1.0)},
                                    {"edges": ()}])
def test_bad_settings_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        AgeHazard(**kwargs)  # type: ignore[arg-type]


def test_a_negative_rate_is_refused() -> None:
    with pytest.raises(ValueError):
        AgeHazard().observe(1, 0.0, [0.0], -1.0)
