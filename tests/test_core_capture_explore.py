"""CaptureExplore (proxy.core.discovery): capture-optimal frequencies that keep exploring under learnt rates."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.stats import gamma, norm

from proxy.core.discovery import CaptureExplore, capture_frequencies, coordinated_weights
from proxy.core.rates import (
    POOL_EXPOSURE_CAP,
    CycleShape,
    OnlineRates,
    _median,
    cycle_masses,
    gamma_upper,
    pooled_rates,
)
from proxy.service.loop import background_allocator


@pytest.mark.parametrize(("shape", "rate", "z"), [(1, 10, 1.0), (1, 10, 2.0), (3, 50, 1.0), (20, 400, 1.0),
                                                  (5, 5, 0.0), (2, 100, -1.0), (100, 1000, 2.0)])
def test_gamma_upper_is_close_to_the_exact_quantile(shape: float, rate: float, z: float) -> None:
    exact = gamma.ppf(norm.cdf(z), shape, scale=1 / rate)
    assert gamma_upper(shape, rate, z) == pytest.approx(exact, rel=0.03)


def test_gamma_upper_refuses_an_improper_posterior() -> None:
    with pytest.raises(ValueError, match="> 0"):
        gamma_upper(0.0, 1.0, 1.0)


def test_online_rates_posterior_is_prior_plus_what_probes_saw() -> None:
    m = OnlineRates(prior_count=1.0, prior_chronons=10.0)
    assert m.posterior(3) == (1.0, 10.0)
    m.observe_probe(3, 5, 9)  # the baseline: backlog, not a rate
    m.observe_probe(3, 25, 2)
    assert m.posterior(3) == (3.0, 30.0)
    assert m.rate(3, 25) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("rate", "posterior", "expected"),
    [
        ([0.1, 0.1], None, [0.1, 0.1]),  # rates known: no optimism
        # Same mean 0.1: seen for 10 chronons (1 update) vs 1,000 (100): the first looks ~1.8x faster.
        ([0.1, 0.1], [(1.0, 10.0), (100.0, 1000.0)], [0.183, 0.110]),
        ([0.0, -1.0], [(1.0, 10.0), (1.0, 10.0)], [0.0, 0.0]),  # a zero rate stays zero
    ],
)
def test_optimistic_rates_scale_by_the_posterior_quantile(
    rate: list[float], posterior: list[tuple[float, float]] | None, expected: list[float]
) -> None:
    assert CaptureExplore(z=1.0).optimistic(rate, posterior) == pytest.approx(expected, abs=2e-3)


def drive(alloc: CaptureExplore, budget: int, chronons: int, rate: list[float], weight: list[float],
          window: int, resources: list[int] | None = None,
          shape: list[CycleShape | None] | None = None) -> list[list[int]]:
    """Run ``alloc`` over ``chronons``: every probe succeeds; the invariants hold at every chronon."""
    res = resources if resources is not None else list(range(len(rate)))
    last: dict[int, int | None] = dict.fromkeys(res)
    out = []
    for t in range(chronons):
        picked = alloc.pick(budget, t, res, [last[r] for r in res], rate, weight, window, shape=shape)
        assert len(picked) <= budget and len(set(picked)) == len(picked) and set(picked) <= set(res)
        for r in picked:
            last[r] = t
        out.append(picked)
    return out


@pytest.mark.parametrize(
    ("n", "budget", "epsilon", "window"),
    [(5, 1, 0.2, 4), (20, 1, 0.2, 9), (20, 3, 0.2, 9), (20, 1, 0.5, 2), (40, 2, 0.1, 10), (7, 1, 1.0, 0)],
)
def test_the_explore_floor_reaches_every_watched_feed_within_a_bound(
    n: int, budget: int, epsilon: float, window: int
) -> None:
    # One feed looks 1,000x faster than the rest: capture alone would probe it and its window-mates only.
    rate = [1.0] + [0.001] * (n - 1)
    history = drive(CaptureExplore(epsilon=epsilon), budget, 400, rate, [1.0] * n, window)
    # Stalest first: n explore probes reach every feed; epsilon*budget of them per chronon.
    bound = math.ceil(n / (epsilon * budget)) + 1
    for r in range(n):
        times = [-1] + [t for t, picked in enumerate(history) if r in picked] + [400]
        assert max(b - a for a, b in itertools.pairwise(times)) <= bound, r


@pytest.mark.parametrize(
    ("budget", "rate", "window", "expected"),
    [
        # epsilon 0, rates known: capture frequencies (0.5, 0.5, 0 for W=1) strided. At 0 no credit yet:
        # the greedy fill probes feed 0 (never probed, smallest id), which spends its credit.
        (1, [0.5, 0.2, 0.0], 1, [[0], [1], [0], [1], [0], [1]]),
        # Budget 2, W=3: f = (0.25, 0.25, 0); every fill probe resets a feed's credit, so the greedy
        # index (fastest first, never-probed first) spends what the stride leaves.
        (2, [0.5, 0.2, 0.1], 3, [[0, 1], [2, 0], [0, 1], [0, 2], [0, 1], [0, 2]]),
        (0, [0.5], 1, [[]] * 6),
    ],
)
def test_without_exploration_and_known_rates_it_is_capture_plus_a_greedy_fill(
    budget: int, rate: list[float], window: int, expected: list[list[int]]
) -> None:
    got = drive(CaptureExplore(epsilon=0.0), budget, 6, rate, [1.0] * len(rate), window)
    assert got == expected


@settings(max_examples=50, deadline=None)
@given(
    st.integers(0, 4),
    st.lists(st.tuples(st.floats(0, 2), st.floats(0, 3)), min_size=1, max_size=10),
    st.floats(0, 1),
    st.integers(0, 6),
)
def test_picks_are_distinct_watched_within_budget_and_deterministic(
    budget: int, feeds: list[tuple[float, float]], epsilon: float, window: int
) -> None:
    rate, weight = [f[0] for f in feeds], [f[1] for f in feeds]
    resources = [3 * i + 1 for i in range(len(feeds))]  # ids that are not indices
    a = drive(CaptureExplore(epsilon=epsilon), budget, 30, rate, weight, window, resources)
    assert a == drive(CaptureExplore(epsilon=epsilon), budget, 30, rate, weight, window, resources)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        CaptureExplore(epsilon=1.5)
    with pytest.raises(ValueError, match="refresh"):
        CaptureExplore(refresh=0)
    with pytest.raises(ValueError, match="same length"):
        CaptureExplore().pick(1, 0, [0, 1], [None], [1.0, 1.0], [1.0, 1.0], 3)


@pytest.mark.parametrize(
    ("start", "length", "weights", "a", "b", "expected"),
    [
        (0.0, 10.0, (1.0,), 3.0, 7.5, 4.5),  # flat: the length of the interval
        (0.0, 100.0, (2.0, 0.0), 10.0, 30.0, 40.0),  # busy half: twice the mean
        (0.0, 100.0, (2.0, 0.0), 60.0, 90.0, 0.0),  # quiet half: nothing expected
        (0.0, 100.0, (2.0, 0.0), 40.0, 110.0, 40.0),  # across the cycle's end: 10 busy + 10 busy again
        (10.0, 100.0, (2.0, 0.0), -90.0, 10.0, 100.0),  # a whole cycle before the start: its mean
        (0.0, 100.0, (2.0, 0.0), 0.0, 1000.0, 1000.0),  # ten cycles
        (0.0, 100.0, (1.5, 0.5, 1.0, 1.0), 20.0, 30.0, 10.0),  # across two bins: 5 × 1.5 + 5 × 0.5
        (0.0, 100.0, (2.0, 0.0), 30.0, 30.0, 0.0),  # empty interval
        (0.0, 100.0, (2.0, 0.0), 30.0, 20.0, 0.0),  # reversed: 0, not negative
    ],
)
def test_cycle_shape_mass(start: float, length: float, weights: tuple[float, ...], a: float, b: float,
                          expected: float) -> None:
    assert CycleShape(start, length, weights).mass(a, b) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("start", "length", "weights", "match"),
    [(0.0, 0.0, (1.0,), "length"), (math.nan, 10.0, (1.0,), "finite"), (0.0, 10.0, (), "weights"),
     (0.0, 10.0, (1.0, -1.0, 3.0), "weights"), (0.0, 10.0, (2.0, 2.0), "mean 1")],
)
def test_a_bad_cycle_shape_is_refused(start: float, length: float, weights: tuple[float, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CycleShape(start, length, weights)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([0.0, -3.0, 12.25]), st.sampled_from([10.0, 37.5, 10_080.0]),
                       st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5]), min_size=1, max_size=8)), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 3), st.floats(-1e5, 1e5), st.floats(-5.0, 3e4)), max_size=40),
)
def test_cycle_masses_are_the_same_floats_as_mass(cycles: list[tuple[float, float, list[float]]],
                                                  spans: list[tuple[int, float, float]]) -> None:
    # The allocator reads thousands of cycles per chronon with cycle_masses: it must not change a tie.
    shapes = []
    for start, length, w in cycles:
        assume(sum(w) > 0)
        shapes.append(CycleShape(start, length, tuple(x * len(w) / sum(w) for x in w)))
    picked = [shapes[i % len(shapes)] for i, _, _ in spans]
    a = [x for _, x, _ in spans]
    b = [x + d for _, x, d in spans]
    assert cycle_masses(picked, a, b).tolist() == [c.mass(x, y) for c, x, y in zip(picked, a, b, strict=True)]
    assert cycle_masses(picked, 7, 7 + 11).tolist() == [c.mass(7, 18) for c in picked]


def busy_and_quiet_probes(shaped: bool) -> tuple[int, int]:
    """Feed 0 changes only in the first half of each 100-chronon cycle; feeds 1-5 all the time; same mean rate."""
    cycle = CycleShape(0.0, 100.0, (2.0, 0.0))
    history = drive(CaptureExplore(epsilon=0.0), 1, 1000, [0.1] * 6, [1.0] * 6, 4,
                    shape=[cycle if shaped else None] + [None] * 5)
    busy = sum(0 in picked for t, picked in enumerate(history) if t % 100 < 50)
    quiet = sum(0 in picked for t, picked in enumerate(history) if t % 100 >= 50)
    return busy, quiet


def test_a_seasonal_feed_gets_its_probes_in_its_busy_hours() -> None:
    # The same budget (1 per chronon) and mean rates. Read at its mean, feed 0 is probed every
    # window + 1 = 5 chronons all the time; read off its cycle, as often in its busy half (all its
    # updates caught) and never in its quiet half, whose 100 probes go to the other feeds.
    assert busy_and_quiet_probes(shaped=False) == (100, 100)
    assert busy_and_quiet_probes(shaped=True) == (100, 0)


def test_equal_shaped_feeds_tie_by_id_and_the_budget_is_never_exceeded() -> None:
    cycle = CycleShape(0.0, 20.0, (1.8, 0.2))
    history = drive(CaptureExplore(epsilon=0.0), 1, 40, [0.3, 0.3], [1.0, 1.0], 1, shape=[cycle, cycle])
    assert history[:4] == [[0], [1], [0], [1]]  # never probed: the smaller id first; then the stride alternates
    assert all(len(picked) <= 1 for picked in history)


def test_shape_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        CaptureExplore().pick(1, 0, [0, 1], [None, None], [1.0, 1.0], [1.0, 1.0], 3, shape=[None])


@pytest.mark.parametrize(
    ("level_exponent", "expected"),
    [
        (1.0, [20, 0, 0]),  # weight x rate: feed 0 (1 x 0.5) over feed 2 (3 x 0.01)
        (0.5, [20, 0, 0]),  # 1 x 0.71 still over 3 x 0.1
        (0.0, [0, 0, 20]),  # weight alone: feed 2, three rules waiting for it
    ],
)
def test_the_level_exponent_sets_how_much_the_rates_rank_the_frequencies(
    level_exponent: float, expected: list[int]
) -> None:
    # Window 0: one feed's frequency (one probe per chronon, credit from the first chronon) takes
    # the whole budget, so the frequencies alone decide every probe.
    history = drive(CaptureExplore(epsilon=0.0, level_exponent=level_exponent), 1, 20, [0.5, 0.2, 0.01],
                    [1.0, 1.0, 3.0], 0)
    assert [sum(r in picked for picked in history) for r in range(3)] == expected


def test_a_level_exponent_outside_0_1_is_refused() -> None:
    with pytest.raises(ValueError, match="level_exponent"):
        CaptureExplore(level_exponent=1.5)


# --- Pooled rates and the service's configuration (epsilon 0, capture-optimal on pooled rates) -----------------


@pytest.mark.parametrize(
    ("updates", "exposure", "strength", "z", "expected"),
    [
        # Nothing seen anywhere: one rate for all, the pool's (0 + 1) / (0 + 1), at Wilson–Hilferty's median
        # (z = 0: the mean times (1 - 1/(9 x 8))^3).
        ([0, 0, 0], [0, 0, 0], 8.0, 0.0, [0.959, 0.959, 0.959]),
        # The pool's rate is m = 11/201; a feed never probed gets it (x the median's 0.959), one that saw
        # 10 updates in 100 chronons Gamma(18, 8/m + 100), one that saw none Gamma(8, 8/m + 100).
        ([0, 10, 0], [0, 100, 100], 8.0, 0.0, [0.0525, 0.0718, 0.0312]),
        # Plenty of evidence: the feed's own rate, 1,000 updates in 10,000 chronons; the pool's 8 hardly matter.
        ([1000, 1], [10_000, 10_000], 8.0, 0.0, [0.0992, 0.000853]),
        # Two updates in 20 chronons against none in 200: 11 times faster with a pool worth one update,
        # less than twice with the service's eight (POOL_STRENGTH), until more evidence comes.
        ([2, 0], [20, 200], 1.0, 0.0, [0.0286, 0.0026]),
        ([2, 0], [20, 200], 8.0, 0.0, [0.0159, 0.0097]),
        ([], [], 8.0, 2.0, []),
    ],
)
def test_pooled_rates_shrink_each_feed_toward_the_pool(
    updates: list[float], exposure: list[float], strength: float, z: float, expected: list[float]
) -> None:
    assert pooled_rates(updates, exposure, strength, z) == pytest.approx(expected, rel=0.03)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.floats(0, 1e4)), min_size=1, max_size=12),
    st.sampled_from([0.5, 1.0, 8.0, 16.0]),
    st.sampled_from([0.0, 1.0, 2.0]),
    st.integers(0, 11),
)
def test_pooled_rates_rise_with_updates_fall_with_exposure_and_stay_positive(
    feeds: list[tuple[int, float]], strength: float, z: float, k: int
) -> None:
    n, t = [float(f[0]) for f in feeds], [f[1] for f in feeds]
    rates = pooled_rates(n, t, strength, z)
    assert all(0 < r < math.inf for r in rates)
    i = k % len(feeds)
    # Where the pool caps a long record, moving the median can move the pool either way (below).
    assume(not _capped(t) and not _capped([*t[:i], t[i] + 10.0, *t[i + 1:]]))
    # One more update on feed i (the pool moves too) raises feed i's rate; more exposure lowers it.
    more = pooled_rates([*n[:i], n[i] + 1, *n[i + 1:]], t, strength, z)
    longer = pooled_rates(n, [*t[:i], t[i] + 10.0, *t[i + 1:]], strength, z)
    assert more[i] > rates[i] and longer[i] < rates[i]
    # More optimism, higher rates.
    assert all(o >= r for o, r in zip(pooled_rates(n, t, strength, z + 1), rates, strict=True))
    # Order does not matter (the pool is a sum).
    assert pooled_rates(n[::-1], t[::-1], strength, z)[::-1] == pytest.approx(rates)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e9, allow_nan=False), min_size=1, max_size=40))
def test_the_pools_median_is_numpys_to_the_last_bit(values: list[float]) -> None:
    assert _median(np.asarray(values)) == float(np.median(values))


def _capped(exposure: list[float]) -> bool:
    seen = sorted(x for x in exposure if x > 0)
    if not seen:
        return False
    mid = len(seen) // 2
    median = seen[mid] if len(seen) % 2 else (seen[mid - 1] + seen[mid]) / 2
    return max(seen) > POOL_EXPOSURE_CAP * median


def test_one_dormant_feed_does_not_drag_the_pool_and_every_other_feed_down() -> None:
    # Ten feeds that updated ten times in ten chronons each, and one whose only entry is a year of
    # chronons old: that feed is slow, but the others' pool (their prior) stays about their own rate.
    n, t = [10.0] * 10 + [0.0], [10.0] * 10 + [1e6]
    rates = pooled_rates(n, t, 8.0, 0.0)
    # The pool: the dormant record counts as 4 x the median's 10 chronons, m = 101 / 141.
    m = 101 / 141
    assert rates[0] == pytest.approx(gamma_upper(18.0, 8.0 / m + 10.0, 0.0), rel=1e-6)
    assert rates[0] > 0.6  # a plain sum would give m = 101 / 1,000,101 and 18 / (8 / m + 10) = 2e-4
    assert rates[10] < 1e-5  # the dormant feed keeps its whole record
    # Records of similar length are not capped: the pool is the plain sum.
    assert pooled_rates([4.0, 0.0], [100.0, 300.0], 8.0, 0.0) == pytest.approx(
        [gamma_upper(12.0, 8.0 / (5 / 401) + 100.0, 0.0), gamma_upper(8.0, 8.0 / (5 / 401) + 300.0, 0.0)])


@pytest.mark.parametrize(
    ("updates", "exposure", "strength", "match"),
    [([1], [1, 2], 8.0, "same length"), ([-1], [1], 8.0, ">= 0"), ([1], [math.nan], 8.0, "finite"),
     ([1], [1], 0.0, "strength"), ([1], [1], math.inf, "strength")],
)
def test_pooled_rates_refuse_bad_evidence(updates: list[float], exposure: list[float], strength: float,
                                          match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pooled_rates(updates, exposure, strength)


def test_a_record_unprobed_for_long_fades_toward_the_pool_and_its_optimism_returns() -> None:
    # Ten feeds with 4 updates in 200 chronons each, one with none in 200: the pool's rate is
    # 41/2201 per chronon, so with fade 2 the silent feed's record halves every 2/m = 107 chronons.
    n, t = [4.0] * 10 + [0.0], [200.0] * 11
    fresh = pooled_rates(n, t, 8.0, 2.0)
    m = 41 / 2201
    half = 2 / m
    assert pooled_rates(n, t, 8.0, 2.0, unseen=[0.0] * 11, fade=2.0) == pytest.approx(fresh)
    assert pooled_rates(n, t, 8.0, 2.0, unseen=[half * 100] * 11, fade=math.inf) == pytest.approx(fresh)
    # Faded by exactly half: the same as a record of half the updates over half the exposure.
    halved = pooled_rates(n, t, 8.0, 2.0, unseen=[0.0] * 10 + [half], fade=2.0)
    assert halved[10] == pytest.approx(gamma_upper(8.0, 8.0 / m + 100.0, 2.0), rel=1e-3)
    assert halved[:10] == pytest.approx(fresh[:10])  # the pool is the unfaded records'
    # Rising while nobody looks, toward an unknown feed's rate (the pool's, at the upper quantile).
    path = [pooled_rates(n, t, 8.0, 2.0, unseen=[0.0] * 10 + [k * half], fade=2.0)[10] for k in range(8)]
    assert path == sorted(path) and path[0] < fresh[0] < path[-1]
    assert path[-1] == pytest.approx(gamma_upper(8.0, 8.0 / m, 2.0), rel=0.01)


@pytest.mark.parametrize(("unseen", "fade", "match"), [([1.0], 2.0, "one finite value"), ([-1.0, 0.0], 2.0, ">= 0"),
                                                       ([math.nan, 0.0], 2.0, "finite"), ([0.0, 0.0], 0.0, "fade"),
                                                       ([0.0, 0.0], math.nan, "fade")])
def test_pooled_rates_refuse_bad_fading(unseen: list[float], fade: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pooled_rates([1.0, 2.0], [10.0, 10.0], 8.0, 2.0, unseen=unseen, fade=fade)


@pytest.mark.parametrize("fade", [math.inf, "service"])
def test_a_feed_starved_for_looking_slow_is_probed_again_and_found_fast(fade: float | str) -> None:
    """Eleven feeds fill the budget's frequencies; the twelfth was silent, then updates every 5 chronons.

    The loop's inputs, simulated: each probe's document dates every update since the previous probe
    (up to 20), which is the feed's record; rates are pooled and faded as ``ChrononLoop._background``
    does. Without fading, the silent feed is never probed again and its 180 updates go unseen.
    """
    from proxy.service.loop import EVIDENCE_FADE, OPTIMISM_Z, POOL_STRENGTH

    fade_by = EVIDENCE_FADE if fade == "service" else float(fade)
    horizon, change = 1200, 300
    ups = [list(range(7 + 3 * i, horizon, 40)) for i in range(11)] + [list(range(change, horizon, 5))]
    n, exposure = [0.0] * 12, [0.0] * 12
    last: list[int | None] = [None] * 12
    probes: list[list[int]] = [[] for _ in range(12)]
    alloc = background_allocator()
    for now in range(horizon):
        unseen = [0.0 if at is None else float(now - at) for at in last]
        rate = pooled_rates(n, exposure, POOL_STRENGTH, OPTIMISM_Z, unseen=unseen, fade=fade_by)
        for r in alloc.pick(1, now, list(range(12)), last, rate, [1.0] * 12, 10):
            before = last[r]
            if before is not None:
                n[r] += min(20, sum(1 for u in ups[r] if before < u <= now))
                exposure[r] += now - before
            last[r] = now
            probes[r].append(now)
    caught = sum(any(u <= p <= u + 10 for p in probes[11]) for u in ups[11])
    if fade == "service":
        assert caught >= 150  # found within a few dozen chronons, then funded in full: 170 of 180 when written
        assert min(p for p in probes[11] if p > change) < change + 100
    else:
        assert caught == 0 and max(probes[11], default=0) < change


# Two users watch the same pair of feeds (0 and 2, a rule each: 1/2 of its worth on each feed), a
# third watches feed 1 alone (worth 0.9); the budget funds one feed in full (window 0, equal rates).
PAIR_AND_LONE = [((0, 2), 0.5), ((0, 2), 0.5), ((1,), 0.9)]
PLAIN = [1.0, 0.9, 1.0]  # the sums of the shares


def test_coordinated_weights_fund_the_lone_rule_when_a_pair_cannot_be_funded_whole() -> None:
    # Plain weights fund feed 0, whose partner then goes unfunded: each pair CEI is caught only if
    # feed 2 is caught by chance. Funding feed 1 catches the lone rule's every update instead.
    assert capture_frequencies([1.0] * 3, PLAIN, 1, 0) == [1.0, 0.0, 0.0]
    coordinated = coordinated_weights(PAIR_AND_LONE, [0, 1, 2], [1.0] * 3, PLAIN, 1, 0)
    assert capture_frequencies([1.0] * 3, coordinated, 1, 0) == [0.0, 1.0, 0.0]
    assert coordinated[1] == pytest.approx(0.9)  # a lone feed's share depends on no partner
    # Undamped, the rounds swing between the pair's feeds (funding 0 makes 2 look best, and back).
    swings = [capture_frequencies([1.0] * 3, coordinated_weights(PAIR_AND_LONE, [0, 1, 2], [1.0] * 3, PLAIN, 1, 0,
                                                                 rounds=k, damping=0.0), 1, 0) for k in (1, 2)]
    assert swings == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]


def test_the_service_allocation_probes_the_lone_rules_feed_when_rules_are_coordinated() -> None:
    alloc = background_allocator()
    plain = CaptureExplore(epsilon=0.0)  # the same, with no groups to coordinate
    last: list[int | None] = [None] * 3
    counts, plain_counts = [0, 0, 0], [0, 0, 0]
    plain_last: list[int | None] = [None] * 3
    for now in range(200):
        for r in alloc.pick(1, now, [0, 1, 2], last, [0.1] * 3, PLAIN, 0, groups=lambda: PAIR_AND_LONE):
            last[r] = now
            counts[r] += 1
        for r in plain.pick(1, now, [0, 1, 2], plain_last, [0.1] * 3, PLAIN, 0):
            plain_last[r] = now
            plain_counts[r] += 1
    assert counts[1] >= 190 and plain_counts[1] <= 10, (counts, plain_counts)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True),
                       st.sampled_from([0.25, 0.5, 1.0])), min_size=1, max_size=10),
    st.integers(1, 4),
    st.integers(0, 5),
    st.integers(0, 4),
)
def test_coordinated_weights_only_discount_a_share_by_its_partners_chances(
    rules: list[tuple[list[int], float]], budget: int, window: int, rounds: int
) -> None:
    groups = [(tuple(feeds), worth / len(feeds)) for feeds, worth in rules]
    resources = list(range(8))
    plain = [sum(share for feeds, share in groups if r in feeds) for r in resources]
    plain[7] += 0.5  # a resource also waited for outside the groups keeps what the groups do not explain
    rate = [0.05 * (1 + r % 3) for r in resources]
    out = coordinated_weights(groups, resources, rate, plain, budget, window, rounds=rounds, unfunded=0.3)
    widest = max(len(feeds) for feeds, _ in groups)
    for r in resources:
        in_groups = any(r in feeds for feeds, _ in groups)
        if rounds == 0 or not in_groups:
            assert out[r] == pytest.approx(plain[r])
        else:
            grouped = sum(share for feeds, share in groups if r in feeds)
            assert 0.3 ** (widest - 1) * grouped - 1e-9 <= out[r] <= max(plain[r], grouped) + 1e-9
    single = [((r,), 1.0) for r in resources]  # no rule has a partner: nothing changes
    assert coordinated_weights(single, resources, rate, [1.0] * 8, budget, window) == pytest.approx([1.0] * 8)


@pytest.mark.parametrize(("kwargs", "match"), [({"rounds": -1}, "rounds"), ({"unfunded": 0.0}, "unfunded"),
                                               ({"damping": 1.0}, "damping")])
def test_coordinated_weights_refuse_bad_settings(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        coordinated_weights(PAIR_AND_LONE, [0, 1, 2], [1.0] * 3, PLAIN, 1, 0, **kwargs)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.lists(st.tuples(st.sampled_from([0.0, 0.001, 0.01, 0.1, 0.5]), st.sampled_from([0.25, 0.5, 1.0, 2.0])),
             min_size=1, max_size=30),
    st.integers(0, 12),
)
def test_the_service_allocation_spends_the_whole_budget_and_revisits_funded_feeds_within_their_window(
    budget: int, feeds: list[tuple[float, float]], window: int
) -> None:
    rate = [max(f[0], 1e-6) for f in feeds]  # pooled rates are never 0
    weight = [f[1] for f in feeds]
    alloc = background_allocator()
    history = drive(alloc, budget, 120, rate, weight, window)  # budget never exceeded, distinct, watched
    # Work-conserving: with no explore share, every probe the budget allows is spent on some waiting feed.
    assert all(len(picked) == min(budget, len(feeds)) for picked in history)
    # A feed the frequencies fund in full (one probe per window + 1 chronons, where a probe catches every
    # update in time) is revisited within window + 2 chronons once the stride has settled: the stride's
    # lag is at most one chronon when more feeds come due at once than the budget allows.
    cap = 1.0 / (window + 1)
    settled = 2 * (window + 1)
    for r in range(len(feeds)):
        if alloc.frequency(r) < cap - 1e-12:
            continue
        times = [t for t, picked in enumerate(history) if r in picked]
        gaps = [b - a for a, b in itertools.pairwise(times) if a >= settled]
        assert max(gaps, default=0) <= window + 2, (r, gaps)


@pytest.mark.parametrize(("n", "budget", "window"), [(1, 1, 0), (5, 1, 4), (11, 1, 10), (22, 2, 10), (30, 3, 9),
                                                    (7, 2, 3), (40, 4, 9)])
def test_as_many_equal_feeds_as_the_budget_can_watch_are_each_probed_every_window_plus_one(
    n: int, budget: int, window: int
) -> None:
    # n <= budget x (window + 1): the frequencies fund every feed in full, so after the first round
    # (the greedy fill's baseline probes) no feed waits longer than an update's window: round-robin's
    # guarantee, at the revisit interval the rules ask for rather than n / budget.
    history = drive(background_allocator(), budget, 200, [0.05] * n, [1.0] * n, window)
    for r in range(n):
        times = [t for t, picked in enumerate(history) if r in picked]
        gaps = [b - a for a, b in itertools.pairwise(times) if a >= window + 1]
        assert gaps and max(gaps) <= window + 1, (r, gaps)


@pytest.mark.parametrize(
    ("evidence", "weight", "expected"),
    [
        # Equal weights: the feed whose record shows updates takes the frequencies; the one that showed
        # none in the same 200 chronons is left to the fill (never, here: the budget is all strided).
        ([(40, 200), (0, 200)], [1.0, 1.0], [100, 0]),
        # Nothing seen yet: by weight, as the service did before (LEVEL_EXPONENT 0).
        ([(0, 0), (0, 0)], [1.0, 3.0], [0, 100]),
        # A rule waiting for the slow feed alone (weight 3) does not outweigh 40 updates against none.
        ([(40, 200), (0, 200)], [1.0, 3.0], [100, 0]),
    ],
)
def test_the_service_allocation_ranks_by_weight_times_pooled_rate(
    evidence: list[tuple[float, float]], weight: list[float], expected: list[int]
) -> None:
    from proxy.service.loop import OPTIMISM_Z, POOL_STRENGTH

    rate = pooled_rates([e[0] for e in evidence], [e[1] for e in evidence], POOL_STRENGTH, OPTIMISM_Z)
    # Window 0: one feed's frequency takes the whole budget of 1, so the frequencies decide every probe;
    # the first chronon's probe is the fill's (never probed, smaller id), counted out.
    history = drive(background_allocator(), 1, 101, rate, weight, 0)[1:]
    assert [sum(r in picked for picked in history) for r in range(2)] == expected


def test_a_feed_left_out_for_a_while_does_not_bring_the_recomputation_forward() -> None:
    # The loop leaves out the feeds in flight and the engine's picks, a different few each chronon.
    # A feed back from that is no new feed: it keeps its last frequency until the refresh (every 10
    # chronons), where recomputing whenever one came back recomputed every tick (halving the
    # decision time at 10,000 feeds, docs/bench-service.md). A feed never seen still recomputes.
    alloc = CaptureExplore(epsilon=0.0, refresh=10)

    def tick(t: int, resources: list[int], weight: list[float]) -> None:
        alloc.pick(1, t, resources, [None] * len(resources), [0.1] * len(resources), weight, 0)

    tick(0, [0, 1, 2], [3.0, 1.0, 1.0])  # window 0, budget 1: the best feed takes the whole budget
    assert [alloc.frequency(r) for r in range(3)] == [1.0, 0.0, 0.0]
    tick(10, [1, 2], [1.0, 3.0])  # refresh, feed 0 in flight
    assert [alloc.frequency(r) for r in (1, 2)] == [0.0, 1.0]
    tick(11, [0, 1, 2], [1.0, 5.0, 1.0])  # feed 0 is back: no recomputation before chronon 20
    assert [alloc.frequency(r) for r in (1, 2)] == [0.0, 1.0]
    tick(12, [0, 1, 2, 3], [1.0, 5.0, 1.0, 9.0])  # feed 3 was never seen: recomputed now
    assert [alloc.frequency(r) for r in range(4)] == [0.0, 0.0, 0.0, 1.0]
    tick(22, [0, 1, 2], [1.0, 5.0, 1.0])  # the refresh, 10 chronons after the last recomputation
    assert [alloc.frequency(r) for r in (0, 1, 2)] == [0.0, 1.0, 0.0]
