"""Cut real-looking traces from a real one: random samples of its feeds, each feed's rows kept whole.

Written for ``docs/discovery.md`` ("Out of sample"): an unseen real trace is
more like ours than like the synthetic ones (a snapshot of each feed's last
entries, heavy-tailed rates, bursts, date-only stamps), so samples of ours
stand in for traces that chose no setting. Sample ``SEED`` keeps
``round(FRACTION * feeds)`` feeds drawn by ``random.Random(SEED)`` from the
sorted feed ids, so the same options give the same files.

    .venv/bin/python benchmarks/policies/policy_trace_samples.py ../shared/traces/real_feeds_items.csv \\
        --fraction 0.4 --fraction 0.6 --fraction 0.8 --seeds 100-119 --out-dir /tmp/subs

writes ``/tmp/subs/s40_100.csv`` … ``s80_119.csv`` (the header and rows as
in the source, rows of kept feeds only, in their order).
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path


def seeds(text: str) -> list[int]:
    """``"100-119"`` or ``"3"`` as a list of seeds."""
    first, _, last = text.partition("-")
    lo, hi = int(first), int(last or first)
    if hi < lo:
        raise argparse.ArgumentTypeError(f"empty seed range {text!r}")
    return list(range(lo, hi + 1))


def fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"a fraction must be in (0, 1], got {text!r}")
    return value


def sample(rows: list[list[str]], share: float, seed: int) -> list[list[str]]:
    """The rows of ``round(share * feeds)`` feeds (at least one), drawn by ``seed``."""
    feeds = sorted({row[0] for row in rows})
    keep = set(random.Random(seed).sample(feeds, max(1, round(share * len(feeds)))))
    return [row for row in rows if row[0] in keep]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a trace CSV (feed_id,timestamp_utc_iso)")
    parser.add_argument("--fraction", type=fraction, action="append", required=True,
                        help="share of the feeds to keep (repeatable)")
    parser.add_argument("--seeds", type=seeds, default=[0], help="a seed or a range A-B (default 0)")
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    with args.trace.open(newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    rows = [row for row in rows if row]
    if not rows:
        print(f"error: {args.trace} has no rows", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for share in args.fraction:
        for seed in args.seeds:
            out = args.out_dir / f"s{round(share * 100)}_{seed}.csv"
            with out.open("w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f, lineterminator="\n")
                writer.writerow(header)
                writer.writerows(sample(rows, share, seed))
            print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
