"""What the co-update model costs per probe: ``CoUpdates.observe`` and ``CoUpdates.hints``.

Figures quoted in ``docs/discovery.md`` (section "Co-updates"). A synthetic
co-update trace (``proxy.sim.synthetic.weekly_trace`` with clusters, the
``proxy sim synth-trace --clusters`` model) is cut into chronons; a plain
round-robin spends ``--budget`` probes a chronon, each probe tells the model
what it found (``observe``), and every chronon the allocation asks for the
hints of every watched feed (``hints``), as the replica and the service's loop
do. Reported: µs per ``observe``, µs per ``hints`` call, and their sum per
probe (the hints' cost shared by the chronon's probes), against issue 45's
50 µs per probe; and the model's size (partners kept, pending hints).

    .venv/bin/python benchmarks/machinery/bench_coupdate.py [--feeds 2000] [--budget 20] [--chronons 2000]
"""

from __future__ import annotations

import argparse
import time

from proxy.core.coupdate import CoUpdates
from proxy.sim.synthetic import CoUpdates as Clusters
from proxy.sim.synthetic import trace_chronons, weekly_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--feeds", type=int, default=2000)
    parser.add_argument("--budget", type=int, default=20, help="probes per chronon")
    parser.add_argument("--chronons", type=int, default=2000)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    n, c, k = args.feeds, args.budget, args.chronons
    trace = weekly_trace(n, args.seed, weeks=4.0, items_per_week=3.0,
                         coupdates=Clusters(clusters=max(n // 20, 1), share=0.6, events_per_week=4.0))
    ups = [sorted(u) for u in trace_chronons(trace, k)]
    model = CoUpdates()
    feeds = list(range(n))
    last: list[int | None] = [None] * n
    rate = [len(u) / k for u in ups]
    observe_s = hints_s = 0.0
    probes = found = hinted = 0
    nxt = 0
    for t in range(k):
        began = time.perf_counter()
        h = model.hints(t, args.window, feeds, last, rate)
        hints_s += time.perf_counter() - began
        hinted += int((h > 0).sum())
        for _ in range(c):
            r = nxt
            nxt = (nxt + 1) % n
            before = last[r]
            new = [u for u in ups[r] if (before is None or before < u) and u <= t]
            began = time.perf_counter()
            model.observe(r, t, new)
            observe_s += time.perf_counter() - began
            last[r] = t
            probes += 1
            found += len(new)
    partners = sum(len(model.partners(r)) for r in feeds)
    print(f"{n} feeds, {sum(map(len, ups))} updates over {k} chronons, {c} probes a chronon "
          f"({probes} probes, {found} updates found, {hinted} feed-chronons hinted)")
    print(f"observe: {1e6 * observe_s / probes:.1f} µs per probe")
    print(f"hints: {1e6 * hints_s / k:.1f} µs per chronon over {n} feeds, {1e6 * hints_s / probes:.1f} µs per probe")
    print(f"together: {1e6 * (observe_s + hints_s) / probes:.1f} µs per probe (issue 45's budget: 50 µs)")
    print(f"memory: {partners} partner counts ({partners / n:.1f} a feed, at most 8)")


if __name__ == "__main__":
    main()
