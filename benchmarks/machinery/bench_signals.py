"""Per-probe cost of issue 45's publisher hints and regime-shift detector; figures in docs/discovery.md.

Three costs, each against the issue's budget of 50 µs per probe:

- ``publisher_hints``: reading ``<ttl>`` and the syndication module from a
  fetched document (every 200), on a 20-item RSS document with the module and
  on one without it;
- ``ShiftDetector.observe``: one probe's update of a feed's two CUSUMs, over
  ``--feeds`` feeds and ``--probes`` probes (Poisson counts, a quarter of the
  feeds shifting by 4× halfway), with the detections and false alarms;
- ``pooled_rates`` with a prior per feed against without: the background
  allocation's extra work per watched feed and chronon.

Usage: .venv/bin/python benchmarks/machinery/bench_signals.py [--feeds 10000] [--probes 1000000]
Prints a markdown table (section "Publisher hints and regime shifts" of docs/discovery.md quotes it).
"""

from __future__ import annotations

import argparse
import math
import platform
import time

import numpy as np

from proxy.core.changepoint import ShiftDetector
from proxy.core.rates import pooled_rates
from proxy.feeds.hints import publisher_hints
from proxy.feeds.parse import parse_document


def _document(sy: bool) -> bytes:
    items = "".join(
        f"<item><title>Post {i} about something</title><link>http://blog.test/p/{i}</link>"
        f"<guid>http://blog.test/p/{i}</guid><pubDate>Mon, 01 Jun 2026 10:{i:02d}:00 GMT</pubDate>"
        f"<description>{'Words of the post. ' * 40}</description></item>"
        for i in range(20)
    )
    module = ("<sy:updatePeriod>hourly</sy:updatePeriod><sy:updateFrequency>1</sy:updateFrequency>"
              if sy else "")
    ns = ' xmlns:sy="http://purl.org/rss/1.0/modules/syndication/"' if sy else ""
    return (f'<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"{ns}><channel><title>Blog</title>'
            f"<link>http://blog.test/</link>{module}{items}</channel></rss>").encode()


def _per_call(fn: object, n: int) -> float:
    assert callable(fn)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--feeds", type=int, default=10_000)
    parser.add_argument("--probes", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows: list[tuple[str, str]] = []

    for sy in (True, False):
        body = _document(sy)
        us = _per_call(lambda body=body: publisher_hints(body), 20_000)
        whole = _per_call(lambda body=body: parse_document(body, url="http://blog.test/feed"), 500)
        rows.append((f"`publisher_hints`, {len(body):,}-byte RSS {'with' if sy else 'without'} the module",
                     f"{us:.1f} µs per document (its whole parse: {whole:,.0f} µs)"))

    # Probes: each feed probed every `gap` chronons; Poisson counts at its rate, a quarter of the
    # feeds' rates times 4 from the middle of their probes on.
    feeds = args.feeds
    rate = np.exp(rng.uniform(math.log(0.01), math.log(0.5), feeds))
    gap = rng.integers(1, 20, feeds)
    per_feed = max(args.probes // feeds, 2)
    shifted = rng.uniform(size=feeds) < 0.25
    order = np.repeat(np.arange(feeds), per_feed)
    step = np.tile(np.arange(per_feed), feeds)
    lam = rate[order] * np.where(shifted[order] & (step >= per_feed // 2), 4.0, 1.0)
    counts = rng.poisson(lam * gap[order]).tolist()
    resources, gaps, beliefs = order.tolist(), gap[order].astype(float).tolist(), rate[order].tolist()
    detector = ShiftDetector()
    found: dict[int, int] = {}
    t0 = time.perf_counter()
    for r, d, k, b in zip(resources, gaps, counts, beliefs, strict=True):
        if detector.observe(r, d, k, b) is not None:
            found.setdefault(r, 0)
            found[r] += 1
    us = (time.perf_counter() - t0) / len(resources) * 1e6
    hits = sum(1 for r in found if shifted[r])
    false = sum(1 for r in found if not shifted[r])
    rows.append((f"`ShiftDetector.observe`, {len(resources):,} probes of {feeds:,} feeds ({per_feed} each)",
                 f"{us:.2f} µs per probe; shifts found on {hits} of {int(shifted.sum())} shifted feeds, "
                 f"alarms on {false} of {feeds - int(shifted.sum())} steady ones"))

    n = rng.poisson(5.0, feeds).astype(float)
    exposure = rng.uniform(10.0, 200.0, feeds)
    unseen = rng.uniform(0.0, 50.0, feeds)
    said = np.where(rng.uniform(size=feeds) < 0.5, rate, math.nan)
    plain = _per_call(lambda: pooled_rates(n, exposure, 8.0, 2.0, unseen=unseen, fade=2.0), 50)
    prior = _per_call(lambda: pooled_rates(n, exposure, 8.0, 2.0, unseen=unseen, fade=2.0, prior=said), 50)
    rows.append((f"`pooled_rates` over {feeds:,} feeds, half with a prior",
                 f"{prior / feeds * 1e3:.0f} ns per feed and chronon against {plain / feeds * 1e3:.0f} ns without"))

    print(f"Python {platform.python_version()}, {platform.machine()}")
    print()
    print("| what | cost |")
    print("|---|---|")
    for what, cost in rows:
        print(f"| {what} | {cost} |")


if __name__ == "__main__":
    main()
