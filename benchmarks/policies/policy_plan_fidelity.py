"""How close ``proxy plan`` comes to the service: the plan's completeness against the replica's on bench traces.

For each trace (the live bench's workload: ``proxy.bench.live.trace_workload``,
200 chronons, AuctionWatch rules of rank <= 3 within 10 chronons), the plan is
given the rules and every feed's true mean rate over the run (the update models
taken as exact, as ``proxy plan`` takes the learnt ones) and evaluated at the
budget twice: with the loop's allocator (``proxy.service.planning.service_planner``'s
``background_allocator``, what ``proxy plan`` runs) and with the greedy index
(the plan before 2026-11-27). Beside them, on the trace itself
(``policy_pull_replica.replay``): the service's pull-only completeness with
the loop's allocation given the same true mean rates, then learning the rates
as it probes (what the service does), and round-robin's at equal probes. The
plan's futures are Poisson draws at those rates, not the trace's own update
times, so the first two columns differ by the trace's timing (its weekly
cycle, its bursts) and the last two by the learning.

    .venv/bin/python benchmarks/policies/policy_plan_fidelity.py TRACE.csv:PROFILES:BUDGET[:SEED] ...

Figures in ``docs/plan.md`` ("The plan against the service").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from policy_pull_replica import CHRONONS, DAYS, RANK, WINDOW, replay

from proxy.bench.live import trace_workload
from proxy.service.loop import background_allocator
from proxy.sim.plan import GridRates, Planner, PlanWatch


def compare(path: Path, profiles: int, budget: int, seed: int,
            futures: int) -> tuple[float, float, float, float, float, float]:
    """Plan with the loop's allocator and its standard error, plan with the greedy index, replica with the
    true rates, replica, round-robin."""
    bw = trace_workload(path, chronons=CHRONONS, days=DAYS, profiles=profiles, rank=RANK, window=WINDOW, seed=seed,
                        budget=budget)
    rates = GridRates.constant([len(u) / CHRONONS for u in bw.updates], CHRONONS)
    rules = [PlanWatch(f"p{i}", tuple(w), WINDOW) for i, w in enumerate(bw.watched)]
    loop = Planner(rules, rates, futures=futures, seed=0, allocator=background_allocator).evaluate(budget)
    greedy = Planner(rules, rates, futures=futures, seed=0).evaluate(budget)
    known = replay(path, profiles, budget, seed=seed, rates="run")[0]
    live, rr, _ad, _probes = replay(path, profiles, budget, seed=seed)
    return loop.completeness or 0.0, loop.stderr, greedy.completeness or 0.0, known, live, rr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("traces", nargs="+", help="TRACE.csv:PROFILES:BUDGET[:SEED] (the live bench's options)")
    parser.add_argument("--futures", type=int, default=8, help="the plan's sampled futures (default 8)")
    args = parser.parse_args()
    print("| trace | plan, the loop's allocator | plan, greedy index | service, true rates | service | round-robin |")
    print("|---|---:|---:|---:|---:|---:|")
    for spec in args.traces:
        path, profiles, budget, *rest = spec.split(":")
        seed = int(rest[0]) if rest else 1
        loop, se, greedy, known, live, rr = compare(Path(path), int(profiles), int(budget), seed, args.futures)
        name = Path(path).name + (f" (profiles seed {seed})" if rest else "")
        print(f"| {name}, {profiles} profiles, budget {budget} | {loop:.1%} ± {se:.1%} | {greedy:.1%} | "
              f"{known:.1%} | {live:.1%} | {rr:.1%} |", flush=True)


if __name__ == "__main__":
    main()
