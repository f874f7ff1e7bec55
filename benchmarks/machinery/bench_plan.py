"""Time ``proxy plan`` on a synthetic population; write the figures section of docs/plan.md.

``--profiles`` profiles over ``--feeds`` feeds: a third AuctionWatch(2) rules
(within 10 min), a third digests (``every`` 30 min, slack 3 min, one query
within 10 min), a third ``on: update`` triggers (slack 5 min, one query within
5 min). Feeds' update models are learnt from one document each of 50 entries
dated by a Poisson process with rates log-normal around one update per 2 h, a
third of them office-hours only (so the models are a mix of Poisson and
seasonal). Measured for the CLI's defaults (horizon 1440, 8 futures, one
process per CPU), the same in one process, and the API's (360, 4, one
process): building the inputs (rules and the expected-update grid), one
evaluation at the budget, and the least-budget search.

Usage: .venv/bin/python benchmarks/machinery/bench_plan.py [--profiles 1000] [--feeds 300] [--budget 10] [--out docs/plan.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import time
from pathlib import Path

import numpy as np

from proxy.rules import FeedUpdateModels
from proxy.rules.ports import ChrononGrid
from proxy.service.planning import plan_inputs, service_planner
from proxy.store import Profile, Rule

START, END = "<!-- bench_plan:start -->", "<!-- bench_plan:end -->"
NOW = dt.datetime(2026, 11, 23, 9, tzinfo=dt.UTC)  # a Monday, 09:00 UTC
HOUR = 3600.0


def population(n_profiles: int, n_feeds: int, rng: np.random.Generator) -> tuple[list[Profile], FeedUpdateModels]:
    models = FeedUpdateModels()
    now = NOW.timestamp()
    for f in range(n_feeds):
        rate = float(rng.lognormal(np.log(0.5), 1.0)) / HOUR
        t = now - np.cumsum(rng.exponential(1 / rate, 200))
        if f % 3 == 0:  # office hours, weekdays
            local = (t - 345_600.0) % (7 * 86_400.0)
            t = t[(local // 86_400.0 < 5) & ((local % 86_400.0) >= 9 * HOUR) & ((local % 86_400.0) < 17 * HOUR)]
        models.observe_document(f, now, t[:50].tolist())
    profiles = []
    for p in range(n_profiles):
        a, b = (str(x) for x in rng.choice(n_feeds, 2, replace=False))
        kind = p % 3
        if kind == 0:
            spec = {"name": "w", "watch": {"feeds": [a, b], "within": "10m"}}
        elif kind == 1:
            spec = {"name": "d", "trigger": {"feed": a, "every": "30m", "slack": "3m"},
                    "query": [{"feed": b, "within": "10m"}]}
        else:
            spec = {"name": "u", "trigger": {"feed": a, "on": "update", "slack": "5m"},
                    "query": [{"feed": b, "within": "5m"}]}
        rule = Rule(id=p, profile_id=p, name=spec["name"], position=0, spec=spec, state=None, feed_ids=())
        profiles.append(Profile(id=p, user_id=1, name=f"p{p}", created_at=NOW, updated_at=NOW, rules=(rule,)))
    return profiles, models


def measure(profiles: list[Profile], models: FeedUpdateModels, n_feeds: int, horizon: int, futures: int,
            jobs: int, budget: int, target: float) -> dict[str, object]:
    clock = ChrononGrid(NOW, 60.0)
    began = time.perf_counter()
    inputs = plan_inputs(profiles, {f: f for f in range(n_feeds)}, models, clock, 0, horizon)
    t_inputs = time.perf_counter() - began
    began = time.perf_counter()
    planner = service_planner(inputs, futures=futures, seed=0, jobs=jobs)
    t_setup = time.perf_counter() - began
    began = time.perf_counter()
    current = planner.evaluate(budget)
    t_eval = time.perf_counter() - began
    began = time.perf_counter()
    least = planner.least_budget(target, start=budget)
    t_search = time.perf_counter() - began
    return {"horizon": horizon, "futures": futures, "jobs": jobs, "inputs": t_inputs, "setup": t_setup, "eval": t_eval,
            "search": t_search, "current": current, "least": least}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", type=int, default=1000)
    ap.add_argument("--feeds", type=int, default=300)
    ap.add_argument("--budget", type=int, default=10)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--out", type=Path, default=Path("docs/plan.md"))
    args = ap.parse_args()
    profiles, models = population(args.profiles, args.feeds, np.random.default_rng(1))
    cpus = os.cpu_count() or 1
    rows = [measure(profiles, models, args.feeds, h, s, j, args.budget, args.target)
            for h, s, j in ((1440, 8, cpus), (1440, 8, 1), (360, 4, 1))]
    lines = [
        f"Command: `.venv/bin/python benchmarks/machinery/bench_plan.py --profiles {args.profiles} "
        f"--feeds {args.feeds} --budget {args.budget}`  ",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the end of the run (figures are indicative).",
        "",
        f"{args.profiles:,} profiles (one rule each: a third AuctionWatch(2), a third digests every 30 min, "
        f"a third `on: update` triggers) over {args.feeds} feeds, 60 s chronons, budget {args.budget}, "
        f"target {args.target}.",
        "",
        "| horizon | futures | processes | inputs (rules, grid) | evaluate at the budget | least-budget search "
        "| budgets tried | completeness at the budget | least budget (completeness) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cur, least = r["current"], r["least"]
        found = ("none" if least.point is None  # type: ignore[attr-defined]
                 else f"{least.budget} ({least.point.completeness:.3f} ± {least.point.stderr:.3f})")  # type: ignore[attr-defined]
        lines.append(
            f"| {r['horizon']} | {r['futures']} | {r['jobs']} | {r['inputs']:.2f} s | {r['eval']:.2f} s | {r['search']:.2f} s "
            f"| {len(least.evaluated)} | {cur.completeness:.3f} ± {cur.stderr:.3f} | {found} |"  # type: ignore[attr-defined]
        )
    block = "\n".join(lines)
    print(block)
    text = args.out.read_text(encoding="utf-8")
    text = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: f"{START}\n{block}\n{END}", text,
                  flags=re.S)
    args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
