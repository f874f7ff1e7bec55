"""Every online policy against the exact optimum over the main paper's parameter ranges.

Writes ``docs/policies.md``'s tables (between the ``sweep:begin``/``sweep:end``
markers, so the prose around them is kept) and ``docs/img/policies_*.png``.

Points vary one Table 1 parameter at a time around the baseline (n=1000,
m=100, K=1000, λ=20, rank ≤ 3, window(10), C=1, α=β=0), plus the settings the
issue names (n=400/C=2/W=20; λ=50/β=1; exact rank 5 with width-1 EIs).

The yardstick per workload is ``optimal`` with a time limit; when HiGHS does
not prove optimality in time the share is taken of ``floor(bound)`` (an upper
bound on the optimum), so a share is never flattering, and the table says how
many seeds were not proven.  Results are cached in ``docs/policies_sweep.csv``
(one row per point, seed and policy, the optimum included): re-running only
computes what is missing, and ``--refresh POLICY`` recomputes one policy.

Usage::

    .venv/bin/python benchmarks/policies/policy_sweep.py [--seeds 10] [--time-limit 20]
        [--only-optimum] [--policies a,b] [--refresh new-policy] [--no-docs]
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from proxy.sim.generate import GenParams, Life, generate
from proxy.sim.run import simulate

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "docs" / "policies_sweep.csv"
DOC = ROOT / "docs" / "policies.md"
IMG = ROOT / "docs" / "img"
BEGIN, END = "<!-- sweep:begin -->", "<!-- sweep:end -->"

BASE = GenParams()

#: (label, group for the plots, overrides of the baseline).
POINTS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("baseline", "baseline", {}),
    ("rank≤1", "rank", {"rank": 1}),
    ("rank≤2", "rank", {"rank": 2}),
    ("rank≤4", "rank", {"rank": 4}),
    ("rank≤5", "rank", {"rank": 5}),
    ("λ=10", "lam", {"lam": 10.0}),
    ("λ=30", "lam", {"lam": 30.0}),
    ("λ=50", "lam", {"lam": 50.0}),
    ("α=1", "alpha", {"alpha": 1.0}),
    ("α=2", "alpha", {"alpha": 2.0}),
    ("β=1", "beta", {"beta": 1.0}),
    ("β=2", "beta", {"beta": 2.0}),
    ("C=2", "budget", {"budget": 2}),
    ("C=5", "budget", {"budget": 5}),
    ("W=0", "window", {"window": 0}),
    ("W=20", "window", {"window": 20}),
    ("overwrite", "life", {"life": Life.OVERWRITE}),
    ("n=400,C=2,W=20", "issue", {"resources": 400, "budget": 2, "window": 20}),
    ("λ=50,β=1", "issue", {"lam": 50.0, "beta": 1.0}),
    ("rank=5 exact,W=0", "issue", {"rank": 5, "exact_rank": True, "window": 0}),
)

#: The issue's large overloaded setting: no optimum (the LP alone takes ~10 min), raw completeness.
LARGE = ("n=2000,m=2500,λ=50,C=5", {"resources": 2000, "profiles": 2500, "lam": 50.0, "budget": 5})
LBEGIN, LEND = "<!-- large:begin -->", "<!-- large:end -->"

FIELDS = ("point", "seed", "policy", "captured", "total", "runtime_s", "status", "bound", "lp_bound")


def load_cache() -> dict[tuple[str, int, str], dict[str, str]]:
    if not CACHE.exists():
        return {}
    with CACHE.open(encoding="utf-8", newline="") as fh:
        return {(r["point"], int(r["seed"]), r["policy"]): r for r in csv.DictReader(fh)}


def save_cache(rows: dict[tuple[str, int, str], dict[str, str]]) -> None:
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    order = {label: i for i, (label, _, _) in enumerate(POINTS)}
    tmp = CACHE.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for key in sorted(rows, key=lambda k: (order.get(k[0], 99), k[1], k[2])):
            w.writerow({f: rows[key].get(f, "") for f in FIELDS})
    tmp.replace(CACHE)


def default_policies() -> list[str]:
    from proxy.core.policies import policy_names

    return [p for p in policy_names() if p != "round-robin"]


def run(seeds: Sequence[int], policies: Sequence[str], time_limit: float, only_optimum: bool,
        refresh: Sequence[str], labels: Sequence[str] | None) -> dict[tuple[str, int, str], dict[str, str]]:
    rows = load_cache()
    for key in [k for k in rows if k[2] in refresh and (not labels or k[0] in labels)]:
        del rows[key]
    for label, _, over in POINTS:
        if labels and label not in labels:
            continue
        params = replace(BASE, **over)  # type: ignore[arg-type]
        for seed in seeds:
            need_opt = (label, seed, "optimal") not in rows
            opt_row = rows.get((label, seed, "optimal"))
            need_lp = opt_row is not None and opt_row["status"] != "optimal" and not opt_row.get("lp_bound")
            need = [] if only_optimum else [p for p in policies if (label, seed, p) not in rows]
            if not need_opt and not need and not need_lp:
                continue
            wl = generate(params, seed)
            if need_opt:
                res = simulate(wl, "optimal", time_limit=time_limit)
                rows[(label, seed, "optimal")] = {
                    "point": label, "seed": str(seed), "policy": "optimal",
                    "captured": str(res.captured), "total": str(res.total),
                    "runtime_s": f"{res.runtime_s:.3f}", "status": str(res.extra.get("status", "")),
                    "bound": str(res.extra.get("bound", "")),
                }
                print(f"{label} seed {seed}: optimal {res.captured} ({res.extra.get('status')}, "
                      f"bound {res.extra.get('bound')}) in {res.runtime_s:.1f} s", flush=True)
                need_lp = res.extra.get("status") != "optimal"
            if need_lp:
                # Unproven: the LP relaxation's bound is usually far tighter than
                # HiGHS's bound after a short branch and bound (or its trivial one).
                lp = simulate(wl, "lp-bound", time_limit=max(60.0, 3 * time_limit))
                lp_b = lp.extra.get("bound", "") if lp.extra.get("status") == "lp-bound" else ""
                rows[(label, seed, "optimal")]["lp_bound"] = str(lp_b)
                print(f"{label} seed {seed}: lp bound {lp_b} in {lp.runtime_s:.1f} s", flush=True)
            if need_opt or need_lp:
                save_cache(rows)
            for p in need:
                res = simulate(wl, p)
                rows[(label, seed, p)] = {
                    "point": label, "seed": str(seed), "policy": p, "captured": str(res.captured),
                    "total": str(res.total), "runtime_s": f"{res.runtime_s:.3f}", "status": "", "bound": "",
                }
            if need:
                save_cache(rows)
                print(f"{label} seed {seed}: " + ", ".join(
                    f"{p} {rows[(label, seed, p)]['captured']}" for p in need), flush=True)
    return rows


def run_large(seeds: Sequence[int], policies: Sequence[str],
              rows: dict[tuple[str, int, str], dict[str, str]]) -> str:
    """Run the large setting (cached like the rest) and return its markdown table."""
    label, over = LARGE
    params = replace(BASE, **over)  # type: ignore[arg-type]
    for seed in seeds:
        need = [p for p in policies if (label, seed, p) not in rows]
        if not need:
            continue
        wl = generate(params, seed)
        for p in need:
            res = simulate(wl, p)
            rows[(label, seed, p)] = {
                "point": label, "seed": str(seed), "policy": p, "captured": str(res.captured),
                "total": str(res.total), "runtime_s": f"{res.runtime_s:.3f}", "status": "", "bound": "",
            }
            print(f"{label} seed {seed}: {p} {res.captured} in {res.runtime_s:.1f} s", flush=True)
        save_cache(rows)
    out = ["| policy | seeds | mean captured | mean completeness | vs mrsf-p | mean run (s) |",
           "|---|---:|---:|---:|---:|---:|"]
    ref = [int(rows[(label, s, "mrsf-p")]["captured"]) for s in seeds if (label, s, "mrsf-p") in rows]
    for p in policies:
        got = [rows[(label, s, p)] for s in seeds if (label, s, p) in rows]
        if not got:
            continue
        cap = sum(int(r["captured"]) for r in got) / len(got)
        comp = sum(int(r["captured"]) / int(r["total"]) for r in got) / len(got)
        rt = sum(float(r["runtime_s"]) for r in got) / len(got)
        vs = f"{cap / (sum(ref) / len(ref)):.3f}" if ref else ""
        out.append(f"| `{p}` | {len(got)} | {cap:.0f} | {comp:.4f} | {vs} | {rt:.1f} |")
    return "\n".join(out)


def invocation(script: str, argv: Sequence[str] | None) -> tuple[str, str]:
    """The command line to cite for ``script`` run with ``argv``, and the time of the run."""
    cmd = " ".join([f"benchmarks/policies/{script}", *(argv if argv is not None else sys.argv[1:])])
    return f".venv/bin/python {cmd}", time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def publish(begin: str, end: str, body: str, write: bool) -> None:
    """Print ``body`` and, if ``write``, put it in ``docs/policies.md`` between the markers."""
    print(body)
    if write:
        replace_section(begin, end, body)


def replace_section(begin: str, end: str, body: str) -> None:
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Policies\n"
    a, b = text.find(begin), text.find(end)
    if a < 0 or b < 0:
        text = text.rstrip() + "\n\n" + begin + "\n" + end + "\n"
        a, b = text.find(begin), text.find(end)
    DOC.write_text(text[:a] + begin + "\n" + body + "\n" + end + text[b + len(end):], encoding="utf-8")


def yardstick(row: dict[str, str]) -> tuple[int, bool]:
    """The optimum's captured count if proven, else the floor of the tightest upper bound known."""
    if row["status"] == "optimal":
        return int(row["captured"]), True
    bounds = [float(row["bound"])]
    if row.get("lp_bound"):
        bounds.append(float(row["lp_bound"]))
    return max(int(row["captured"]), math.floor(min(bounds) + 1e-6)), False


def baseline_optima(cache: dict[tuple[str, int, str], dict[str, str]], seeds: Sequence[int]
                    ) -> dict[int, tuple[int, bool]]:
    """:func:`yardstick` of each baseline seed's cached optimum; ``ValueError`` naming a seed without one."""
    top = {}
    for s in seeds:
        row = cache.get(("baseline", s, "optimal"))
        if row is None:
            raise ValueError(f"no cached optimum for baseline seed {s}: run benchmarks/policies/policy_sweep.py first")
        top[s] = yardstick(row)
    return top


def tables(rows: dict[tuple[str, int, str], dict[str, str]], policies: Sequence[str],
           seeds: Sequence[int]) -> tuple[str, dict[str, dict[str, float]]]:
    """The markdown table of mean shares, and the means per point for plotting."""
    means: dict[str, dict[str, float]] = {}
    head = ["point", "seeds", "unproven", "opt. completeness", *policies, "best paper policy"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    paper = [p for p in policies if p.split("-")[0] in ("s", "mrsf", "m", "wic")]
    for label, _, _ in POINTS:
        shares: dict[str, list[float]] = defaultdict(list)
        comp: list[float] = []
        unproven = 0
        used = 0
        for seed in seeds:
            opt = rows.get((label, seed, "optimal"))
            if opt is None or not all((label, seed, p) in rows for p in policies):
                continue
            top, proven = yardstick(opt)
            if top <= 0:
                continue
            used += 1
            unproven += not proven
            comp.append(top / int(opt["total"]))
            for p in policies:
                shares[p].append(int(rows[(label, seed, p)]["captured"]) / top)
        if not used:
            continue
        m = {p: sum(v) / len(v) for p, v in shares.items()}
        means[label] = m
        best_paper = max(paper, key=lambda p: m[p]) if paper else ""
        top_value = max(m.values())
        cells = [label, str(used), str(unproven), f"{sum(comp) / len(comp):.3f}"]
        for p in policies:
            cell = f"{m[p]:.3f}"
            cells.append(f"**{cell}**" if m[p] == top_value else cell)
        cells.append(best_paper)
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out), means


def plots(means: dict[str, dict[str, float]], policies: Sequence[str]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    IMG.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    groups: dict[str, list[str]] = defaultdict(list)
    for label, group, _ in POINTS:
        if label in means:
            groups[group].append(label)
    for group, labels in groups.items():
        if group == "baseline":
            continue
        if group != "issue" and "baseline" in means:
            labels = ["baseline", *labels]
        fig, ax = plt.subplots(figsize=(7, 4))
        xs = range(len(labels))
        for p in policies:
            ax.plot(xs, [means[lbl][p] for lbl in labels], marker="o", label=p,
                    linewidth=2.5 if p not in _PAPER else 1.2)
        ax.set_xticks(list(xs), labels, rotation=15)
        ax.set_ylabel("captured CEIs / optimum")
        ax.set_title(f"Share of the optimum, varying {group}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        name = f"policies_{group}.png"
        fig.savefig(IMG / name, dpi=90)
        plt.close(fig)
        written.append(name)
    return written


_PAPER = ("s-edf-np", "s-edf-p", "mrsf-np", "mrsf-p", "m-edf-np", "m-edf-p", "wic")


def write_doc(table: str, images: Sequence[str], seeds: Sequence[int], time_limit: float, cmd: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    body = [
        BEGIN,
        f"Command: `{cmd}` (run {stamp}; seeds {seeds[0]}..{seeds[-1]}; `optimal` time limit "
        f"{time_limit:g} s; raw rows in `docs/policies_sweep.csv`).",
        "",
        "Mean over seeds of captured CEIs / optimum (bold: best).  `unproven`: seeds where HiGHS did "
        "not prove optimality in the time limit, whose share is taken of the floor of the tightest upper "
        "bound known instead (branch and bound's, or the LP relaxation's), so those shares are lower "
        "estimates.  `opt. completeness`: the yardstick's own "
        "completeness (captured / all CEIs).",
        "",
        table,
        "",
        *[f"![{name}](img/{name})" for name in images],
        END,
    ]
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else f"# Policies\n\n{BEGIN}\n{END}\n"
    a, b = text.find(BEGIN), text.find(END)
    if a < 0 or b < 0:
        text = text.rstrip() + "\n\n" + BEGIN + "\n" + END + "\n"
        a, b = text.find(BEGIN), text.find(END)
    DOC.write_text(text[:a] + "\n".join(body) + text[b + len(END):], encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    global CACHE  # --cache lets two processes fill separate files, merged later
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="seeds 1..N per point (default 10)")
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds per optimum solve")
    ap.add_argument("--only-optimum", action="store_true", help="fill the optimum cache only")
    ap.add_argument("--policies", default="", help="comma-separated (default: every registered but round-robin)")
    ap.add_argument("--refresh", default="", help="comma-separated policies to recompute (at --points only, if given)")
    ap.add_argument("--points", default="", help="comma-separated point labels (default: all)")
    ap.add_argument("--first-seed", type=int, default=1, help="seeds FIRST..N (to split work between processes)")
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"CSV cache (default {CACHE.relative_to(ROOT)})")
    ap.add_argument("--large", type=int, default=0, help="also run the large setting on seeds 1..N")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/policies.md or plots")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error(f"--seeds must be >= 1, got {args.seeds}")
    CACHE = args.cache
    seeds = list(range(args.first_seed, args.seeds + 1))
    policies = [p for p in args.policies.split(",") if p] or default_policies()
    refresh = [p for p in args.refresh.split(",") if p]
    labels = [p for p in args.points.split(",") if p] or None
    if labels:
        unknown = set(labels) - {lbl for lbl, _, _ in POINTS}
        if unknown:
            ap.error(f"unknown point(s) {sorted(unknown)}; valid: {[lbl for lbl, _, _ in POINTS]}")
    rows = run(seeds, policies, args.time_limit, args.only_optimum, refresh, labels)
    if args.large:
        large = run_large(list(range(1, args.large + 1)), policies, rows)
        print(large)
        if not args.no_docs:
            stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            replace_section(LBEGIN, LEND, f"Setting {LARGE[0]} (K=1000, rank ≤ 3, window(10)); run {stamp} "
                            f"with `--large {args.large}`.\n\n" + large)
    if args.only_optimum or args.no_docs:
        return 0
    table, means = tables(rows, policies, seeds)
    print(table)
    images = plots(means, policies)
    cmd = "python " + " ".join(["benchmarks/policies/policy_sweep.py", *(argv if argv is not None else sys.argv[1:])])
    write_doc(table, images, seeds, args.time_limit, cmd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
