"""The pull-only replica over many traces, this version against an older one: ``docs/experiments/pull_replica_seeds.csv``.

Written for ``docs/discovery.md`` (section "Rates the allocation can use"): one
row per trace and workload seed with round-robin's and adaptive's completeness
at equal probes, the live-equivalent completeness of an older version's
allocation (``--before``, a source tree such as ``git archive e95312a proxy
migrations benchmarks``) and of this one, both from their own
``benchmarks/policies/policy_pull_replica.py``. Each version runs in a process
of its own with its tree first on ``PYTHONPATH`` (so each imports its own
``proxy``); a replica without a ``seed`` argument gets the workload's seed by
wrapping its ``trace_workload``. Replica figures do not depend on the load.

    .venv/bin/python benchmarks/policies/policy_pull_seeds.py --before /tmp/pull_main \\
        --group "60 studied" /tmp/s60_{1..16}.csv:40:2 --group "60 held out" ... --out docs/experiments/pull_replica_seeds.csv

A trace is ``TRACE.csv:PROFILES:BUDGET[:SEED]`` as for the replica. Prints,
per group, the worst and the median ratio to the better reader before and after.
``--oracle-after`` replays this version with every feed's true mean rate over
the run given to the allocation (the replica's ``rates="run"``) instead of the learnt
one: with ``--before .`` it measures what learning the rates costs.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]


def worker(tree: Path, specs: list[str], oracle: bool = False, lead: int = 0) -> None:
    """In a child process: replay ``specs`` with ``tree``'s replica, one JSON line per trace."""
    sys.path[:0] = [str(tree / "benchmarks" / "policies"), str(tree)]
    import policy_pull_replica as replica  # the tree's own, with its own proxy

    wrapped = replica.trace_workload
    for spec in specs:
        name, profiles, budget, *rest = spec.split(":")
        seed = int(rest[0]) if rest else 1
        replica.trace_workload = lambda path, _s=seed, **kw: wrapped(path, **{**kw, "seed": _s})
        # An older tree's replay may have no rates argument: pass it only for the oracle.
        extra: dict[str, object] = {"rates": "run"} if oracle else {}
        if lead:  # likewise no lead argument before 2026-11-28
            extra["lead"] = lead
        live, rr, ad, probes = replica.replay(Path(name), int(profiles), int(budget), 2.0, **extra)
        print(json.dumps({"spec": spec, "live": live, "rr": rr, "ad": ad, "probes": probes}), flush=True)


def replay_all(tree: Path, specs: list[str], oracle: bool = False, lead: int = 0) -> dict[str, dict[str, float]]:
    """Each spec's replay by ``tree``'s replica, keyed by the spec as given (its trace path may be relative to here)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    flag = (["--oracle"] if oracle else []) + ([f"--lead={lead}"] if lead else [])
    # The worker runs in ``tree``: give it absolute trace paths.
    given = {f"{Path(name).resolve()}:{rest}": spec
             for spec in specs for name, _, rest in [spec.partition(":")]}
    done = subprocess.run([sys.executable, str(HERE), "--worker", str(tree), *flag, *given], env=env,
                          capture_output=True, text=True, cwd=tree)
    if done.returncode != 0:
        sys.exit(f"the replica of {tree} failed:\n{done.stderr}")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {given[r["spec"]]: r for r in rows}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        rest, oracle, lead = sys.argv[3:], False, 0
        while rest and rest[0].startswith("--"):
            flag, rest = rest[0], rest[1:]
            oracle = oracle or flag == "--oracle"
            lead = int(flag.partition("=")[2]) if flag.startswith("--lead=") else lead
        worker(Path(sys.argv[2]), rest, oracle, lead)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--before", type=Path, required=True, help="source tree of the older version")
    parser.add_argument("--group", nargs="+", action="append", required=True, metavar=("NAME", "TRACE"),
                        help="a group's name, then its traces (TRACE.csv:PROFILES:BUDGET[:SEED])")
    parser.add_argument("--out", type=Path, help="CSV to write (one row per trace)")
    parser.add_argument("--oracle-after", action="store_true",
                        help="this version given every feed's true mean rate (what learning costs, with --before .)")
    parser.add_argument("--lead", type=int, default=0,
                        help="chronons the rules exist before the run, as the live bench's 10 (default 0; both "
                             "trees' replicas must take it)")
    args = parser.parse_args()
    specs = [s for g in args.group for s in g[1:]]
    before = replay_all(args.before.resolve(), specs, lead=args.lead)
    after = replay_all(ROOT, specs, args.oracle_after, args.lead)
    rows = []
    for name, *group in args.group:
        ratios: tuple[list[float], list[float]] = ([], [])
        for spec in group:
            b, a = before[spec], after[spec]
            trace, profiles, budget, *rest = spec.split(":")
            best = max(a["rr"], a["ad"])
            ratios[0].append(b["live"] / best)
            ratios[1].append(a["live"] / best)
            rows.append({"group": name, "trace": Path(trace).name, "profiles": profiles, "budget": budget,
                         "seed": rest[0] if rest else "1", "round_robin": f"{a['rr']:.3f}",
                         "adaptive": f"{a['ad']:.3f}", "before": f"{b['live']:.3f}", "after": f"{a['live']:.3f}",
                         "before_ratio": f"{ratios[0][-1]:.2f}", "after_ratio": f"{ratios[1][-1]:.2f}",
                         "probes_before": b["probes"], "probes_after": a["probes"]})
        print(f"{name}: {len(group)} traces; before worst {min(ratios[0]):.2f}x median "
              f"{statistics.median(ratios[0]):.2f}x, below 1.3x {sum(r < 1.3 for r in ratios[0])}; after worst "
              f"{min(ratios[1]):.2f}x median {statistics.median(ratios[1]):.2f}x, below 1.3x "
              f"{sum(r < 1.3 for r in ratios[1])}")
    if args.out is not None:
        with args.out.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
