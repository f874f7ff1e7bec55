"""Time ``select`` of the new policies against MRSF(P) over a million active CEIs.

Reuses ``bench_select.build_large`` (every EI active at the measured chronon)
and writes its table into ``docs/policies.md`` between the ``speed:begin`` and
``speed:end`` markers.  Target (issue "Beyond the paper"): under 100 ms.

``--load`` sets the engine's recent capture share before timing, through the
engine's own API: ``heavy`` (the default) resolves 60 empty CEIs as missed, so
``adm-edf`` runs its heavy-load rules (the costliest path); ``light`` captures
60 one-EI CEIs on resource 0 (which also captures the pool's few EIs there);
``none`` leaves the share unknown, as on a fresh service.

Usage: .venv/bin/python benchmarks/machinery/bench_select_new.py [--ceis 1000000] [--policies adm-edf,mrsf-p] [--load heavy]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_select import build_large, time_select  # a sibling script, not a package

from proxy.core.engine import SHARE_MIN_RESOLVED, Engine

DOC = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
BEGIN, END = "<!-- speed:begin -->", "<!-- speed:end -->"


def set_load(eng: Engine, load: str) -> None:
    """Give ``eng`` a recent capture share of 0 (``heavy``) or 1 (``light``), or leave it unknown."""
    if load == "none":
        return
    for i in range(SHARE_MIN_RESOLVED + 10):
        if load == "heavy":
            eng.add_cei(f"load{i}", "p", [], sealed=False)
            eng.seal(f"load{i}")  # a CEI sealed without EIs resolves as missed
        else:
            eng.add_cei(f"load{i}", "p", [(0, eng.now, eng.now)])
    if load == "light":
        eng.probe([0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ceis", type=int, default=1_000_000)
    ap.add_argument("--resources", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--budgets", default="1,10,100")
    ap.add_argument("--policies", default="adm-edf,mrsf-p,m-edf-p,wic")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--load", choices=("heavy", "light", "none"), default="heavy")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    policies = [p for p in args.policies.split(",") if p]

    eng, build, _ = build_large(args.ceis, args.resources, args.window, args.seed)
    set_load(eng, args.load)
    cands = len(eng.cei_candidates())
    lines = [
        BEGIN,
        f"Command: `.venv/bin/python benchmarks/machinery/bench_select_new.py --ceis {args.ceis} "
        f"--resources {args.resources} --window {args.window} --budgets {args.budgets} "
        f"--policies {args.policies} --load {args.load}` "
        f"(run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, Python {platform.python_version()}, 2 cores shared with other work).",
        "",
        f"{args.ceis:,} pending CEIs (rank 1..3), {cands:,} active candidate EIs over {args.resources:,} "
        f"resources, windows 1..{args.window} (pool built in {build:.0f} s).  Cells: median of "
        f"{args.repeat} `Engine.select` calls (best in parentheses); recent capture share "
        f"{eng.capture_share()} (`--load {args.load}`).  Target: under 100 ms.",
        "",
        "| policy | " + " | ".join(f"C={b}" for b in budgets) + " |",
        "|---|" + "---:|" * len(budgets),
    ]
    for policy in policies:
        cells = []
        for b in budgets:
            med, best, chosen = time_select(eng, policy, b, args.repeat)
            assert len(chosen) == b, (policy, b, len(chosen))
            cells.append(f"{med * 1e3:.1f} ms ({best * 1e3:.1f})")
            print(f"{policy:10s} C={b:<4d} median {med * 1e3:7.1f} ms best {best * 1e3:7.1f} ms", flush=True)
        lines.append(f"| `{policy}` | " + " | ".join(cells) + " |")
    lines.append(END)
    if args.no_docs:
        return
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Policies\n"
    a, b = text.find(BEGIN), text.find(END)
    if a < 0 or b < 0:
        text = text.rstrip() + "\n\n" + BEGIN + "\n" + END + "\n"
        a, b = text.find(BEGIN), text.find(END)
    DOC.write_text(text[:a] + "\n".join(lines) + text[b + len(END):], encoding="utf-8")
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
