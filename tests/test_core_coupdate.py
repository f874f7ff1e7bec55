"""The co-update model (proxy.core.coupdate) and CaptureExplore's react step (issue 45, item 3)."""

from __future__ import annotations

import math

import pytest

from proxy.core.coupdate import CoUpdates
from proxy.core.discovery import CaptureExplore


def _pair_history(model: CoUpdates, events: int, *, a: int = 1, b: int = 2, every: int = 10) -> int:
    """``a`` and ``b`` update together every ``every`` chronons, each found by a probe a chronon later."""
    t = 0
    for i in range(events):
        u = i * every
        t = u + 1
        model.observe(a, t, [u])
        model.observe(b, t, [u])
    return t


def test_feeds_that_update_together_become_partners() -> None:
    model = CoUpdates(lag=1, prior=2.0, min_support=1.5)
    t = _pair_history(model, 8)
    for i in range(8):  # a third feed updates on its own, never within the lag of the pair
        model.observe(3, t, [i * 10 + 5])
    assert set(model.partners(1)) == {2} and set(model.partners(2)) == {1}
    assert model.partners(3) == {}
    # 8 co-occurrences over 8 events and a prior of 2 (decay over 71 chronons of a 400 half-life)
    p = model.chance(1, 2)
    assert p == pytest.approx(8 / 10, abs=0.015)
    assert model.chance(1, 3) == 0.0
    # A feed that updates within the lag anyway (rate 0.5 a chronon: 1 - exp(-3 x 0.5) = 0.7769 of the
    # time within one of the lag) gains less from the news: only the lift counts.
    base = 1 - math.exp(-1.5)
    assert model.chance(1, 2, rate=0.5) == pytest.approx((p - base) / (1 - base))
    assert model.chance(1, 2, rate=1.0) == 0.0  # a feed that changes every chronon: no news


def test_one_co_occurrence_is_not_support() -> None:
    model = CoUpdates(min_support=1.5)
    model.observe(1, 1, [0])
    model.observe(2, 1, [0])
    assert model.partners(1) == {2: 1.0}
    assert model.chance(1, 2) == 0.0


def test_a_partners_update_hints_until_the_feed_is_probed_after_it() -> None:
    model = CoUpdates(lag=1)
    t = _pair_history(model, 6)  # the last joint update at 50, both probed at 51
    model.observe(1, 60, [58])  # feed 1 updated at 58: feed 2, last probed at 51, likely did too
    h = model.hints(60, 10, [1, 2, 3], [60, t, None], [0.0, 0.0, 0.0])
    assert h[0] == 0.0 and h[2] == 0.0
    assert h[1] == pytest.approx(model.chance(1, 2)) and h[1] > 0.5
    # Probed at 59 = 58 + lag: any reaction is seen, the hint is gone.
    model.observe(2, 59, [])
    assert model.hints(60, 10, [1, 2], [60, 59], [0.0, 0.0]).tolist() == [0.0, 0.0]


def test_a_hint_past_the_window_is_dropped() -> None:
    model = CoUpdates(lag=1)
    t = _pair_history(model, 6)
    model.observe(1, 60, [58])
    assert model.hints(69, 10, [2], [t], [0.0])[0] > 0  # 69 - 58 <= window + lag
    assert model.hints(70, 10, [2], [t], [0.0])[0] == 0.0  # an update at 58 is past its window at 70


def test_partners_are_bounded_and_the_strong_ones_stay() -> None:
    model = CoUpdates(partners=3, half_life=50.0, memory=10)
    _pair_history(model, 10, every=4)  # feeds 1 and 2: ten joint updates
    for j in range(10, 30):  # then twenty feeds each co-update once with feed 1, far apart
        u = 40 + 8 * (j - 10)
        model.observe(1, u + 1, [u])
        model.observe(j, u + 1, [u])
    kept = model.partners(1)
    assert len(kept) == 3 and 2 in kept
    assert all(len(model.partners(j)) <= 3 for j in range(10, 30))


def test_counts_halve_every_half_life() -> None:
    model = CoUpdates(half_life=100.0)
    model.observe(1, 0, [0])
    model.observe(2, 0, [0])
    model.observe(3, 100, [])  # time passes
    assert model.partners(1)[2] == pytest.approx(0.5)
    model.observe(3, 300, [])
    assert model.partners(1)[2] == pytest.approx(0.125)


def test_a_crowded_chronon_pairs_only_known_partners() -> None:
    model = CoUpdates(partners=2)  # crowd: more than 8 others near one event
    for f in range(10, 20):
        model.observe(f, 1, [0])
    model.observe(1, 1, [0])
    assert model.partners(1) == {}  # ten others at once: no new partner


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"lag": -1}, "lag"), ({"partners": 0}, "partners"), ({"half_life": 0.0}, "half_life"),
    ({"memory": 2, "lag": 1}, "memory"), ({"prior": -1.0}, "prior"),
])
def test_refuses_bad_parameters(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CoUpdates(**kwargs)  # type: ignore[arg-type]


def _pick(alloc: CaptureExplore, t: int, hint: list[float] | None) -> list[int]:
    feeds = [1, 2, 3, 4]
    return alloc.pick(1, t, feeds, [0, 0, 0, 0], [0.2, 0.2, 0.01, 0.01], [1.0, 1.0, 1.0, 1.0], 10,
                      hint=hint)


def test_react_probes_a_hinted_feed_within_its_share_of_the_budget() -> None:
    alloc = CaptureExplore(epsilon=0.0, react=0.5, react_share=0.25)
    hint = [0.0, 0.0, 0.0, 0.9]  # feed 4 is slow, but its partner just updated
    picks = [_pick(alloc, t, hint) for t in range(1, 9)]
    # One react probe per 1 / (0.25 x 1) chronons: feed 4 at the 4th and 8th, the stride otherwise.
    assert [t for t, p in enumerate(picks, 1) if p == [4]] == [4, 8]
    below = CaptureExplore(epsilon=0.0, react=0.95, react_share=0.25)
    assert all(_pick(below, t, hint) != [4] for t in range(1, 9))  # a hint under the threshold: no react


def test_no_hints_picks_as_before() -> None:
    plain, hinted = CaptureExplore(epsilon=0.0), CaptureExplore(epsilon=0.0, react_share=0.0)
    assert [_pick(plain, t, None) for t in range(1, 30)] == [_pick(hinted, t, [0.0] * 4) for t in range(1, 30)]
    with pytest.raises(ValueError, match="react"):
        CaptureExplore(react=0.0)
