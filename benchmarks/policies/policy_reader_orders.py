"""How much a plain reader's completeness owes to the order it visits feeds in: ``docs/discovery.md``.

Written for the section "One order is one draw". For each trace, the live
bench's workload (``proxy.bench.live.trace_workload`` at the issue's
options, or those given) and round-robin and the adaptive reader at the
proxy's probes (``C`` per chronon), in the feeds' own order and in ``--orders``
seeded random orders (``proxy.bench.baselines.feed_orders``): the own order's
completeness, the median, 5th and 95th percentiles and maximum over the
random ones, and the own order's rank among them (the share of random orders
below it). A rank near 1 on a trace means a plain reader in the feeds' own
order was lucky there, one near 0 unlucky; over many traces the ranks should
spread evenly, as they do when the order has nothing to do with when feeds
publish.

    .venv/bin/python benchmarks/policies/policy_reader_orders.py /tmp/s60_2012.csv /tmp/s60_67.csv \\
        ../shared/traces/real_feeds_items.csv --orders 300
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from proxy.bench.baselines import AdaptiveParams, match_probes
from proxy.bench.live import reader_view, trace_workload

CHRONONS, WINDOW, DAYS, RANK, PROFILES, BUDGET = 200, 10, 14, 3, 40, 2  # the live bench options


def spread(path: Path, orders: int, *, profiles: int = PROFILES, budget: int = BUDGET, seed: int = 1,
           kinds: tuple[str, ...] = ("round-robin", "adaptive")) -> dict[str, tuple[float, list[float]]]:
    """Per reader: its completeness in the feeds' own order, and in each of ``orders`` random orders."""
    bw = trace_workload(path, chronons=CHRONONS, days=DAYS, profiles=profiles, rank=RANK, window=WINDOW,
                        seed=seed, budget=budget)
    view = reader_view(bw)
    params = AdaptiveParams(max_interval=CHRONONS // 2, lookback=CHRONONS // 5, window=20)
    out = {}
    for kind in kinds:
        # feed_orders' first order is the feeds' own, the rest seeded shuffles.
        each = match_probes(kind, view.ceis, view.updates, CHRONONS, CHRONONS * budget, params, orders + 1).spread
        out[kind] = (each[0], list(each[1:]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("traces", nargs="+", type=Path, help="trace CSVs (the live bench's --trace)")
    parser.add_argument("--orders", type=int, default=300, help="random feed orders per trace (default 300)")
    parser.add_argument("--profiles", type=int, default=PROFILES, help=f"the bench's --profiles (default {PROFILES})")
    parser.add_argument("--budget", type=int, default=BUDGET, help=f"the bench's --budget (default {BUDGET})")
    parser.add_argument("--round-robin-only", action="store_true",
                        help="skip the adaptive reader (its tuning takes most of the time)")
    args = parser.parse_args()
    kinds = ("round-robin",) if args.round_robin_only else ("round-robin", "adaptive")
    print("| trace | reader | own order | random orders: median, 5th–95th percentile, max | own order's rank |")
    print("|---|---|---:|---|---:|")
    ranks: dict[str, list[float]] = {kind: [] for kind in kinds}
    for path in args.traces:
        for kind, (own, each) in spread(path, args.orders, profiles=args.profiles, budget=args.budget,
                                        kinds=kinds).items():
            q = statistics.quantiles(each, n=20, method="inclusive")
            rank = sum(x < own for x in each) / len(each)
            ranks[kind].append(rank)
            print(f"| {path.name} | {kind} | {100 * own:.1f} % | {100 * statistics.median(each):.1f} %, "
                  f"{100 * q[0]:.1f}–{100 * q[-1]:.1f} %, {100 * max(each):.1f} % | {rank:.2f} |", flush=True)
    for kind, rs in ranks.items():
        print(f"{kind}: the own order's rank over {len(rs)} traces: median {statistics.median(rs):.2f}, "
              f"min {min(rs):.2f}, max {max(rs):.2f}")


if __name__ == "__main__":
    main()
