"""Per-probe cost of issue 45's age hazards (``proxy.core.hazard.AgeHazard``); figures in docs/discovery.md.

``--feeds`` feeds, each a burst-and-wait renewal process (the next publication
one chronon after the last with chance 0.3, else an exponential wait of mean
``1 / --rate`` chronons: roughly what the real trace shows), probed
round-robin at ``--probes`` probes in all; every probe shows its feed's newest
20 dates, as a fetched document does, and is told to ``observe``; each
chronon the allocation's read (``shape``) of every probed feed is timed too.
Prints µs per probe of ``observe``, of ``shape``, their sum against the
issue's budget of 50 µs, and the table learnt (the hazard over the mean rate
per age bin).

Usage: .venv/bin/python benchmarks/machinery/bench_hazard.py [--feeds 10000] [--probes 1000000]
Prints a markdown table (section "Age hazards" of docs/discovery.md quotes it).
"""

from __future__ import annotations

import argparse
import itertools
import platform
import time

import numpy as np

from proxy.core.hazard import AGE_EDGES, AgeHazard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--feeds", type=int, default=10_000)
    parser.add_argument("--probes", type=int, default=1_000_000)
    parser.add_argument("--budget", type=int, default=200, help="probes per chronon")
    parser.add_argument("--rate", type=float, default=0.02, help="the waits' rate per chronon")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    chronons = args.probes // args.budget + 1
    # Each feed's publications over the run: a burst of one chronon with chance 0.3, else a wait.
    pubs: list[list[float]] = []
    for _ in range(args.feeds):
        t, dates = float(rng.uniform(-50, 0)), []
        while t < chronons:
            dates.append(t)
            t += 1.0 if rng.random() < 0.3 else float(rng.exponential(1.0 / args.rate))
        pubs.append(dates)
    mean_rate = sum(map(len, pubs)) / (args.feeds * chronons)
    h = AgeHazard()
    upto = [0] * args.feeds
    observe = shape = 0.0
    done = 0
    feed = 0
    for now in range(chronons):
        if done >= args.probes:
            break
        probed = []
        for _ in range(min(args.budget, args.probes - done)):
            dates = pubs[feed]
            k = upto[feed]
            while k < len(dates) and dates[k] <= now:
                k += 1
            upto[feed] = k
            shown = dates[max(k - 20, 0):k]
            t0 = time.perf_counter()
            h.observe(feed, float(now), shown, mean_rate)
            observe += time.perf_counter() - t0
            probed.append(feed)
            feed = (feed + 1) % args.feeds
            done += 1
        t0 = time.perf_counter()
        for f in probed:
            h.shape(f, now + 1.0)
        shape += time.perf_counter() - t0
    per = 1e6 / done
    print(f"python {platform.python_version()}, {args.feeds} feeds, {done} probes, {chronons} chronons, "
          f"mean rate {mean_rate:.4f} a chronon")
    print()
    print("| what | µs per probe |")
    print("|---|---:|")
    print(f"| `observe` | {observe * per:.2f} |")
    print(f"| `shape` | {shape * per:.2f} |")
    print(f"| together (budget 50) | {(observe + shape) * per:.2f} |")
    print()
    edges = ["(0, 1]"] + [f"({a:g}, {b:g}]" for a, b in itertools.pairwise(AGE_EDGES)] + [
        f"> {AGE_EDGES[-1]:g}"]
    print("| age, chronons | " + " | ".join(edges) + " |")
    print("|---|" + "---:|" * len(edges))
    print("| hazard / mean rate | " + " | ".join(f"{r:.2f}" for r in h.ratios()) + " |")


if __name__ == "__main__":
    main()
