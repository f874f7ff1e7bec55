"""How close ``proxy plan`` comes to the service: the plan's completeness against the replica's on bench traces.

For each trace (the live bench's workload: ``proxy.bench.live.trace_workload``,
200 chronons, AuctionWatch rules of rank <= 3 within 10 chronons), the plan is
given the rules and every feed's true mean rate over the run (the update models
taken as exact, as ``proxy plan`` takes the learnt ones) and evaluated at the
budget with the loop's allocator (``proxy.service.planning.service_planner``'s
``background_allocator``) three ways: given those rates (the plan before
2026-11-27), learning them from empty records as the loop does
(``PlanLearning.fresh``: what ``proxy plan`` runs for feeds with no record;
the bench's service starts with none), and learning them on the trace's own
update times as the one future (``Planner(replay=...)``, a backtest). Beside
them, on the trace itself (``policy_pull_replica.replay``): the service's
pull-only completeness learning the rates as it probes (what the service
does) and given the true mean rates, scored on the CEIs whose windows end
inside the run, as the plan counts them (the bench cuts the windows of its
last CEIs at its end; the plan runs on past its horizon until they resolve);
the service's completeness on every CEI, as the live bench scores it; and
round-robin's at equal probes. The plan's futures are Poisson draws at those
rates, not the trace's own update times: the backtest column against the
service's shows the simulation's own error, the learning column against the
backtest the futures'.

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
from proxy.service.loop import EVIDENCE_FADE, OPTIMISM_Z, POOL_STRENGTH, background_allocator
from proxy.sim.plan import GridRates, PlanLearning, Planner, PlanPoint, PlanWatch


def compare(path: Path, profiles: int, budget: int, seed: int,
            futures: int) -> tuple[list[PlanPoint], list[float]]:
    """The plan given the rates, learning them, learning them on the trace's own updates; the replica's
    completeness learning and with the true rates on whole windows, learning on every CEI; round-robin's."""
    bw = trace_workload(path, chronons=CHRONONS, days=DAYS, profiles=profiles, rank=RANK, window=WINDOW, seed=seed,
                        budget=budget)
    rates = GridRates.constant([len(u) / CHRONONS for u in bw.updates], CHRONONS)
    rules = [PlanWatch(f"p{i}", tuple(w), WINDOW) for i, w in enumerate(bw.watched)]
    fresh = PlanLearning.fresh(rates.feeds, POOL_STRENGTH, OPTIMISM_Z, EVIDENCE_FADE)
    plans = [Planner(rules, rates, futures=futures, seed=0, allocator=background_allocator,
                     learning=learning, replay=given).evaluate(budget)
             for learning, given in ((None, None), (fresh, None), (fresh, bw.updates))]
    figures = [replay(path, profiles, budget, seed=seed, rates=rates_of, whole_windows=True)[0]
               for rates_of in ("learnt", "run")]
    live, rr, _ad, _probes = replay(path, profiles, budget, seed=seed)
    return plans, [*figures, live, rr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("traces", nargs="+", help="TRACE.csv:PROFILES:BUDGET[:SEED] (the live bench's options)")
    parser.add_argument("--futures", type=int, default=8, help="the plan's sampled futures (default 8)")
    args = parser.parse_args()
    print("| trace | plan, rates given | plan, learning | plan, learning, the trace's updates "
          "| service, whole windows | service, true rates, whole windows | service, every CEI | round-robin |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for spec in args.traces:
        path, profiles, budget, *rest = spec.split(":")
        seed = int(rest[0]) if rest else 1
        plans, figures = compare(Path(path), int(profiles), int(budget), seed, args.futures)
        name = Path(path).name + (f" (profiles seed {seed})" if rest else "")
        given, learning, backtest = plans
        print(f"| {name}, {profiles} profiles, budget {budget} | {given.completeness or 0.0:.1%} ± {given.stderr:.1%} "
              f"| {learning.completeness or 0.0:.1%} ± {learning.stderr:.1%} | {backtest.completeness or 0.0:.1%} | "
              + " | ".join(f"{x:.1%}" for x in figures) + " |", flush=True)


if __name__ == "__main__":
    main()
