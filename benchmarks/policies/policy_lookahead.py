"""How close can an online policy get to the optimum on the paper's baseline?

Issue "Beyond the paper" asks for 95 % of the exact optimum on the baseline
(Table 1: n=1000, m=100, K=1000, λ=20, rank ≤ 3, window(10), C=1).  This
experiment measures what stands between the online policies and that target,
with a policy that is not shipped: a **rolling-horizon LP**.  At every chronon
``t`` it solves the optimum's linear relaxation (``proxy.core.optimum``'s
model) over the CEIs known at ``t`` — every uncaptured EI of every live CEI,
future EIs included — with a *price* on each probe planned after ``t``
(probes at ``t`` are free: an unused probe is lost), and probes the resources
with the largest ``x[r, t]``.  Four variants:

* ``price``: the price of a future probe stands for the CEIs not yet known
  that will compete for it.  Price 0 is the model a previous prototype used
  (it spends the budget on expensive CEIs that newcomers then crowd out).
* ``integral``: the same model as a small integer program (probes 0 or 1),
  to see whether the relaxation's fractions cost anything.
* ``peek``: the same LP told, at ``t``, of the CEIs released in
  ``t+1 .. t+peek`` — clairvoyance that no online policy has, to measure what
  knowing the near future is worth.
* ``sampled``: instead of clairvoyance, the LP is solved for ``S`` sampled
  futures (each profile's next CEIs drawn from the generator's own model:
  Poisson updates at the *true* rate, the next CEI of a profile holding the
  next update of each of its resources) and the probes most chosen across the
  samples are taken.  This is the best an online policy could do by knowing
  the arrival model exactly (Van Hentenryck and Bent's "consensus").

Schedules are re-scored by :func:`proxy.sim.score.score_schedule`; the
yardstick is the optimum cached by ``benchmarks/policies/policy_sweep.py`` in
``docs/policies_sweep.csv``.  Output goes to ``docs/policies.md`` between the
``lookahead:begin``/``lookahead:end`` markers.

Usage::

    .venv/bin/python benchmarks/policies/policy_lookahead.py [--seeds 10] [--prices 0,0.2,0.3,0.35,0.4,0.45,0.5]
        [--integral 0.4] [--peeks 1,2,5] [--sampled 5 --sampled-seeds 4] [--jobs 2] [--no-docs]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix

sys.path.insert(0, str(Path(__file__).resolve().parent))
from policy_sweep import baseline_optima, invocation, load_cache, publish

from proxy.core.model import Workload
from proxy.sim.generate import GenParams, generate
from proxy.sim.score import score_schedule

BEGIN, END = "<!-- lookahead:begin -->", "<!-- lookahead:end -->"

Window = tuple[int, int, int]  # resource, first chronon, last chronon


def lp_probes_now(t: int, budget: int, demands: Sequence[Sequence[Window]], price: float,
                  integral: bool = False) -> dict[int, float]:
    """``x[r, t]`` of the LP: max Σ y_c - price·(probes after t), y_c <= Σ x over each window of c.

    ``demands`` are the CEIs still to capture, each as the windows of its
    uncaptured EIs clipped to start at ``t``; at most ``budget`` probes per chronon.
    ``integral``: probes are 0 or 1 (a small integer program, HiGHS's MIP, 2 s
    per chronon at most) instead of the relaxation.
    """
    col: dict[tuple[int, int], int] = {}
    rows: list[tuple[int, list[int]]] = []
    for c, windows in enumerate(demands):
        for r, lo, hi in windows:
            cells = []
            for tau in range(lo, hi + 1):
                j = col.get((r, tau))
                if j is None:
                    j = col[(r, tau)] = len(col)
                cells.append(j)
            rows.append((c, cells))
    nx, ny = len(col), len(demands)
    cost = np.zeros(nx + ny)
    for (_, tau), j in col.items():
        if tau > t:
            cost[j] = price
    cost[nx:] = -1.0
    ri: list[int] = []
    ci: list[int] = []
    vv: list[float] = []
    for i, (c, cells) in enumerate(rows):
        ri.append(i)
        ci.append(nx + c)
        vv.append(1.0)
        ri.extend([i] * len(cells))
        ci.extend(cells)
        vv.extend([-1.0] * len(cells))
    by_chronon: dict[int, list[int]] = defaultdict(list)
    for (_, tau), j in col.items():
        by_chronon[tau].append(j)
    n = len(rows)
    for k, cells in enumerate(by_chronon.values()):
        ri.extend([n + k] * len(cells))
        ci.extend(cells)
        vv.extend([1.0] * len(cells))
    ub = np.concatenate([np.zeros(n), np.full(len(by_chronon), float(budget))])
    a = coo_matrix((vv, (ri, ci)), shape=(len(ub), nx + ny)).tocsr()
    if integral:
        kinds = np.zeros(nx + ny)
        kinds[:nx] = 1  # integer probes; y_c <= min over its EIs then falls to 0 or 1 by itself
        res = milp(cost, constraints=LinearConstraint(a, -np.inf, ub), bounds=Bounds(0, 1),
                   integrality=kinds, options={"time_limit": 2.0})
    else:
        res = linprog(cost, A_ub=a, b_ub=ub, bounds=(0, 1), method="highs")
    if res.x is None:
        raise RuntimeError(f"chronon {t}: LP failed: {res.message}")
    return {r: float(res.x[j]) for (r, tau), j in col.items() if tau == t and res.x[j] > 1e-6}


def rolling_lp(wl: Workload, price: float, peek: int = 0, sampled: int = 0, params: GenParams | None = None,
               rng_seed: int = 0, integral: bool = False) -> list[tuple[int, int]]:
    """The schedule of the rolling-horizon LP on ``wl`` (see the module docstring).

    ``sampled`` futures are drawn with the update rate and window of ``params``,
    the generator's parameters of ``wl``.
    """
    k_last = wl.chronons - 1
    ceis = [(c.effective_release, [(e.resource, e.start, e.finish) for e in c.eis], c.profile)
            for c in wl.ceis]
    released: dict[int, list[int]] = defaultdict(list)
    for i, (rel, _, _) in enumerate(ceis):
        released[rel].append(i)
    probes: dict[int, list[int]] = defaultdict(list)  # resource -> sorted chronons probed

    def covered(r: int, s: int, f: int) -> bool:
        h = probes[r]
        i = bisect_left(h, s)
        return i < len(h) and h[i] <= f

    rng = np.random.default_rng(rng_seed)
    gen = params or GenParams()
    latest: dict[str, tuple[tuple[int, ...], int]] = {}  # profile -> resources, last start of its newest CEI
    live: set[int] = set()
    schedule: list[tuple[int, int]] = []
    for t in range(wl.chronons):
        for i in released.get(t, ()):
            live.add(i)
            _, eis, profile = ceis[i]
            latest[profile] = (tuple(r for r, _, _ in eis), max(s for _, s, _ in eis))
        # Clairvoyance: CEIs released up to ``peek`` chronons ahead (all of them at t = 0).
        for d in range(1 if t == 0 else peek, peek + 1):
            live.update(released.get(t + d, ()))
        demands: list[list[Window]] = []
        for i in list(live):
            todo: list[Window] = []
            dead = False
            for r, s, f in ceis[i][1]:
                if covered(r, s, f):
                    continue
                if f < t:
                    dead = True
                    break
                todo.append((r, max(s, t), f))
            if dead or not todo:
                live.discard(i)
            else:
                demands.append(todo)
        if not demands:
            continue
        active = {r for todo in demands for r, lo, _ in todo if lo <= t}
        budget = wl.budget.at(t)
        x: dict[int, float]
        if sampled:
            x = defaultdict(float)
            for _ in range(sampled):
                futures = _sample_next_ceis(latest, t, gen.lam / gen.chronons, rng, k_last, 30, gen.window)
                for r, v in lp_probes_now(t, budget, demands + futures, price).items():
                    x[r] += v
        else:
            x = lp_probes_now(t, budget, demands, price, integral)
        chosen = [r for r in sorted(x, key=lambda r: (-x[r], r)) if r in active][:budget]
        for r in sorted(active - set(chosen)):  # spare probes: anything active captures something
            if len(chosen) >= budget:
                break
            chosen.append(r)
        for r in chosen:
            probes[r].append(t)
            schedule.append((t, r))
    return schedule


def _sample_next_ceis(latest: dict[str, tuple[tuple[int, ...], int]], t: int, rate: float,
                      rng: np.random.Generator, k_last: int, horizon: int, window: int) -> list[list[Window]]:
    """One sampled future: each profile's CEIs released in ``t+1 .. t+horizon`` (AuctionWatch, §4.1.2)."""
    out: list[list[Window]] = []
    for resources, last_start in latest.values():
        after = max(last_start, t)  # no update since: its next CEI would be known already
        while True:
            ups = [after + 1 + int(rng.exponential(1 / rate)) for _ in resources]
            if min(ups) > min(t + horizon, k_last):
                break
            out.append([(r, u, min(u + window, k_last)) for r, u in zip(resources, ups, strict=True)
                        if u <= k_last])
            after = max(ups)
    return out


def _job(args: tuple[int, dict[str, float]]) -> tuple[int, str, int, float]:
    seed, opts = args
    params = GenParams()
    wl = generate(params, seed)
    began = time.perf_counter()
    schedule = rolling_lp(wl, price=opts["price"], peek=int(opts.get("peek", 0)),
                          sampled=int(opts.get("sampled", 0)), params=params, rng_seed=seed,
                          integral=bool(opts.get("integral", 0)))
    score = score_schedule(wl, schedule)
    if score.problems:
        raise RuntimeError(f"seed {seed} {opts}: invalid schedule: {score.problems[:3]}")
    return seed, json.dumps(opts, sort_keys=True), score.captured, time.perf_counter() - began


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="baseline seeds 1..N (their optimum must be cached)")
    ap.add_argument("--prices", default="0,0.2,0.3,0.35,0.4,0.45,0.5",
                    help="prices of a future probe, no lookahead")
    ap.add_argument("--integral", default="0.4", help="prices at which to solve the integer program too")
    ap.add_argument("--peeks", default="1,2,5", help="clairvoyance in chronons, at --peek-price")
    ap.add_argument("--peek-price", type=float, default=0.4)
    ap.add_argument("--sampled", type=int, default=5, help="sampled futures per chronon (0: skip)")
    ap.add_argument("--sampled-seeds", type=int, default=4, help="seeds 1..N for the (slow) sampled runs")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args(argv)
    cache = load_cache()
    seeds = list(range(1, args.seeds + 1))
    try:
        top = baseline_optima(cache, seeds)
    except ValueError as exc:
        ap.error(str(exc))
    configs: list[tuple[str, dict[str, float], list[int]]] = []
    for price in (float(x) for x in args.prices.split(",") if x):
        configs.append((f"price {price:g}", {"price": price}, seeds))
    for price in (float(x) for x in args.integral.split(",") if x):
        configs.append((f"price {price:g}, integer program", {"price": price, "integral": 1}, seeds))
    for k in (int(x) for x in args.peeks.split(",") if x):
        configs.append((f"price {args.peek_price:g}, clairvoyant {k} chronon(s)",
                        {"price": args.peek_price, "peek": k}, seeds))
    if args.sampled:
        configs.append((f"price {args.peek_price:g}, consensus of {args.sampled} sampled futures",
                        {"price": args.peek_price, "sampled": args.sampled},
                        seeds[: args.sampled_seeds]))
    jobs = [(s, opts) for _, opts, ss in configs for s in ss]
    got: dict[tuple[int, str], tuple[int, float]] = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for seed, key, captured, secs in pool.map(_job, jobs):
            got[(seed, key)] = (captured, secs)
            print(f"seed {seed} {key}: {captured} ({secs:.1f} s)", flush=True)
    policies = ("adm-edf", "m-edf-p", "mrsf-p")
    lines = ["| policy | seeds | share of the optimum | same seeds: `adm-edf` "
             f"| same seeds: LP at price {args.peek_price:g} | seconds per run |",
             "|---|---:|---:|---:|---:|---:|"]
    plain = json.dumps({"price": args.peek_price}, sort_keys=True)
    for label, opts, ss in configs:
        key = json.dumps(opts, sort_keys=True)
        share = sum(got[(s, key)][0] / top[s][0] for s in ss) / len(ss)
        adm = sum(int(cache[("baseline", s, "adm-edf")]["captured"]) / top[s][0] for s in ss) / len(ss)
        ref = (f"{sum(got[(s, plain)][0] / top[s][0] for s in ss) / len(ss):.4f}"
               if key != plain and all((s, plain) in got for s in ss) else "")
        secs = sum(got[(s, key)][1] for s in ss) / len(ss)
        lines.append(f"| rolling LP, {label} | {len(ss)} | {share:.4f} | {adm:.4f} | {ref} | {secs:.1f} |")
    for p in policies:
        share = sum(int(cache[("baseline", s, p)]["captured"]) / top[s][0] for s in seeds) / len(seeds)
        lines.append(f"| `{p}` (shipped) | {len(seeds)} | {share:.4f} | | | |")
    unproven = sum(not proven for _, proven in top.values())
    cmd, stamp = invocation("policy_lookahead.py", argv)
    body = (f"Command: `{cmd}` (run {stamp}; baseline seeds 1..{args.seeds}; "
            f"optimum from `docs/policies_sweep.csv`, {unproven} seed(s) unproven).\n\n" + "\n".join(lines))
    publish(BEGIN, END, body, write=not args.no_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
