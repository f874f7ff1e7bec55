"""The pull-only replica under other live-bench options than the issue's: profile rank, window, budget, profiles.

Written for ``docs/discovery.md`` (section "Other workloads: single-feed rules
and near-ceiling readers"). Issue 18's target is measured with ``--profiles 40
--rank 3 --window 10 --budget 2``; this replays the same traces
(``policy_pull_replica.replay``, the service's allocation without HTTP) under
other settings of those options, each with the rates the allocation learns
and, for comparison, two oracles: each feed's true rate so far (``past``:
every update up to now, probed or not, which only probes can buy) and its
true mean over the run (``run``: the future too). Per setting and trace
group it prints the mean live-equivalent completeness, the mean and worst
ratio to the better plain reader at equal probes, and how many traces are
below 1.3×; ``ceiling`` counts the traces where the better reader is above
1/1.3 of everything (77 %), so that 1.3× cannot be reached at all.

    .venv/bin/python benchmarks/policies/policy_pull_regimes.py \\
        --setting 40:2:10:3 --setting 100:2:5:1 --rates learnt --rates past \\
        --group "60 feeds" /tmp/s60_{1..30}.csv --group real ../shared/traces/real_feeds_items.csv:{1..10}

A setting is ``PROFILES:BUDGET:WINDOW:RANK``; a trace ``TRACE.csv[:SEED]``
(``SEED`` draws the profiles, default 1). Two worker processes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import policy_pull_replica as replica

CEILING = 1 / 1.3


def _run(job: tuple[str, int, tuple[int, int, int, int], str]) -> tuple[float, float, float]:
    path, seed, (profiles, budget, window, rank), rates = job
    live, rr, ad, _ = replica.replay(Path(path), profiles, budget, seed=seed, rank=rank, window=window,
                                     rates=rates)
    return live, rr, ad


def _setting(text: str) -> tuple[int, int, int, int]:
    profiles, budget, window, rank = (int(x) for x in text.split(":"))
    return profiles, budget, window, rank


def _trace(text: str) -> tuple[str, int]:
    path, _, seed = text.partition(":")
    return path, int(seed or 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--setting", action="append", type=_setting, required=True,
                        help="PROFILES:BUDGET:WINDOW:RANK (the live bench's options)")
    parser.add_argument("--rates", action="append", choices=replica.RATES,
                        help="rates given to the allocation (default learnt)")
    parser.add_argument("--group", nargs="+", action="append", required=True, metavar="NAME TRACE",
                        help="a group's name, then its traces (TRACE.csv[:SEED])")
    args = parser.parse_args()
    groups = [(g[0], [_trace(t) for t in g[1:]]) for g in args.group]
    print("| profiles, budget, window, rank | traces | rates | completeness | round-robin | adaptive "
          "| ratio: mean, worst | below 1.3× | reader above 77 % |")
    print("|---|---|---|---:|---:|---:|---|---:|---:|")
    with ProcessPoolExecutor(2) as pool:
        for setting in args.setting:
            for name, traces in groups:
                for rates in args.rates or ["learnt"]:
                    res = list(pool.map(_run, [(p, s, setting, rates) for p, s in traces]))
                    ratio = [live / max(rr, ad) for live, rr, ad in res]
                    ceiling = sum(max(rr, ad) > CEILING for _, rr, ad in res)
                    print(f"| {', '.join(map(str, setting))} | {name} ({len(res)}) | {rates} "
                          f"| {100 * statistics.mean(r[0] for r in res):.1f} % "
                          f"| {100 * statistics.mean(r[1] for r in res):.1f} % "
                          f"| {100 * statistics.mean(r[2] for r in res):.1f} % "
                          f"| {statistics.mean(ratio):.2f}×, {min(ratio):.2f}× | {sum(x < 1.3 for x in ratio)} "
                          f"| {ceiling} |", flush=True)


if __name__ == "__main__":
    main()
