"""Time and check the per-feed update models; write the figures section of docs/discovery.md.

A synthetic population of ``--feeds`` feeds (half Poisson with rates
log-uniform in 0.1..10 per hour, a third office-hours seasonal, the rest
daily digests at a random minute ± 10 min), a fifth of them without usable
dates (their probes are censored). Each feed is fetched once (a document with
its last 20 entries), then probed at its own fixed interval (5..60 min) until
``--probes`` probes in all. Measured: µs per ``observe_probe`` (learning,
model choices and population refits included), µs per ``estimate`` and per
``expected_updates``, the saved snapshot's size and the time to restore it, and how
well the rates and the kinds are recovered.

Usage: .venv/bin/python benchmarks/machinery/bench_update_models.py [--feeds 10000] [--probes 1000000] [--out docs/discovery.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from pathlib import Path

import numpy as np

from proxy.rules import FeedUpdateModels

HOUR, DAY, WEEK = 3600.0, 86_400.0, 604_800.0
T0 = 1_767_225_600.0  # 2026-01-01T00:00Z
MONDAY = 345_600.0
START, END = "<!-- bench_update_models:start -->", "<!-- bench_update_models:end -->"


def population(n: int, span: float, rng: np.random.Generator) -> list[tuple[str, float, np.ndarray, bool]]:
    """(kind, true mean rate per hour, update times, dated) for each feed, over [T0 - 30 days, T0 + span]."""
    feeds = []
    lo, hi = T0 - 30 * DAY, T0 + span
    for i in range(n):
        u = rng.random()
        if u < 0.5:
            rate = float(np.exp(rng.uniform(np.log(0.1), np.log(10.0)))) / HOUR
            k = rng.poisson(rate * (hi - lo))
            times, kind, mean = np.sort(rng.uniform(lo, hi, k)), "poisson", rate
        elif u < 0.83:
            rate = float(np.exp(rng.uniform(np.log(0.5), np.log(6.0)))) / HOUR
            k = rng.poisson(rate * (hi - lo))
            t = np.sort(rng.uniform(lo, hi, k))
            r = (t - MONDAY) % WEEK
            times = t[(r // DAY < 5) & ((r % DAY) >= 9 * HOUR) & ((r % DAY) < 17 * HOUR)]
            kind, mean = "seasonal", rate * 40 / 168
        else:
            phase = rng.uniform(0, DAY)
            days = np.arange(np.floor((lo - phase) / DAY), np.ceil((hi - phase) / DAY))
            t = phase + days * DAY + rng.normal(0, 600, days.size)
            times, kind, mean = np.sort(t[(t > lo) & (t < hi)]), "periodic", 1 / DAY
        feeds.append((kind, mean * HOUR, times, i % 5 != 0))
    return feeds


def run(n_feeds: int, n_probes: int, seed: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    per_feed = max(1, n_probes // n_feeds)
    intervals = rng.uniform(5 * 60, 60 * 60, n_feeds)
    span = float(intervals.max()) * per_feed
    feeds = population(n_feeds, span, rng)
    models = FeedUpdateModels()
    t_obs = 0.0
    for i, (_, _, times, dated) in enumerate(feeds):
        first = times[times <= T0][-20:]
        models.observe_document(i, T0, [float(x) for x in first] if dated else [])
    calls = 0
    last = [T0] * n_feeds
    for j in range(1, per_feed + 1):
        for i, (_, _, times, dated) in enumerate(feeds):
            b = T0 + j * intervals[i]
            a = last[i]
            lo, hi = np.searchsorted(times, [a, b], side="right")
            new = [float(x) for x in times[lo:hi]] if dated else []
            t = time.perf_counter()
            models.observe_probe(i, a, b, int(hi - lo), new)
            t_obs += time.perf_counter() - t
            last[i] = b
            calls += 1
    t = time.perf_counter()
    estimates = [models.estimate(i) for i in range(n_feeds)]
    t_est = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(n_feeds):
        models.expected_updates(i, last[i], last[i] + HOUR)
    t_exp = time.perf_counter() - t
    # What the leader saves every five minutes, and what a restart or an API replica reads back.
    t = time.perf_counter()
    text = json.dumps(models.snapshot())
    t_save = time.perf_counter() - t
    data = json.loads(text)
    t = time.perf_counter()
    FeedUpdateModels().restore(data)
    t_restore = time.perf_counter() - t
    errors: dict[str, list[float]] = {}
    chosen: dict[str, dict[str, int]] = {}
    for (kind, mean, _, dated), est in zip(feeds, estimates, strict=True):
        label = f"{kind} ({'dated' if dated else 'undated'})"
        errors.setdefault(label, []).append(abs(est.rate_per_hour / mean - 1))
        chosen.setdefault(label, {}).setdefault(est.kind, 0)
        chosen[label][est.kind] += 1
    return {
        "probe_us": 1e6 * t_obs / calls, "calls": calls, "estimate_us": 1e6 * t_est / n_feeds,
        "expected_us": 1e6 * t_exp / n_feeds, "errors": errors, "chosen": chosen,
        "prior": models.prior, "per_feed": per_feed,
        "snapshot_mb": len(text.encode()) / 1e6, "save_s": t_save, "restore_s": t_restore,
    }


def render(args: argparse.Namespace, r: dict[str, object]) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        START,
        f"Command: `.venv/bin/python benchmarks/machinery/bench_update_models.py --feeds {args.feeds} --probes {args.probes}`  ",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, load average {load:.1f} at the end of the run "
        "(figures are indicative).",
        "",
        "| measurement | value |",
        "|---|---|",
        f"| `observe_probe`, {r['calls']:,} probes over {args.feeds:,} feeds (model choices and population refits included) | {r['probe_us']:.1f} µs per probe |",
        f"| `estimate` (one per feed, after the run) | {r['estimate_us']:.1f} µs |",
        f"| `expected_updates` over the next hour | {r['expected_us']:.1f} µs |",
        f"| `snapshot` as JSON (what the leader saves every five minutes) | {r['snapshot_mb']:.1f} MB in {r['save_s']:.2f} s |",
        f"| `restore` from the parsed JSON (a restart; an API replica, at most once a minute) | {r['restore_s']:.2f} s |",
        "",
        f"Rate recovery after {r['per_feed']} probes per feed (relative error of `rate_per_hour` against the true mean rate) "
        "and the kinds chosen:",
        "",
        "| feeds | n | median error | 90th percentile | kinds chosen |",
        "|---|---|---|---|---|",
    ]
    errors = r["errors"]
    chosen = r["chosen"]
    assert isinstance(errors, dict) and isinstance(chosen, dict)
    for label in sorted(errors):
        e = np.asarray(errors[label])
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(chosen[label].items(), key=lambda kv: -kv[1]))
        lines.append(f"| {label} | {e.size} | {np.median(e):.1%} | {np.quantile(e, 0.9):.1%} | {kinds} |")
    prior = r["prior"]
    lines += ["", f"Population prior at the end: {prior!r} (mean {prior.mean * HOUR:.2f} updates per hour).", END]  # type: ignore[attr-defined]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--feeds", type=int, default=10_000)
    parser.add_argument("--probes", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--out", type=Path, default=Path("docs/discovery.md"))
    args = parser.parse_args()
    result = run(args.feeds, args.probes, args.seed)
    section = render(args, result)
    print(section)
    page = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
    if START in page and END in page:
        page = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: section, page, flags=re.S)
    else:
        page = page.rstrip("\n") + "\n\n" + section + "\n"
    args.out.write_text(page, encoding="utf-8")


if __name__ == "__main__":
    main()
