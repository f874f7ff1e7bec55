"""How far from Poisson a trace's inter-update gaps are; figures in docs/discovery.md (section "Age hazards").

Two views of one trace (issue 45: the answer decides the age model):

- *at the bench's pace*: the busiest ``--days`` on ``--chronons`` chronons, as
  ``proxy bench live --workload trace`` replays them (``trace_workload``: one
  update per feed and chronon at most). Per feed with at least six updates,
  the coefficient of variation of its gaps (1 for a Poisson feed); pooled over
  the feeds with at least three, the hazard by age since the last update
  (updates at that age over the chronons spent at it), relative to each feed's
  mean rate over the run (1 for a Poisson feed at every age);
- *in real time* (``--real-time``): every timed entry of each feed (feeds whose
  entries are mostly dated at midnight are left out), the gaps' CV and the
  share of gaps under a tenth of the feed's mean gap (0.10 for Poisson).

Usage: .venv/bin/python benchmarks/policies/policy_gap_stats.py TRACE.csv [--real-time]
"""

from __future__ import annotations

import argparse
import bisect
import csv
import datetime as dt
import itertools
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

from proxy.bench.live import trace_workload

EDGES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # proxy.core.hazard.AGE_EDGES


def bench_pace(path: Path, chronons: int, days: float) -> None:
    ups = [sorted(set(u)) for u in trace_workload(path, chronons=chronons, days=days, profiles=40, rank=3, window=10,
                                                   seed=1, budget=2).updates]
    cvs = []
    for u in ups:
        g = np.diff(u).astype(float)
        if len(u) >= 6:
            cvs.append(float(g.std() / g.mean()))
    events = [0.0] * (len(EDGES) + 1)
    expected = [0.0] * (len(EDGES) + 1)
    for u in ups:
        if len(u) < 3:
            continue
        rate = len(u) / chronons
        for a, b in zip(u, [*u[1:], chronons], strict=True):  # the last gap is open: survival only
            for age in range(1, b - a + 1):
                k = bisect.bisect_left(EDGES, age)
                expected[k] += rate
                events[k] += age == b - a and b < chronons
    print(f"{path.name}, busiest {days:g} days on {chronons} chronons: {sum(map(len, ups))} updates on "
          f"{sum(1 for u in ups if u)} feeds; gap CV over the {len(cvs)} feeds with >= 6 updates: median "
          f"{statistics.median(cvs):.2f}, quartiles {np.percentile(cvs, 25):.2f}-{np.percentile(cvs, 75):.2f}")
    heads = ["(0, 1]"] + [f"({a}, {b}]" for a, b in itertools.pairwise(EDGES)] + [f"> {EDGES[-1]}"]
    print("| age, chronons | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(heads))
    print("| updates | " + " | ".join(f"{e:.0f}" for e in events) + " |")
    print("| hazard / mean rate | " + " | ".join(f"{e / x:.2f}" if x else "-" for e, x in
                                               zip(events, expected, strict=True)) + " |")


def real_time(path: Path) -> None:
    stamps: dict[str, list[str]] = defaultdict(list)
    with path.open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            stamps[row["feed_id"]].append(row["timestamp_utc_iso"])
    cvs, short = [], []
    for ts in stamps.values():
        if sum(t.endswith("T00:00:00Z") for t in ts) > len(ts) / 2:
            continue  # dated by day: no gaps to speak of
        hours = sorted(dt.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() / 3600 for t in ts)
        g = np.diff(hours)
        g = g[g > 0]
        if len(g) < 9:
            continue
        cvs.append(float(g.std() / g.mean()))
        short.append(float(np.mean(g < 0.1 * g.mean())))
    a = np.array(cvs)
    print(f"{path.name}, real time: {len(cvs)} feeds with timed entries and >= 10 gaps; gap CV median "
          f"{statistics.median(cvs):.2f}, quartiles {np.percentile(a, 25):.2f}-{np.percentile(a, 75):.2f}, "
          f"CV > 1 on {np.mean(a > 1):.0%}, > 2 on {np.mean(a > 2):.0%}; gaps under a tenth of the feed's mean "
          f"gap: median share {statistics.median(short):.2f} (Poisson 0.10)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--chronons", type=int, default=200)
    parser.add_argument("--days", type=float, default=14)
    parser.add_argument("--real-time", action="store_true")
    args = parser.parse_args()
    bench_pace(args.trace, args.chronons, args.days)
    if args.real_time:
        real_time(args.trace)


if __name__ == "__main__":
    main()
