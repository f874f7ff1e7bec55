"""Simulator speed: every policy on the baseline and a large workload, and the exact optimum.

Run:  .venv/bin/python benchmarks/machinery/bench_sim.py [--out docs/bench-sim.md] [--seed 1]

Targets (task brief): one policy run < 1 s on the baseline (Table 1: n=1000,
m=100, K=1000, λ=20, k=3, W=10, C=1) and < 10 s on the large workload
(n=2000, m=2500, K=1000, λ=50, C=5); ``optimal`` proves the baseline.
Timings are wall-clock on whatever machine runs this; the figures are
written into the markdown file, not asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

from proxy.core.policies import policy_names
from proxy.sim.generate import GenParams, generate
from proxy.sim.run import arrivals, simulate

BASELINE = GenParams()
LARGE = GenParams(resources=2000, profiles=2500, chronons=1000, lam=50.0, budget=5)


def _describe(p: GenParams) -> str:
    return (f"n={p.resources}, m={p.profiles}, K={p.chronons}, λ={p.lam:g}, k={p.rank}, "
            f"{p.life}({p.window}), C={p.budget}, α={p.alpha:g}, β={p.beta:g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("docs/bench-sim.md"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=600.0)
    args = ap.parse_args()

    load = os.getloadavg()[0]
    lines = [
        "# Simulator benchmark",
        "",
        f"Command: `.venv/bin/python benchmarks/machinery/bench_sim.py --seed {args.seed}`  ",
        f"Run: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python {platform.python_version()}, "
        f"a 2-core machine shared with other work (1-minute load average {load:.1f} at the start: "
        "expect noise; a run on an idle machine is several times faster).",
        "",
        "Runtime is the whole `proxy.sim.run.simulate` loop (engine advance, arrivals, select, probe) "
        "for K chronons; completeness is re-scored independently (`proxy.sim.score`).",
        "",
    ]
    for label, params, target in (("Baseline", BASELINE, 1.0), ("Large", LARGE, 10.0)):
        t0 = time.perf_counter()
        wl = generate(params, args.seed)
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        arrivals(wl)
        arrivals_s = time.perf_counter() - t0
        lines += [
            f"## {label} workload ({_describe(params)}; seed {args.seed})",
            "",
            f"{len(wl.ceis)} CEIs, {wl.total_eis} EIs; generated in {gen_s:.2f} s. Target per run: < {target:g} s. "
            f"Of each run, {arrivals_s:.3f} s is the driver's arrival schedule; the rest is the engine and policy.",
            "",
            "| policy | runtime (s) | µs per EI | captured | completeness | within target |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for name in policy_names():
            res = simulate(wl, name)
            lines.append(
                f"| {name} | {res.runtime_s:.3f} | {1e6 * res.runtime_s / max(wl.total_eis, 1):.1f} | "
                f"{res.captured} | {res.completeness:.4f} | {'yes' if res.runtime_s < target else 'NO'} |"
            )
            print(label, name, f"{res.runtime_s:.3f}s", res.captured, flush=True)
        lines.append("")
        if label != "Baseline":
            # The LP of the large workload has ~775k variables: HiGHS needs about
            # ten minutes on this machine, which is not a benchmark.
            continue
        for name in ("optimal", "lp-bound"):
            res = simulate(wl, name, time_limit=args.time_limit)
            ex = res.extra
            lines += [
                f"**{name}** on the {label.lower()} workload: status `{ex['status']}`, "
                f"captured {res.captured} (completeness {res.completeness:.4f}), "
                f"upper bound {float(ex['bound']):.2f}, gap {float(ex['gap']):.4f}, "  # type: ignore[arg-type]
                f"{ex['variables']} variables, {ex['constraints']} constraints, "
                f"{ex['dropped_ceis']} CEIs dropped by pre-solve, solve time {res.runtime_s:.2f} s "
                f"(time limit {args.time_limit:g} s).",
                "",
            ]
            print(label, name, ex["status"], f"{res.runtime_s:.2f}s", res.captured, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
