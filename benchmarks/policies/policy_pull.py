"""Pull-only discovery in the simulator: paper 002's SUP/fbSUP results, policies and background allocations.

Writes the tables between the ``policy_pull`` markers of docs/discovery-sim.md
and the plots docs/img/discovery_sup_wic.png and docs/img/discovery_alloc.png.

Experiments (``--only`` picks some; ``--tiny`` shrinks every size for a smoke test):

* ``sup-wic`` — paper 002 §4.5 (Figure 4): SUP against WIC on the weekly
  synthetic trace ("Synthetic Data 2"), update models FPN(1.0) and Poisson;
  WIC's utility against its total probes C·K, SUP a single point.
* ``fbsup`` — paper 002 §5.3 (Figure 5): fbSUP against SUP, life overwrite,
  "Num Update Watch" with X = 1, 2, 3, 5, FPN(ρ) and Poisson models, on the
  real trace and the synthetic one.
* ``policies`` — every online policy pushed (pinged), pull-only, and the
  exact optimum, on a small Table 1 workload whose EIs start at updates.
* ``alloc`` — background allocations at equal budget: greedy index, WIC
  index, round-robin, paper 004's sqrt-rate, Cho & Garcia-Molina's
  freshness, capture-optimal, capture-optimal with exploration; known
  against learnt rates; capture-explore's sensitivity to its ε and z.

Run from the checkout: ``.venv/bin/python benchmarks/policies/policy_pull.py``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from proxy.core.rates import KnownRates, PlannedUpdates
from proxy.sim.generate import GenParams, Life, Reveal, generate
from proxy.sim.pull import Background, PullOptions, Rates, simulate_pull, updates_from_meta
from proxy.sim.run import simulate
from proxy.sim.synthetic import fpn_predictions, num_update_watch, trace_chronons, weekly_trace
from proxy.sim.traces import load_trace

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "discovery-sim.md"
IMG = ROOT / "docs" / "img"
TRACE = Path("/work/shared/traces/real_feeds_items.csv")
BEGIN, END = "<!-- policy_pull:begin -->", "<!-- policy_pull:end -->"


# A Table 1 workload small enough for the exact optimum in seconds, its EIs starting at updates.
TABLE1 = GenParams(resources=100, profiles=40, chronons=400, budget=1, lam=10.0, window=10, reveal=Reveal.UPDATE)


@dataclass(frozen=True)
class Sizes:
    feeds: int = 792
    chronons: int = 1000
    weeks: float = 4.0
    seeds: int = 3
    budgets: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)
    every: tuple[int, ...] = (1, 2, 3, 5)
    rhos: tuple[float, ...] = (1.0, 0.8, 0.5)
    window: int = 10
    trace_days: float = 30.0
    table1: GenParams = field(default_factory=lambda: TABLE1)
    alloc_budgets: tuple[int, ...] = (1, 3)
    optimum_limit: float = 60.0


TINY = Sizes(feeds=60, chronons=200, weeks=1.0, seeds=1, budgets=(1, 2, 4), every=(1, 2), rhos=(1.0, 0.5),
             table1=GenParams(resources=20, profiles=8, chronons=80, budget=1, lam=6.0, window=5,
                              reveal=Reveal.UPDATE),
             alloc_budgets=(1,), optimum_limit=10.0)


# ------------------------------------------------------------------ data sets


def synthetic(sz: Sizes, seed: int) -> tuple[list[list[int]], KnownRates]:
    """Update chronons of the weekly trace and its true (seasonal) rate model."""
    tr = weekly_trace(sz.feeds, seed, weeks=sz.weeks)
    ups = trace_chronons(tr, sz.chronons)
    per_chronon = [w * sz.weeks / sz.chronons for w in tr.weekly_rates]
    return ups, KnownRates(per_chronon, tr.shape.per_chronon(sz.chronons, sz.weeks))


def real(sz: Sizes) -> list[list[int]]:
    """The real trace's last ``trace_days`` days on K chronons (feeds that update in it)."""
    tr = load_trace(TRACE, sz.chronons, days=sz.trace_days)
    return [list(u) for u in tr.updates if u]


def utility(res_captured: int, total: int) -> float:
    """Paper 002's effective utility: the share of the EIs that the optimal SUP schedule (all of them) captures."""
    return res_captured / total if total else 0.0


# ------------------------------------------------------------------ experiments


def exp_sup_wic(sz: Sizes) -> tuple[list[list[object]], dict[str, object]]:
    rows: list[list[object]] = []
    curves: dict[str, list[tuple[float, float]]] = {}
    sup_points: dict[str, tuple[float, float]] = {}
    for model_name in ("FPN(1.0)", "Poisson"):
        sup_u, sup_p, wic_curve = [], [], {c: ([], []) for c in sz.budgets}
        for seed in range(sz.seeds):
            ups, seasonal = synthetic(sz, seed)
            wl = num_update_watch(ups, sz.chronons, window=sz.window, budget=sz.feeds)
            pred = PlannedUpdates(ups) if model_name == "FPN(1.0)" else seasonal
            r = simulate_pull(wl, "sup", PullOptions(background=Background.NONE, rate_model=seasonal,
                                                     predictor=pred, updates=ups))
            sup_u.append(utility(r.captured, r.total))
            sup_p.append(r.probes)
            for c in sz.budgets:
                wl_c = replace(wl, budget=type(wl.budget)(c))
                r = simulate_pull(wl_c, "wic", PullOptions(background=Background.WIC, rate_model=seasonal,
                                                           updates=ups))
                wic_curve[c][0].append(utility(r.captured, r.total))
                wic_curve[c][1].append(r.probes)
        su, sp = statistics.mean(sup_u), statistics.mean(sup_p)
        curve = [(statistics.mean(wic_curve[c][1]), statistics.mean(wic_curve[c][0])) for c in sz.budgets]
        need = probes_for(curve, su)
        rows.append([model_name, "SUP", f"{sp:.0f}", f"{su:.3f}", "", ""])
        for c, (p, u) in zip(sz.budgets, curve, strict=True):
            rows.append([model_name, f"WIC C={c}", f"{p:.0f}", f"{u:.3f}", "", ""])
        rows.append([model_name, "WIC for SUP's utility", "≈" + (f"{need:.0f}" if need else "> max"),
                     f"{su:.3f}", f"{need / sp:.1f}×" if need else f"> {curve[-1][0] / sp:.1f}×", ""])
        curves[model_name] = curve
        sup_points[model_name] = (sp, su)
    return rows, {"curves": curves, "sup": sup_points}


def probes_for(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """Probes at which the (probes, utility) curve reaches ``target``, linearly interpolated."""
    prev = (0.0, 0.0)
    for p, u in curve:
        if u >= target:
            p0, u0 = prev
            return p0 + (target - u0) * (p - p0) / (u - u0) if u > u0 else p
        prev = (p, u)
    return None


def exp_fbsup(sz: Sizes) -> list[list[object]]:
    rows: list[list[object]] = []
    datasets: list[tuple[str, int]] = [("RSS (real trace)", -1), ("Synthetic Data 2", 0)]
    for name, _ in datasets:
        for every in sz.every:
            for model_name in [*(f"FPN({r})" for r in sz.rhos), "Poisson"]:
                acc: dict[str, list[float]] = {"su": [], "fu": [], "sp": [], "fp": []}
                for seed in range(sz.seeds):
                    if name.startswith("RSS"):
                        ups = real(sz)
                        rates = KnownRates.from_counts([len(u) for u in ups], sz.chronons)
                    else:
                        ups, rates = synthetic(sz, seed)
                    wl = num_update_watch(ups, sz.chronons, every=every, life=Life.OVERWRITE, budget=len(ups))
                    if model_name == "Poisson":
                        pred: PlannedUpdates | KnownRates = rates
                    else:
                        rho = float(model_name[4:-1])
                        pred = PlannedUpdates(fpn_predictions(ups, rho, sz.chronons, np.random.default_rng(seed)))
                    for alg, key in (("sup", "s"), ("fbsup", "f")):
                        r = simulate_pull(wl, alg, PullOptions(background=Background.NONE, rate_model=rates,
                                                               predictor=pred, updates=ups))
                        acc[key + "u"].append(utility(r.captured, r.total))
                        acc[key + "p"].append(r.probes)
                su, fu = statistics.mean(acc["su"]), statistics.mean(acc["fu"])
                sp, fp = statistics.mean(acc["sp"]), statistics.mean(acc["fp"])
                rows.append([name, every, model_name, f"{su:.3f}", f"{fu:.3f}",
                             f"{100 * (fu - su) / su:+.0f} %" if su else "—", f"{sp:.0f}", f"{fp:.0f}",
                             f"{100 * (fp - sp) / sp:+.0f} %" if sp else "—"])
    return rows


def exp_policies(sz: Sizes) -> list[list[object]]:
    from proxy.core.optimum import optimal
    from proxy.core.policies import policy_names

    rows: list[list[object]] = []
    per: dict[str, dict[str, list[float]]] = {}
    opt: list[float] = []
    for seed in range(sz.seeds):
        wl = generate(sz.table1, seed)
        ups = updates_from_meta(wl)
        res = optimal(wl, time_limit=sz.optimum_limit)
        opt.append(res.objective / len(wl.ceis))
        for p in policy_names():
            d = per.setdefault(p, {"pushed": [], "pull-known": [], "pull-online": [], "pull+fbsup": []})
            d["pushed"].append(simulate(wl, p).completeness)
            d["pull-known"].append(simulate_pull(wl, p, PullOptions(updates=ups)).completeness)
            d["pull-online"].append(simulate_pull(wl, p, PullOptions(updates=ups, rates=Rates.ONLINE)).completeness)
            d["pull+fbsup"].append(simulate_pull(wl, p, PullOptions(updates=ups, planner="fbsup")).completeness)
    for p, d in per.items():
        rows.append([p, *(f"{statistics.mean(v):.3f}" for v in d.values())])
    rows.append(["optimal (offline, clairvoyant)", f"{statistics.mean(opt):.3f}", "", "", ""])
    return rows


ALLOC = (Background.GREEDY, Background.WIC, Background.ROUND_ROBIN, Background.SQRT, Background.FRESHNESS,
         Background.CAPTURE, Background.CAPTURE_EXPLORE)
# capture-explore's (z, ε) for the sensitivity table; (1.0, 0.2) is the default, (·, 0) has no floor.
EXPLORE = ((1.0, 0.0), (1.0, 0.05), (1.0, 0.1), (1.0, 0.2), (1.0, 0.3), (0.5, 0.2), (2.0, 0.2))
DATASETS = ("RSS (real trace)", "Synthetic Data 2")


def alloc_run(sz: Sizes, name: str, c: int, rates: Rates, bg: Background, **kw: float) -> tuple[float, float]:
    """Mean completeness and probes of one background allocation over the seeds."""
    comp, probes = [], []
    for seed in range(sz.seeds):
        ups = real(sz) if name.startswith("RSS") else synthetic(sz, seed)[0]
        wl = num_update_watch(ups, sz.chronons, window=sz.window, budget=c)
        r = simulate_pull(wl, "mrsf-p", PullOptions(background=bg, rates=rates, updates=ups, seed=seed,
                                                    **kw))  # type: ignore[arg-type]
        comp.append(r.completeness)
        probes.append(r.probes)
    return statistics.mean(comp), statistics.mean(probes)


def exp_alloc(sz: Sizes) -> tuple[list[list[object]], dict[str, object]]:
    rows: list[list[object]] = []
    plot: dict[str, list[float]] = {}
    summary: list[list[object]] = []
    for name in DATASETS:
        for c in sz.alloc_budgets:
            means: dict[tuple[Rates, Background], float] = {}
            for rates in (Rates.KNOWN, Rates.ONLINE):
                cells: list[object] = [name, c, rates.value]
                for bg in ALLOC:
                    comp, probes = alloc_run(sz, name, c, rates, bg)
                    means[rates, bg] = comp
                    cells.append(f"{comp:.3f} ({probes:.0f})")
                    if name.startswith("Synth") and c == sz.alloc_budgets[-1]:
                        plot.setdefault(rates.value, []).append(comp)
                rows.append(cells)
            ce, g, cap = Background.CAPTURE_EXPLORE, Background.GREEDY, Background.CAPTURE
            summary.append([name, c, f"{gain(means[Rates.ONLINE, ce], means[Rates.ONLINE, g])}",
                            f"{gain(means[Rates.ONLINE, ce], means[Rates.ONLINE, cap])}",
                            f"{gain(means[Rates.KNOWN, ce], means[Rates.KNOWN, g])}",
                            f"{gain(means[Rates.KNOWN, ce], means[Rates.KNOWN, cap])}"])
    return rows, {"bars": plot, "summary": summary}


def gain(a: float, b: float) -> str:
    return f"{100 * (a - b) / b:+.0f} %" if b else "—"


# Slices of the real trace (days, chronons) beyond the one above: is the gain a property of one slice?
SLICES = ((15.0, 500), (15.0, 1000), (15.0, 2000), (30.0, 500), (30.0, 1000), (30.0, 2000), (60.0, 500),
          (60.0, 1000), (60.0, 2000))


def exp_slices(sz: Sizes) -> list[list[object]]:
    """greedy, capture and capture-explore with learnt rates on slices of the real trace (deterministic)."""
    rows: list[list[object]] = []
    bgs = (Background.GREEDY, Background.CAPTURE, Background.CAPTURE_EXPLORE)
    for days, k in SLICES if sz.chronons >= 1000 else ((sz.trace_days, sz.chronons),):
        s = replace(sz, trace_days=days, chronons=k, seeds=1)
        for c in sz.alloc_budgets:
            comp = [alloc_run(s, "RSS (real trace)", c, Rates.ONLINE, bg)[0] for bg in bgs]
            rows.append([f"{days:g}", k, len(real(s)), c, *(f"{v:.3f}" for v in comp), gain(comp[2], comp[0])])
    return rows


def exp_explore(sz: Sizes) -> list[list[object]]:
    """capture-explore's completeness for each (z, ε) of :data:`EXPLORE`."""
    rows: list[list[object]] = []
    for name in DATASETS:
        for c in sz.alloc_budgets:
            for rates in (Rates.KNOWN, Rates.ONLINE):
                cells: list[object] = [name, c, rates.value]
                for z, eps in EXPLORE:
                    comp, _ = alloc_run(sz, name, c, rates, Background.CAPTURE_EXPLORE, explore_z=z,
                                        explore_epsilon=eps)
                    cells.append(f"{comp:.3f}")
                rows.append(cells)
    return rows


# ------------------------------------------------------------------ output


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def plot_sup_wic(data: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = data["curves"]
    sup = data["sup"]
    assert isinstance(curves, dict) and isinstance(sup, dict)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, model in zip(axes, ("FPN(1.0)", "Poisson"), strict=True):
        xs, ys = zip(*curves[model], strict=True)
        ax.plot(xs, ys, "o-", label="WIC (C·K probes)")
        sp, su = sup[model]
        ax.plot([sp], [su], "r*", markersize=14, label="SUP")
        ax.set_title(f"Synthetic Data 2, {model}")
        ax.set_xlabel("total probes")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("effective utility")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_alloc(data: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = data["bars"]
    assert isinstance(bars, dict)
    fig, ax = plt.subplots(figsize=(8, 3.4))
    x = np.arange(len(ALLOC))
    for i, (k, v) in enumerate(bars.items()):
        ax.bar(x + 0.4 * i - 0.2, v, 0.4, label=f"rates {k}")
    ax.set_xticks(x, [b.value for b in ALLOC])
    ax.set_ylabel("completeness")
    ax.set_title("Background allocations, Synthetic Data 2, window(10)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(sections: dict[str, str], header: str) -> str:
    return "\n\n".join([header, *sections.values()])


def write_doc(doc: Path, body: str) -> None:
    text = doc.read_text(encoding="utf-8") if doc.exists() else f"{BEGIN}\n{END}\n"
    if BEGIN not in text:
        text += f"\n{BEGIN}\n{END}\n"
    new = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: f"{BEGIN}\n{body}\n{END}", text,
                 flags=re.DOTALL)
    doc.write_text(new, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--only", action="append", choices=["sup-wic", "fbsup", "policies", "alloc", "explore"])
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke test, not a result)")
    ap.add_argument("--seeds", type=int, help="seeds per point (default 3)")
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument("--img", type=Path, default=IMG)
    args = ap.parse_args(argv)
    sz = TINY if args.tiny else Sizes()
    if args.seeds:
        sz = replace(sz, seeds=args.seeds)
    wanted = args.only or ["sup-wic", "fbsup", "policies", "alloc", "explore"]
    sections: dict[str, str] = {}
    began = time.perf_counter()
    timings: dict[str, float] = {}
    if "sup-wic" in wanted:
        t = time.perf_counter()
        rows, data = exp_sup_wic(sz)
        plot_sup_wic(data, args.img / "discovery_sup_wic.png")
        timings["sup-wic"] = time.perf_counter() - t
        sections["sup-wic"] = ("### SUP against WIC (paper 002 §4.5, Figure 4)\n\n"
                               f"{sz.feeds} feeds, K={sz.chronons}, window({sz.window}), X=1, {sz.seeds} seeds; "
                               f"{timings['sup-wic']:.0f} s.\n\n"
                               + table(["model", "schedule", "probes", "utility", "WIC/SUP probes", ""], rows)
                               + "\n\n![SUP against WIC](img/discovery_sup_wic.png)")
    if "fbsup" in wanted:
        t = time.perf_counter()
        rows = exp_fbsup(sz)
        timings["fbsup"] = time.perf_counter() - t
        sections["fbsup"] = ("### fbSUP against SUP (paper 002 §5.3, Figure 5)\n\n"
                             f"Life overwrite, X = every X-th update; {sz.seeds} seeds of the FPN noise "
                             f"(and of the synthetic trace); {timings['fbsup']:.0f} s.\n\n"
                             + table(["data", "X", "model", "SUP utility", "fbSUP utility", "gain",
                                      "SUP probes", "fbSUP probes", "extra probes"], rows))
    if "policies" in wanted:
        t = time.perf_counter()
        rows = exp_policies(sz)
        timings["policies"] = time.perf_counter() - t
        p = sz.table1
        sections["policies"] = ("### Every policy: pushed, pull-only, optimum\n\n"
                                f"Table 1 workload with n={p.resources}, m={p.profiles}, K={p.chronons}, "
                                f"C={p.budget}, λ={p.lam:g}, W={p.window}, rank ≤ {p.rank}, reveal update; "
                                f"{sz.seeds} seeds; optimum by the MILP (≤ {sz.optimum_limit:g} s each); "
                                f"{timings['policies']:.0f} s.\n\n"
                                + table(["policy", "pushed", "pull, known rates", "pull, learnt rates",
                                         "pull + fbSUP planner"], rows))
    if "alloc" in wanted:
        t = time.perf_counter()
        rows, data = exp_alloc(sz)
        plot_alloc(data, args.img / "discovery_alloc.png")
        timings["alloc"] = time.perf_counter() - t
        sections["alloc"] = ("### Background allocations at equal budget\n\n"
                             f"Num Update Watch X=1, window({sz.window}); completeness (probes used); "
                             f"{sz.seeds} seeds; {timings['alloc']:.0f} s.\n\n"
                             + table(["data", "C", "rates", *(b.value for b in ALLOC)], rows)
                             + "\n\n![allocations](img/discovery_alloc.png)\n\n"
                             + "capture-explore (z=1, ε=0.2) against greedy and capture, from the table above:\n\n"
                             + table(["data", "C", "learnt: vs greedy", "learnt: vs capture", "known: vs greedy",
                                      "known: vs capture"], data["summary"]))  # type: ignore[arg-type]
    if "explore" in wanted:
        t = time.perf_counter()
        rows = exp_explore(sz)
        timings["explore"] = time.perf_counter() - t
        sections["explore"] = ("### capture-explore: its optimism z and floor ε\n\n"
                               f"As above; completeness; {sz.seeds} seeds; {timings['explore']:.0f} s.\n\n"
                               + table(["data", "C", "rates", *(f"z={z:g} ε={e:g}" for z, e in EXPLORE)], rows))
        t = time.perf_counter()
        rows = exp_slices(sz)
        timings["slices"] = time.perf_counter() - t
        sections["slices"] = ("### capture-explore on other slices of the real trace, rates learnt\n\n"
                              f"Last `days` of the trace on K chronons, window({sz.window}), mrsf-p; "
                              f"deterministic (one run each); {timings['slices']:.0f} s.\n\n"
                              + table(["days", "K", "feeds", "C", "greedy", "capture", "capture-explore",
                                       "vs greedy"], rows))
    total = time.perf_counter() - began
    cmd = "benchmarks/policies/policy_pull.py" + (" --tiny" if args.tiny else "") + "".join(
        f" --only {w}" for w in (args.only or []))
    header = (f"Generated by `.venv/bin/python {cmd}` on {time.strftime('%Y-%m-%d')} "
              f"in {total:.0f} s (2 cores).")
    write_doc(args.doc, render(sections, header))
    print(f"wrote {args.doc} ({total:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
