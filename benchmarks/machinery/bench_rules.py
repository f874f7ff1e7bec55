"""Time the trigger evaluator's hot paths; write docs/bench-rules.md.

* compile: validate a profile body (pydantic) and install it in the evaluator;
* tick: ``on_tick`` in steady state with ``--rules`` temporal trigger rules
  (every 3..62 minutes, 60 s chronons), per tick and per opened CEI;
* probe: ``on_probe`` of a trigger feed watched by ``--fanout`` rules with
  keyword or regex conditions, the probe finding 20 new entries;
* ping: ``on_notification`` driving ``--rules`` AuctionWatch(3) rules over
  1,000 feeds.

Usage: .venv/bin/python benchmarks/machinery/bench_rules.py [--rules 20000] [--fanout 100] [--out docs/bench-rules.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from proxy.rules import ChrononGrid, ProfileSpec, TriggerEvaluator

GRID = ChrononGrid(datetime(2026, 1, 5, tzinfo=UTC), 60.0)
FEEDS = 1000


@dataclass(frozen=True)
class Entry:
    title: str | None
    summary: str | None
    content: str | None
    published: datetime | None = None


def resolve(feed_id: str) -> int:
    return int(feed_id[1:])


def trigger_body(i: int) -> dict[str, object]:
    return {
        "name": f"profile {i}",
        "rules": [
            {
                "name": "oil news",
                "trigger": {
                    "feed": f"F{i % FEEDS}",
                    "every": f"{3 + i % 60}m",
                    "slack": "2m",
                    "when": {"contains": ["oil", "gas"]},
                },
                "query": [
                    {"feed": f"F{(i + 1) % FEEDS}", "within": "10m"},
                    {"feed": f"F{(i + 2) % FEEDS}", "overwrite": True},
                ],
            }
        ],
    }


def bench_compile_and_tick(rules: int) -> dict[str, float]:
    ev = TriggerEvaluator(GRID)
    t0 = time.perf_counter()
    for i in range(rules):
        ev.add_profile(f"p{i}", ProfileSpec.model_validate(trigger_body(i)), resolve)
    compile_s = time.perf_counter() - t0
    ev.on_tick(0)  # every rule anchors and fires at once: not the steady state
    ticks, opened = 200, 0
    t0 = time.perf_counter()
    for t in range(1, ticks + 1):
        opened += sum(1 for op in ev.on_tick(t) if type(op).__name__ == "OpenCei")
    tick_s = time.perf_counter() - t0
    return {
        "compile_us": compile_s / rules * 1e6,
        "tick_ms": tick_s / ticks * 1e3,
        "opened_per_tick": opened / ticks,
        "us_per_open": tick_s / max(opened, 1) * 1e6,
    }


def bench_probe(fanout: int) -> dict[str, float]:
    ev = TriggerEvaluator(GRID)
    for i in range(fanout):
        when = {"contains": ["oil", "opec", f"kw{i}"]} if i % 2 else {"regex": rf"\b(crude|brent) {i}\b"}
        body = {
            "name": "p",
            "rules": [
                {
                    "name": "r",
                    "trigger": {"feed": "F0", "every": "1m", "slack": "0s", "when": when},
                    "query": [{"feed": "F1", "within": "10m"}],
                }
            ],
        }
        ev.add_profile(f"p{i}", ProfileSpec.model_validate(body), resolve)
    text = "Markets moved today as analysts weighed the outlook. " * 8
    entries = [Entry(f"Post {j} about markets", text, text) for j in range(20)]
    probes = 300
    elapsed = 0.0
    for t in range(probes):
        ev.on_tick(t)  # opens one CEI per rule, decided by the probe below
        t0 = time.perf_counter()
        ev.on_probe(0, t, True, entries, previous_success=t - 1 if t else None)
        elapsed += time.perf_counter() - t0
    # Probes between the rules' checks (another rule's, the background's, a poll): nothing is
    # decided; each rule remembers whether the new entries met its condition, for its next check.
    # None does here: every rule reads every entry, the worst case.
    between = 0.0
    for t in range(probes, 2 * probes):
        t0 = time.perf_counter()
        ev.on_probe(0, t, True, entries, previous_success=t - 1)
        between += time.perf_counter() - t0
    return {"probe_ms": elapsed / probes * 1e3, "us_per_rule": elapsed / probes / fanout * 1e6,
            "between_us": between / probes * 1e6}


def bench_pings(rules: int) -> dict[str, float]:
    ev = TriggerEvaluator(GRID)
    for i in range(rules):
        feeds = [f"F{(i + d * 7) % FEEDS}" for d in range(3)]
        body = {"name": "w", "rules": [{"name": "w", "watch": {"feeds": feeds, "within": "10m"}}]}
        ev.add_profile(f"w{i}", ProfileSpec.model_validate(body), resolve)
    pings, ops = 0, 0
    t0 = time.perf_counter()
    for t in range(100):
        for r in range((t * 37) % FEEDS, FEEDS, 10):  # ~100 feeds update per chronon
            ops += len(ev.on_notification(r, t))
            pings += 1
    elapsed = time.perf_counter() - t0
    return {"us_per_ping": elapsed / pings * 1e6, "ops_per_ping": ops / pings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=20_000)
    parser.add_argument("--fanout", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("docs/bench-rules.md"))
    args = parser.parse_args()

    tick = bench_compile_and_tick(args.rules)
    probe = bench_probe(args.fanout)
    ping = bench_pings(args.rules)
    cmd = f".venv/bin/python benchmarks/machinery/bench_rules.py --rules {args.rules} --fanout {args.fanout}"
    lines = [
        "# Trigger evaluator benchmark",
        "",
        f"Command: `{cmd}`  ",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, shared 2-core box, "
        f"load average {os.getloadavg()[0]:.1f} at the end of the run (figures are indicative).",
        "",
        "| measurement | value |",
        "|---|---|",
        f"| validate + install one trigger profile | {tick['compile_us']:.0f} µs |",
        f"| `on_tick`, {args.rules:,} temporal rules, steady state | {tick['tick_ms']:.2f} ms per tick "
        f"({tick['opened_per_tick']:.0f} CEIs opened per tick, {tick['us_per_open']:.1f} µs per CEI) |",
        f"| `on_probe`, 20 new entries, {args.fanout} rules on the feed (keywords / regex) | "
        f"{probe['probe_ms']:.2f} ms per probe ({probe['us_per_rule']:.1f} µs per rule) |",
        f"| `on_probe` between the rules' checks, the same 20 entries (matching none) read for {args.fanout} "
        "rules' next check | "
        f"{probe['between_us']:.0f} µs per probe |",
        f"| `on_notification`, {args.rules:,} AuctionWatch(3) rules over {FEEDS:,} feeds | "
        f"{ping['us_per_ping']:.1f} µs per ping ({ping['ops_per_ping']:.1f} ops per ping) |",
        "",
        "Temporal rules wait in a heap keyed by their next fire chronon, so a tick costs",
        "the rules that are due, not one visit per installed rule. `on_probe` is dominated",
        "by the regex search, on RE2 since issue 24 (half the rules use a `\\b(crude|brent) N\\b` pattern over",
        "three ~500-character fields of 20 entries); entry texts are casefolded once per probe.",
        "A probe between a rule's checks reads its new entries for the rule's next check, which",
        "then only looks up whether one met its condition (`docs/rules.md`, \"A check reads what",
        "is new since the rule's last check\"): each new entry is matched once per rule either way.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
