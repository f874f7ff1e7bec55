"""Pull-only simulation (proxy.sim.pull): update EIs are known only when a probe finds them."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.model import CEI, EI, Budget, Workload
from proxy.core.policies import policy_names
from proxy.sim.pull import Background, PullOptions, Rates, simulate_pull, true_updates, watch_specs
from proxy.sim.run import simulate
from proxy.sim.score import score_schedule
from proxy.sim.synthetic import num_update_watch

K = 12


def one_update(u: int, w: int, budget: list[int]) -> Workload:
    """One feed, one update at ``u`` with window ``w``; probes only where ``budget`` allows."""
    wl = Workload(K, Budget(tuple(budget)), 1, (CEI("c0", "p", (EI(0, u, min(u + w, K - 1), u),)),))
    wl.validate()
    return wl


def first_at(p: int | None) -> list[int]:
    return [0] * K if p is None else [0] * p + [1] * (K - p)


@pytest.mark.parametrize(
    ("u", "w", "first_probe", "captured"),
    [
        (3, 2, 3, 1),  # found at its update: captured by the probe that found it
        (3, 2, 5, 1),  # found at u + W: still inside
        (3, 2, 6, 0),  # found one chronon late: missed
        (3, 0, 3, 1),
        (3, 0, 4, 0),
        (0, 5, 0, 1),
        (3, 2, None, 0),  # never probed: never known, missed
    ],
)
def test_an_update_is_captured_only_by_a_probe_in_its_window(
    u: int, w: int, first_probe: int | None, captured: int
) -> None:
    wl = one_update(u, w, first_at(first_probe))
    for policy in ("mrsf-p", "s-edf-np", "wic", "adm-edf"):
        res = simulate(wl, policy, reveal="pull", pull=PullOptions(background=Background.ROUND_ROBIN))
        assert res.captured == captured
        assert res.extra["engine_captured"] == captured
        if first_probe is not None:
            assert res.schedule[0] == (first_probe, 0)


def test_pushed_mode_knows_the_update_at_its_start_and_pull_does_not() -> None:
    """Two feeds, budget 1: pushed MRSF probes r1's update at once; pull round-robin finds it too late."""
    ceis = (CEI("c0", "p", (EI(1, 0, 1, 0),)),)
    wl = Workload(6, Budget(1), 2, ceis)
    assert simulate(wl, "mrsf-p").captured == 1
    # Round-robin over the watched feeds: only r1 is watched, so it is probed at 0 and captured...
    assert simulate(wl, "mrsf-p", reveal="pull", pull=PullOptions(background=Background.ROUND_ROBIN)).captured == 1
    # ...but with no background probes nothing ever looks: nothing is known, nothing captured.
    res = simulate(wl, "mrsf-p", reveal="pull", pull=PullOptions(background=Background.NONE))
    assert (res.captured, res.probes) == (0, 0)


def test_a_rank_two_cei_is_captured_when_each_feed_is_found_in_time() -> None:
    # Greedy index, equal rates: r0 at 0, r1 at 1, r0 at 2 (finds [2,4]), r1 at 3 (finds [3,6]).
    ceis = (CEI("c0", "p", (EI(0, 2, 4, 2), EI(1, 3, 6, 3))),)
    wl = Workload(8, Budget(1), 2, ceis)
    res = simulate(wl, "mrsf-p", reveal="pull")
    assert res.schedule[:4] == ((0, 0), (1, 1), (2, 0), (3, 1))
    assert res.captured == 1 == res.extra["engine_captured"]


def test_static_eis_are_known_at_their_reveal_and_use_the_policy() -> None:
    """A CEI whose second EI (a query EI on r1) is known at release: the policy probes it, not background."""
    ceis = (CEI("c0", "p", (EI(0, 1, 1, 1), EI(1, 4, 5)), release=1),)
    wl = Workload(8, Budget(1), 2, ceis)
    res = simulate(wl, "s-edf-p", reveal="pull", pull=PullOptions(background=Background.GREEDY))
    assert (4, 1) in res.schedule and (1, 0) in res.schedule
    assert res.captured == 1 == res.extra["engine_captured"]
    assert res.extra["background_probes"] == res.probes - 1


def test_watch_specs_and_updates_come_from_the_update_eis() -> None:
    ceis = (CEI("c0", "p", (EI(2, 1, 4, 1),)), CEI("c1", "q", (EI(2, 6, 9, 6), EI(0, 3, 3))))
    wl = Workload(10, Budget(1), 3, ceis)
    specs = watch_specs(wl, PullOptions())
    assert [(s.resource, s.window) for s in specs] == [(2, 3)]
    assert true_updates(wl, PullOptions()) == [[], [], [1, 6]]
    with pytest.raises(ValueError, match="updates cover"):
        true_updates(wl, PullOptions(updates=[[1]]))


def test_sup_probes_at_the_last_chronon_of_each_predicted_ei() -> None:
    # True λ = 2 updates in 20 chronons = 0.1: SUP expects updates at 9 and 19, window 2 -> probes
    # at 11 and 19 (the epoch's last chronon clips [19, 21]).
    ceis = (CEI("c0", "p", (EI(0, 9, 11, 9),)), CEI("c1", "p", (EI(0, 14, 16, 14),)))
    wl = Workload(20, Budget(1), 1, ceis)
    res = simulate(wl, "sup")
    assert res.schedule == ((11, 0), (19, 0))
    assert res.captured == 1 and res.extra["background"] == "none"  # the update at 14 is found too late
    # fbSUP: both probes found an update (satisfied): no extra probe.
    assert simulate(wl, "fbsup").schedule == ((11, 0), (19, 0))


def test_capture_explore_is_deterministic_and_keeps_learning_where_capture_stops() -> None:
    """A feed silent at first, then fast: capture learns it is slow and never looks again; the floor finds it."""
    k, n = 400, 8
    ups = [list(range(150, k, 3)) if r == 0 else list(range(r, k, 20)) for r in range(n)]
    wl = num_update_watch(ups, k, window=4, budget=1)
    runs = [simulate_pull(wl, "mrsf-p", PullOptions(background=bg, rates=Rates.ONLINE, updates=ups))
            for bg in (Background.CAPTURE_EXPLORE, Background.CAPTURE_EXPLORE, Background.CAPTURE)]
    assert runs[0].schedule == runs[1].schedule
    assert runs[0].extra["background"] == "capture-explore"
    assert runs[0].captured > runs[2].captured, (runs[0].captured, runs[2].captured)


def test_the_revisit_bound_keeps_every_watched_feed_in_turn_in_the_simulator() -> None:
    """Issue 45: a fast feed takes the capture frequencies; with the bound the slow ones still come in turn."""
    from itertools import pairwise

    from proxy.core.discovery import revisit_bound

    k, n, window = 300, 12, 2
    ups = [list(range(1, k, 2)) if r < 2 else list(range(5 * r, k, 97)) for r in range(n)]
    wl = num_update_watch(ups, k, window=window, budget=1)
    bound = revisit_bound(1, n, window, 2.0)

    def longest_wait(factor: float) -> int:
        res = simulate_pull(wl, "mrsf-p", PullOptions(background=Background.CAPTURE_EXPLORE, rates=Rates.ONLINE,
                                                      updates=ups, explore_epsilon=0.0, revisit_factor=factor))
        assert res.extra["revisit_factor"] == factor
        probed: list[list[int]] = [[0] for _ in range(n)]  # each feed is watched from chronon 0
        for t, r in res.schedule:
            probed[r].append(t)
        return max(b - a for times in probed for a, b in pairwise([*times, k - 1]))

    assert longest_wait(2.0) <= bound == 24
    assert longest_wait(0.0) > bound  # without it the slow feeds wait longer: the test can fail


# --- invariants over random small workloads -------------------------------------------

@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    k = draw(st.integers(3, 14))
    n = draw(st.integers(1, 4))
    budget = draw(st.one_of(st.integers(0, 3), st.lists(st.integers(0, 2), min_size=k, max_size=k).map(tuple)))
    ceis = []
    for i in range(draw(st.integers(0, 6))):
        eis = []
        for _ in range(draw(st.integers(1, 3))):
            r = draw(st.integers(0, n - 1))
            s = draw(st.integers(0, k - 1))
            f = draw(st.integers(s, min(k - 1, s + 4)))
            eis.append(EI(r, s, f, s if draw(st.booleans()) else None))
        rel = min(e.start for e in eis)
        eis = [e if e.reveal is None or e.reveal >= rel else EI(e.resource, e.start, e.finish) for e in eis]
        ceis.append(CEI(f"c{i}", f"p{i % 3}", tuple(eis)))
    wl = Workload(k, Budget(budget), n, tuple(ceis))
    wl.validate()
    return wl


PULL_POLICIES = [*policy_names(), "sup", "fbsup"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(list(Background)), st.sampled_from(list(Rates)))
def test_every_policy_pull_only_rescores_to_the_engines_count_within_budget(
    wl: Workload, background: Background, rates: Rates
) -> None:
    watched = {e.resource for c in wl.ceis for e in c.eis if e.reveal is not None and e.reveal == e.start}
    for policy in PULL_POLICIES:
        opts = PullOptions(background=background, rates=rates) if policy not in ("sup", "fbsup") else None
        res = simulate_pull(wl, policy, opts)
        sc = score_schedule(wl, res.schedule)
        assert sc.ok, sc.problems  # in budget, no duplicates, known resources
        # The independent scorer and the engine that learnt pull-only agree on every capture.
        assert res.captured == sc.captured == res.extra["engine_captured"], policy
        per = Counter(t for t, _ in res.schedule)
        assert all(per[t] <= wl.budget.at(t) for t in per)
        bg_probes = res.extra["background_probes"]
        assert isinstance(bg_probes, int) and bg_probes <= res.probes
        if policy in ("sup", "fbsup") or background is Background.NONE:
            assert bg_probes == 0
        if not any(e.reveal is None or e.reveal != e.start for c in wl.ceis for e in c.eis) and policy not in (
            "sup", "fbsup", "round-robin"
        ):
            # Nothing is known before a probe finds it: every probe is a background probe, on a watched
            # feed (round-robin, a profile-blind policy, probes every feed by design).
            assert {r for _, r in res.schedule} <= watched


@settings(max_examples=40, deadline=None)
@given(workloads())
def test_pull_never_beats_pushed_by_knowing_more(wl: Workload) -> None:
    """Sanity, not a theorem for every policy: pull-only round-robin never beats the exact optimum."""
    from proxy.core.optimum import optimal

    best = optimal(wl).objective
    res = simulate_pull(wl, "mrsf-p", PullOptions(background=Background.ROUND_ROBIN))
    assert res.captured <= best


def test_cli_runs_pull_only_and_the_result_rescores(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from proxy.sim.cli import sim_app

    runner = CliRunner()
    w = tmp_path / "w.json"
    assert runner.invoke(sim_app, ["gen", "-o", str(w), "-n", "30", "-m", "10", "-K", "200",
                                   "--reveal", "update"]).exit_code == 0
    for args in (["-p", "mrsf-p", "--reveal", "pull"], ["-p", "sup"],
                 ["-p", "wic", "--reveal", "pull", "--rates", "online", "--background", "sqrt"],
                 ["-p", "mrsf-p", "--reveal", "pull", "--rates", "online", "--background", "capture-explore"],
                 ["-p", "adm-edf", "--reveal", "pull", "--planner", "fbsup"]):
        r = tmp_path / "r.json"
        res = runner.invoke(sim_app, ["run", str(w), *args, "-o", str(r)])
        assert res.exit_code == 0, res.output
        assert "background probes" in res.output
        assert runner.invoke(sim_app, ["score", str(w), str(r)]).exit_code == 0
    bad = runner.invoke(sim_app, ["run", str(w), "-p", "sup", "--reveal", "pushed"])
    assert bad.exit_code == 2 and "pull-only planner" in bad.output
    bad = runner.invoke(sim_app, ["run", str(w), "-p", "mrsf-p", "--reveal", "pull", "--background", "nope"])
    assert bad.exit_code == 2


def test_policy_pull_benchmark_runs_on_a_tiny_instance(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "policies"))
    from policy_pull import BEGIN, END, main, probes_for

    assert probes_for([(100.0, 0.2), (200.0, 0.6)], 0.4) == 150.0
    assert probes_for([(100.0, 0.2)], 0.5) is None
    doc = tmp_path / "page.md"
    doc.write_text(f"# page\n\nprose kept\n\n{BEGIN}\nold\n{END}\n", encoding="utf-8")
    assert main(["--tiny", "--only", "sup-wic", "--only", "fbsup", "--doc", str(doc), "--img", str(tmp_path)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert "prose kept" in text and "old" not in text
    assert "SUP against WIC" in text and "fbSUP against SUP" in text
    assert (tmp_path / "discovery_sup_wic.png").is_file()


def test_pull_replica_seeds_take_relative_traces_and_a_lead(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """policy_pull_seeds.py: a trace path relative to the caller, the lead passed to both trees' replicas."""
    import csv
    import sys
    from pathlib import Path

    from proxy.sim.synthetic import weekly_trace, write_trace_csv

    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root / "benchmarks" / "policies"))
    import policy_pull_seeds

    write_trace_csv(weekly_trace(60, 5), tmp_path / "t.csv")
    monkeypatch.chdir(tmp_path)  # the workers run in the compared tree: "t.csv" must still be found
    out = tmp_path / "rows.csv"
    rows = []
    for lead in (0, 4):
        monkeypatch.setattr(sys, "argv", ["policy_pull_seeds.py", "--before", str(root), "--lead", str(lead),
                                          "--group", "g", "t.csv:20:2", "--out", str(out)])
        policy_pull_seeds.main()
        (row,) = csv.DictReader(out.read_text(encoding="utf-8").splitlines())
        rows.append(row)
    for row in rows:
        # The same tree twice: the same figures; the lead's probes are spent but not counted.
        assert row["trace"] == "t.csv" and row["before"] == row["after"]
        assert row["probes_before"] == row["probes_after"] == "400"
        assert 0.0 < float(row["after"]) < 1.0
    assert rows[0]["round_robin"] == rows[1]["round_robin"]  # the readers have no lead
    assert rows[0]["after"] != rows[1]["after"]  # the lead's probes move what the run catches


def test_co_updates_send_a_partner_probe_right_after_an_update_found_in_the_simulator() -> None:
    """Issue 45: three feeds always update together; once learnt, a find on one is followed by a probe of a partner."""
    from bisect import bisect_left

    k, n = 600, 10
    together = list(range(7, k, 29))
    ups = [together if r < 3 else list(range(3 * r, k, 61)) for r in range(n)]
    wl = num_update_watch(ups, k, window=3, budget=1)

    def partner_gaps(co_update: bool) -> list[int]:
        """Per joint update: chronons from the first of the three feeds' probes to see it to the second's."""
        res = simulate_pull(wl, "mrsf-p", PullOptions(background=Background.CAPTURE_EXPLORE, rates=Rates.ONLINE,
                                                      updates=ups, explore_epsilon=0.0, co_update=co_update))
        assert res.extra["co_update"] is co_update
        probes = [[t for t, x in res.schedule if x == r] for r in range(3)]
        gaps = []
        for u in together:
            seen = sorted(p[bisect_left(p, u)] for p in probes if bisect_left(p, u) < len(p))
            gaps.append(seen[1] - seen[0])
        return gaps

    with_hints, without = partner_gaps(True), partner_gaps(False)
    assert len(with_hints) == len(without) == 21
    assert with_hints.count(1) >= without.count(1) + 5, (with_hints, without)
