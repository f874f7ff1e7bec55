"""The measuring tools behind docs/policies.md: their counts and their errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "policies"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "machinery"))

from policy_anatomy import anatomy
from policy_compare import point_params, seed_range
from policy_rollout import Config, rollout_schedule

from proxy.core.model import CEI, EI, Budget, Workload
from proxy.sim.generate import GenParams, Life, generate
from proxy.sim.run import simulate
from proxy.sim.score import score_schedule


def small_workload() -> Workload:
    """Profile p: two consecutive rank-1 CEIs on r0; q: a rank-2 CEI on r0 and r1; s: one on r2."""
    ceis = (
        CEI("c0", "p", (EI(0, 0, 4),)),
        CEI("c1", "p", (EI(0, 3, 7),)),
        CEI("c2", "q", (EI(0, 2, 4), EI(1, 5, 6))),
        CEI("c3", "s", (EI(2, 0, 1),)),
    )
    wl = Workload(chronons=8, budget=Budget(1), resources=3, ceis=ceis)
    wl.validate()
    return wl


def test_anatomy_counts_ranks_and_shared_probes() -> None:
    wl = small_workload()
    # The probe of r0 at 3 serves c0, c1 (same profile, rank 1) and c2 (another profile).
    got = anatomy(wl, [(0, 2), (3, 0), (5, 1)])
    assert got["captured"] == 4
    assert got["rank 1"] == 3 and got["rank 2"] == 1
    assert got["probes"] == 3
    assert got["across profiles"] == 1
    assert got.get("same profile, rank 1", 0) == 0  # the shared probe also serves q: counted across
    assert got["extra EIs"] == 2  # 5 EIs captured with 3 probes


def test_anatomy_same_profile_and_missed_ceis() -> None:
    wl = small_workload()
    # r0 at 4 serves c0 and c1 (and c2's first EI, but c2's r1 EI is never probed).
    got = anatomy(wl, [(4, 0)])
    assert got["captured"] == 2
    assert got["rank 1"] == 2 and "rank 2" not in got
    assert got["same profile, rank 1"] == 1
    assert got["extra EIs"] == 1
    # Probing r0 before c1 starts serves c0 alone.
    assert anatomy(wl, [(2, 0)]).get("extra EIs", 0) == 0


def test_point_params_and_overrides() -> None:
    assert point_params("baseline") == GenParams()
    p = point_params("overwrite+budget=2/alpha=1")
    assert p.life is Life.OVERWRITE and p.budget == 2 and p.alpha == 1.0
    assert point_params("n=400,C=2,W=20").resources == 400
    assert seed_range("101-103") == [101, 102, 103] and seed_range("7") == [7]


@pytest.mark.parametrize(
    ("point", "message"),
    [
        ("nope", "unknown point 'nope'"),
        ("baseline+budget=x", "budget wants a int"),
        ("baseline+colour=red", "bad override 'colour=red'"),
        ("baseline+budget", "bad override 'budget'"),
        ("baseline+life=forever", "life wants a Life"),
        ("baseline+exact_rank=maybe", "exact_rank wants a bool"),
    ],
)
def test_point_params_refuses_bad_points(point: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        point_params(point)


def test_seed_range_refuses_an_empty_range() -> None:
    with pytest.raises(ValueError, match="empty seed range"):
        seed_range("5-4")


def test_scattered_point_is_bench_selects_workload() -> None:
    from bench_select import baseline_run
    from policy_compare import point_workload, scattered_workload

    from proxy.sim.run import simulate

    wl = scattered_workload(3)
    assert len(wl.ceis) == 2000 and wl.resources == 1000 and wl.chronons == 1000
    starts = [min(e.start for e in c.eis) for c in wl.ceis]
    assert starts == sorted(starts)
    # The same draws: the simulator captures what bench_select's own loop does.
    assert simulate(wl, "mrsf-p").captured == baseline_run("mrsf-p", 3)[1]
    assert point_workload("scattered", 3) == wl


@pytest.mark.parametrize("shared", [0, 1])
def test_rollout_on_the_true_future_waits_to_share_a_probe(shared: int) -> None:
    """c0 and c1 are both due at 1; c2, released at 1 on c0's resource, makes r(shared) worth probing at 1."""
    other = 1 - shared
    ceis = (CEI("c0", "p", (EI(shared, 0, 1),)), CEI("c1", "q", (EI(other, 0, 1),)),
            CEI("c2", "p", (EI(shared, 1, 1),)))
    wl = Workload(chronons=3, budget=Budget(1), resources=2, ceis=ceis)
    wl.validate()
    assert simulate(wl, "adm-edf").captured == 2  # it cannot know of c2 at 0
    schedule, overrides = rollout_schedule(wl, Config(samples=1, horizon=2, drain=0, candidates=2, margin=0.0, oracle=True), GenParams())
    assert schedule == [(0, other), (1, shared)]
    assert overrides == 1
    assert score_schedule(wl, schedule).captured == 3


def test_rollout_that_never_overrides_is_adm_edf() -> None:
    # The rollouts play on copies: with a margin no candidate can beat, the
    # real engine must end up exactly where adm-edf alone takes it.
    params = GenParams(resources=60, profiles=12, chronons=120)
    wl = generate(params, 3)
    schedule, overrides = rollout_schedule(wl, Config(samples=2, horizon=6, drain=3, candidates=3, margin=1e9, oracle=False), params, rng_seed=3)
    assert overrides == 0
    assert tuple(schedule) == simulate(wl, "adm-edf").schedule


def test_rollout_refuses_budgets_other_than_one() -> None:
    wl = generate(GenParams(resources=20, profiles=4, chronons=30, budget=2), 1)
    with pytest.raises(ValueError, match="budget of 1 probe per chronon"):
        rollout_schedule(wl, Config(samples=1, horizon=5, drain=0, candidates=2, margin=0.0, oracle=True), GenParams(budget=2))


def test_reader_orders_gives_the_own_order_and_each_random_one(tmp_path: Path) -> None:
    from policy_reader_orders import spread

    from proxy.sim.synthetic import weekly_trace, write_trace_csv

    trace = tmp_path / "t.csv"
    write_trace_csv(weekly_trace(40, seed=3, weeks=2.0), trace)
    (own, each), = spread(trace, 8, profiles=10, budget=1, kinds=("round-robin",)).values()
    assert len(each) == 8
    # Seeded: the same figures again. Each is round-robin in one of feed_orders' orders, the
    # feeds' own first, then the shuffles the bench averages with it.
    again = spread(trace, 8, profiles=10, budget=1, kinds=("round-robin",))["round-robin"]
    assert again == (own, each)
    from policy_reader_orders import CHRONONS, DAYS, RANK, WINDOW

    from proxy.bench.baselines import completeness, feed_orders, round_robin
    from proxy.bench.live import trace_workload

    bw = trace_workload(trace, chronons=CHRONONS, days=DAYS, profiles=10, rank=RANK, window=WINDOW, seed=1)
    feeds = sorted({r for w in bw.watched for r in w})
    for k, order in enumerate(feed_orders(len(feeds), 9)):
        probes = [(t, feeds[r]) for t, r in round_robin(len(feeds), CHRONONS, CHRONONS, order)]
        assert completeness(bw.workload.ceis, probes) == [own, *each][k]
    assert len(set(each)) > 1  # the orders do differ in what they catch
    assert all(0.0 <= x <= 1.0 for x in [own, *each])
