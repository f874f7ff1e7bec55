"""Where the optimum's extra captures come from, on the paper's baseline.

For each schedule (the exact optimum, ``adm-edf``, ``mrsf-p`` and the rolling
LP of ``benchmarks/policies/policy_lookahead.py`` at price 0.4) it counts the captured
CEIs by rank, and the probes that serve more than one captured CEI: one probe
captures every active EI on its resource (spec "Semantics"), so a schedule
captures more CEIs than it spends probes only through such shared probes.
Shared probes are split by whom they serve:

* ``same profile, rank 1``: consecutive CEIs of a one-resource profile, the
  next update arriving inside the current EI's window;
* ``same profile, rank ≥ 2``: consecutive CEIs of a profile watching several
  resources (the next CEI holds the next update of each);
* ``across profiles``: profiles watching the same resource.

"Extra EIs" is the number of EIs of captured CEIs minus the number of probes
that captured them: what sharing saved.  Schedules are re-read against the
workload here (first probe inside each EI's window), independent of the
engine.  Output goes to ``docs/policies.md`` between the
``anatomy:begin``/``anatomy:end`` markers.

Usage::

    .venv/bin/python benchmarks/policies/policy_anatomy.py [--seeds 1,2,3] [--no-docs]
"""

from __future__ import annotations

import argparse
import sys
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from policy_lookahead import rolling_lp
from policy_sweep import invocation, publish

from proxy.core.model import Workload
from proxy.sim.generate import GenParams, generate
from proxy.sim.run import simulate

BEGIN, END = "<!-- anatomy:begin -->", "<!-- anatomy:end -->"
SCHEDULES = ("optimal", "adm-edf", "mrsf-p", "rolling LP, price 0.4")
KINDS = ("same profile, rank 1", "same profile, rank ≥ 2", "across profiles")


def anatomy(wl: Workload, schedule: Sequence[tuple[int, int]]) -> dict[str, int]:
    """Captured CEIs by rank, shared probes by kind, and the EIs sharing saved."""
    probes: dict[int, list[int]] = defaultdict(list)
    for t, r in schedule:
        probes[r].append(t)
    for times in probes.values():
        times.sort()
    served: dict[tuple[int, int], list[tuple[str, int]]] = defaultdict(list)  # probe -> (profile, rank)
    out: Counter[str] = Counter()
    for c in wl.ceis:
        hits = []
        for e in c.eis:
            times = probes.get(e.resource, [])
            i = bisect_left(times, e.start)
            if i == len(times) or times[i] > e.finish:
                break
            hits.append((times[i], e.resource))
        else:
            out[f"rank {len(c.eis)}"] += 1
            out["captured"] += 1
            for probe in hits:
                served[probe].append((c.profile, len(c.eis)))
    for users in served.values():
        out["extra EIs"] += len(users) - 1
        if len(users) < 2:
            continue
        if len({p for p, _ in users}) > 1:
            out[KINDS[2]] += 1
        elif all(k == 1 for _, k in users):
            out[KINDS[0]] += 1
        else:
            out[KINDS[1]] += 1
    out["probes"] = len(schedule)
    return dict(out)


def _job(seed: int) -> tuple[int, dict[str, dict[str, int]], dict[str, int], bool]:
    wl = generate(GenParams(), seed)
    got: dict[str, dict[str, int]] = {}
    proven = True
    for name in SCHEDULES:
        schedule: Sequence[tuple[int, int]]
        if name.startswith("rolling LP"):
            schedule = rolling_lp(wl, price=0.4)
        else:
            res = simulate(wl, name, time_limit=300)
            schedule = res.schedule
            if name == "optimal":
                proven = res.extra.get("status") == "optimal"
        got[name] = anatomy(wl, schedule)
    totals = Counter(f"rank {len(c.eis)}" for c in wl.ceis)
    return seed, got, dict(totals), proven


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="1,2,3", help="baseline seeds (comma-separated)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",") if x]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = sorted(pool.map(_job, seeds))
    ranks = sorted({k for _, _, totals, _ in results for k in totals})
    head = ["schedule", "captured", *[f"{k} (of {sum(t.get(k, 0) for _, _, t, _ in results)})" for k in ranks],
            "probes", *KINDS, "extra EIs"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name in SCHEDULES:
        rows = [got[name] for _, got, _, _ in results]
        cells = [sum(r.get(k, 0) for r in rows) for k in ("captured", *ranks, "probes", *KINDS, "extra EIs")]
        lines.append(f"| {name} | " + " | ".join(str(c) for c in cells) + " |")
    cmd, stamp = invocation("policy_anatomy.py", argv)
    unproven = [seed for seed, _, _, proven in results if not proven]
    proof = f"optimum NOT proven on seed(s) {unproven}" if unproven else "every optimum proven"
    body = (f"Command: `{cmd}` (run {stamp}; baseline seeds {', '.join(map(str, seeds))}, "
            f"sums over the seeds; {proof}).\n\n" + "\n".join(lines))
    publish(BEGIN, END, body, write=not args.no_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
