"""Time ``Engine.select`` on a huge pool and whole small simulations; write docs/bench-select.md.

Large pool: ``--ceis`` CEIs (rank uniform in 1..3) over ``--resources``
resources, every EI active at the measured chronon with a window of at most
``--window`` chronons.  Small runs: the paper's baseline shape (n=1000,
K=1000, ~2k CEIs, C=1) driven chronon by chronon like the simulator.

Usage: .venv/bin/python benchmarks/machinery/bench_select.py [--ceis 1000000] [--out docs/bench-select.md]
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from proxy.core.engine import CeiState, Engine
from proxy.core.model import CEI, EI, Budget, Workload
from proxy.core.policies import policy_names

T = 20  # the chronon at which the large pool is measured


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * 4096


def build_large(ceis: int, resources: int, window: int, seed: int) -> tuple[Engine, float, int]:
    rng = np.random.default_rng(seed)
    ranks = rng.integers(1, 4, size=ceis)
    total = int(ranks.sum())
    res = rng.integers(0, resources, size=total).tolist()
    width = rng.integers(1, window + 1, size=total)
    # Every EI contains chronon T: start in [T - width + 1, T].
    start = (T - (rng.integers(0, width))).tolist()
    finish = (np.array(start) + width - 1).tolist()
    gc.collect()
    before = rss_bytes()
    t0 = time.perf_counter()
    eng = Engine(resources)
    eng.advance(T)
    i = 0
    for c in range(ceis):
        k = int(ranks[c])
        eng.add_cei(f"c{c}", "p", [(res[j], start[j], finish[j]) for j in range(i, i + k)])
        i += k
    build = time.perf_counter() - t0
    gc.collect()
    return eng, build, rss_bytes() - before


def time_select(eng: Engine, policy: str, budget: int, repeat: int) -> tuple[float, float, list[int]]:
    """Median wall time and median CPU time of ``repeat`` selects.

    CPU time is the stable figure on a machine shared with other jobs; wall
    time is what a caller waits.
    """
    walls, cpus = [], []
    chosen: list[int] = []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        chosen = eng.select(budget, policy)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus), chosen


def scattered_workload(seed: int) -> Workload:
    """The small runs' workload for ``seed``: 2000 CEIs of rank 1..3 whose EIs start independently.

    File order is release order (first start), creation order within a chronon.
    """
    n, k, count, window = 1000, 1000, 2000, 10
    rng = np.random.default_rng(seed)
    ceis = []
    for c in range(count):
        rank = int(rng.integers(1, 4))
        eis = []
        for _ in range(rank):
            s = int(rng.integers(0, k - window))
            eis.append(EI(int(rng.integers(0, n)), s, s + int(rng.integers(0, window + 1))))
        ceis.append(CEI(f"c{c}", "p", tuple(eis)))
    ceis.sort(key=lambda cei: min(e.start for e in cei.eis))  # file order = release order, as there
    wl = Workload(chronons=k, budget=Budget(1), resources=n, ceis=tuple(ceis))
    wl.validate()
    return wl


def baseline_run(policy: str, seed: int) -> tuple[float, int, int]:
    """One simulated epoch shaped like the paper's baseline (Table 1)."""
    wl = scattered_workload(seed)
    n, k = wl.resources, wl.chronons
    released: dict[int, list[tuple[str, list[tuple[int, int, int]]]]] = {}
    for cei in wl.ceis:
        eis = [(e.resource, e.start, e.finish) for e in cei.eis]
        released.setdefault(min(s for _, s, _ in eis), []).append((cei.id, eis))
    t0 = time.perf_counter()
    eng = Engine(n)
    probes = 0
    for t in range(k):
        eng.advance(t)
        for cid, eis in released.get(t, ()):
            eng.add_cei(cid, "p", eis)
        chosen = eng.select(1, policy)
        eng.probe(chosen)
        eng.drain_events()
        probes += len(chosen)
    return time.perf_counter() - t0, eng.counts()[CeiState.CAPTURED], probes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ceis", type=int, default=1_000_000)
    ap.add_argument("--resources", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--budgets", default="1,10,100")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("docs/bench-select.md"))
    args = ap.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]

    eng, build, rss = build_large(args.ceis, args.resources, args.window, args.seed)
    cands = len(eng.cei_candidates())
    rows = []
    for policy in policy_names():
        for b in budgets:
            sec, cpu, chosen = time_select(eng, policy, b, args.repeat)
            assert len(chosen) == b, (policy, b, len(chosen))
            rows.append((policy, b, sec, cpu))
            print(f"{policy:12s} C={b:<4d} wall {sec * 1e3:8.1f} ms  cpu {cpu * 1e3:8.1f} ms", flush=True)

    # Steady state: one chronon later, after probes, the table holds captured
    # and expired rows (not yet compacted) and EIs of dead CEIs.
    eng.probe(range(0, args.resources, max(1, args.resources // 1000)))
    c0, t0 = time.process_time(), time.perf_counter()
    eng.advance(T + 1)
    adv_wall, adv_cpu = time.perf_counter() - t0, time.process_time() - c0
    missed = eng.counts()[CeiState.MISSED]
    cands_later = len(eng.cei_candidates())
    later = []
    for policy in ("s-edf-p", "mrsf-p", "m-edf-p"):
        sec, cpu, _ = time_select(eng, policy, 10, args.repeat)
        later.append((policy, sec, cpu))
        print(f"later {policy:12s} C=10 wall {sec * 1e3:8.1f} ms  cpu {cpu * 1e3:8.1f} ms", flush=True)

    small = []
    for policy in policy_names():
        sec, captured, probes = baseline_run(policy, args.seed)
        small.append((policy, sec, captured, probes))
        print(f"baseline {policy:12s} {sec * 1e3:7.1f} ms  captured {captured}", flush=True)

    lines = [
        "# `Engine.select` benchmark",
        "",
        "Written by `benchmarks/machinery/bench_select.py`; rerun with",
        "",
        "```",
        f".venv/bin/python benchmarks/machinery/bench_select.py --ceis {args.ceis} --resources {args.resources} "
        f"--window {args.window} --budgets {args.budgets} --repeat {args.repeat} --seed {args.seed}",
        "```",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}"
        " (2 cores shared with other jobs: expect noise).",
        "",
        "## One `select` over a large pool",
        "",
        f"{args.ceis:,} pending CEIs (rank uniform 1..3), {cands:,} active candidate EIs, "
        f"{args.resources:,} resources, windows 1..{args.window}. Target: under 50 ms for "
        "`s-edf-p`, `mrsf-p`, `m-edf-p`. Cells: median wall time "
        "(median CPU time in parentheses: the machine is shared, so wall time includes waiting for other jobs).",
        "",
        "| policy | " + " | ".join(f"C={b}" for b in budgets) + " |",
        "|---|" + "---|" * len(budgets),
    ]
    for policy in policy_names():
        cells = [f"{sec * 1e3:.1f} ms ({cpu * 1e3:.1f})" for p, b, sec, cpu in rows if p == policy]
        lines.append(f"| `{policy}` | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Building the pool (`add_cei` one by one): {build:.1f} s.",
        f"Memory: RSS grew by {rss / 2**20:.0f} MiB, {rss / args.ceis:.0f} bytes per CEI "
        f"(engine's own estimate: {eng.memory_bytes() / args.ceis:.0f} bytes per CEI). Target: < 1 KB.",
        "",
        "## One chronon later",
        "",
        f"After probing {len(range(0, args.resources, max(1, args.resources // 1000)))} resources at "
        f"chronon {T}, `advance({T + 1})` took {adv_wall * 1e3:.0f} ms ({adv_cpu * 1e3:.0f} ms CPU): "
        f"{missed:,} CEIs missed, {cands_later:,} candidate EIs left, rows of captured, expired and dead "
        "EIs still in the table (compaction waits until a quarter of the rows are dead).",
        "",
        "| policy | C=10 |",
        "|---|---|",
        *[f"| `{p}` | {sec * 1e3:.1f} ms ({cpu * 1e3:.1f}) |" for p, sec, cpu in later],
        "",
        "## Whole small simulations",
        "",
        "The paper's baseline shape: n=1000 resources, K=1000 chronons, 2000 CEIs of rank 1..3,",
        "windows up to 10, C=1; `advance`, `add_cei`, `select`, `probe` every chronon. Target: well under 1 s.",
        "",
        "| policy | total | per chronon | captured |",
        "|---|---|---|---|",
    ]
    for policy, sec, captured, _ in small:
        lines.append(f"| `{policy}` | {sec * 1e3:.0f} ms | {sec * 1e6 / 1000:.0f} µs | {captured} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
