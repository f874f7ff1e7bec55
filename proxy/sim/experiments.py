"""Reproduce the main paper's Figures 6-11 (§4.2-4.7) on synthetic workloads.

Each completeness figure is a sweep (:mod:`proxy.sim.sweep`) written as a CSV
(one row per point, seed and policy) and a PNG of mean completeness.  Figure 8
(§4.4, runtime per EI as the number of profiles grows) is two
:class:`RuntimePanel` s with their own CSV and PNG.  Differences from the
paper, on purpose:

- the auction trace of §4.1.1 is not available, so Figures 6 and 7 use the
  Poisson stream with the figure's other settings (n=400, W=20, C=2 for
  Figure 6, over a range of profile counts as the paper's "various parameter
  settings"; W=0, C=1, exact ranks 1..5 for Figure 7);
- the paper's baseline in Figure 7 is an offline *approximation*; we plot the
  exact optimum (``optimal``) instead, which bounds every policy;
- Figure 8 times our online policies and, in the small panel, the LP
  relaxation (``lp-bound``, the LP the paper's offline approximation rounds)
  and the exact optimum (only where it finishes well within its time limit,
  else the limit would be measured, not the solver);
- every row is a policy on the same generated workload per seed (seeds
  ``0..N-1``), so the figures' baseline points share their workloads.

Not here: the CLI (``proxy sim experiments``) and any policy logic.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from proxy.sim.generate import GenParams, generate
from proxy.sim.run import simulate
from proxy.sim.sweep import SweepRow, run_sweep


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure: a base workload, the varied parameter and the policies drawn."""

    name: str
    title: str
    base: GenParams
    vary: str
    values: tuple[object, ...]
    policies: tuple[str, ...]
    optimal: bool = False
    xlabel: str = ""
    notes: str = ""
    extra: dict[str, object] = field(default_factory=dict)


BASE = GenParams()
# The paper draws these three; WIC is added so that "dominates WIC" can be checked on every figure.
CEI_POLICIES = ("mrsf-p", "m-edf-p", "s-edf-np", "wic")

FIGURES: tuple[Figure, ...] = (
    Figure(
        "fig6", "Figure 6: online policies with and without preemption (n=400, W=20, C=2)",
        replace(BASE, resources=400, window=20, budget=2), "profiles", (100, 250, 500, 1000),
        ("s-edf-np", "s-edf-p", "mrsf-np", "mrsf-p", "m-edf-np", "m-edf-p"),
        xlabel="profiles m (paper: 1590 CEIs from the auction trace)",
    ),
    Figure(
        "fig7", "Figure 7: policies vs the optimum, exact rank k (W=0, C=1)",
        replace(BASE, window=0, exact_rank=True), "rank", (1, 2, 3, 4, 5),
        ("mrsf-p", "m-edf-p", "s-edf-p", "s-edf-np", "wic"), optimal=True, xlabel="rank(P) = k",
    ),
    Figure(
        "fig9", "Figure 9: update intensity (C=1)", BASE, "lam", (10.0, 20.0, 30.0, 40.0, 50.0),
        CEI_POLICIES, xlabel="λ (updates per resource per epoch)",
    ),
    Figure(
        "fig10a", "Figure 10(1): inter-user preferences α", BASE, "alpha", (0.0, 0.5, 1.0, 1.37, 1.5, 2.0),
        CEI_POLICIES, xlabel="α",
    ),
    Figure(
        "fig10b", "Figure 10(2): intra-user preferences β", BASE, "beta", (0.0, 0.5, 1.0, 1.5, 2.0),
        CEI_POLICIES, xlabel="β",
    ),
    Figure(
        "fig11", "Figure 11: budget", BASE, "budget", (1, 2, 3, 4, 5),
        # All six online variants: "preemption helps when C > 1" (§4.2) is read off this figure too.
        ("mrsf-p", "m-edf-p", "s-edf-p", "s-edf-np", "mrsf-np", "m-edf-np", "wic"), xlabel="budget C",
    ),
)




@dataclass(frozen=True, slots=True)
class RuntimePanel:
    """One panel of Figure 8: each policy's runtime per EI as the number of profiles grows.

    ``offline`` pairs a solver (``optimal``/``lp-bound``) with the largest
    profile count it is run at.  Not here: any claim about wall-clock speed
    beyond the machine it ran on (the CSV records what was measured).
    """

    name: str
    title: str
    base: GenParams
    profiles: tuple[int, ...]
    policies: tuple[str, ...]
    offline: tuple[tuple[str, int], ...] = ()

    def solvers_at(self, profiles: int) -> list[str]:
        return [name for name, up_to in self.offline if profiles <= up_to]


RUNTIME_POLICIES = ("s-edf-np", "s-edf-p", "mrsf-p", "m-edf-p", "wic")

RUNTIME_PANELS: tuple[RuntimePanel, ...] = (
    # §4.4, Figure 8(1): small workloads, online policies against the offline solvers.  At
    # m=500 the optimum needs ~30 s on a quiet machine: run it with --time-limit 60 or more,
    # and read the CSV's status column (a solve stopped at its limit times the limit).
    RuntimePanel(
        "fig8a", "Figure 8(1): runtime per EI, λ=20", replace(BASE, lam=20.0), (100, 200, 300, 400, 500),
        RUNTIME_POLICIES, (("lp-bound", 500), ("optimal", 500)),
    ),
    # Figure 8(2): 2.5 times the update intensity and up to 2500 profiles, online policies only.
    RuntimePanel(
        "fig8b", "Figure 8(2): runtime per EI, λ=50", replace(BASE, lam=50.0), (500, 1000, 1500, 2000, 2500),
        RUNTIME_POLICIES,
    ),
)

RUNTIME_HEADER = ("profiles", "lam", "seed", "policy", "ceis", "eis", "captured", "completeness",
                  "runtime_s", "cpu_s", "us_per_ei", "wall_us_per_ei", "status")


def figure_names() -> list[str]:
    """Every figure, in the paper's order (Figure 8 is two panels)."""
    # FIGURES holds 6 and 7, then 9 onwards: Figure 8's panels go between them.
    return [*(f.name for f in FIGURES[:2]), *(p.name for p in RUNTIME_PANELS), *(f.name for f in FIGURES[2:])]


def run_runtime_panel(
    panel: RuntimePanel,
    out_dir: Path,
    seeds: Sequence[int],
    *,
    time_limit: float | None = None,
    on_run: Callable[[], None] | None = None,
    on_row: Callable[[dict[str, object]], None] | None = None,
) -> tuple[Path, Path]:
    """Time each policy on ``panel``'s workloads; write ``<name>.csv`` and ``<name>.png``.

    ``on_row`` receives each CSV row as it is made (:func:`write_runtime_csv`).

    Runtime per EI (``us_per_ei``) is the policy's CPU time (generation
    excluded) over the number of EIs in the workload, the paper's "EI
    processing unit" (§4.1).  CPU time rather than wall-clock because the
    machine is shared: other processes stretch wall-clock time, not CPU time;
    the wall-clock figures are kept as ``runtime_s``/``wall_us_per_ei``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    # Warm up: the first call of each policy imports the engine or scipy, which is not its runtime.
    tiny = generate(replace(panel.base, profiles=1, chronons=50, window=min(panel.base.window, 5)), 0)
    for policy in (*(name for name, _ in panel.offline), *panel.policies):
        simulate(tiny, policy, time_limit=time_limit)
    rows: list[dict[str, object]] = []
    for m in panel.profiles:
        params = replace(panel.base, profiles=m)
        for seed in seeds:
            workload = generate(params, seed)
            eis = sum(len(c.eis) for c in workload.ceis)
            for policy in (*panel.solvers_at(m), *panel.policies):
                cpu_began = time.process_time()
                res = simulate(workload, policy, time_limit=time_limit)
                cpu_s = time.process_time() - cpu_began
                captured = res.captured
                if policy == "lp-bound":  # its "captured" is the LP bound, not a schedule
                    captured = int(float(res.extra.get("bound", 0.0)))  # type: ignore[arg-type]
                rows.append({
                    "profiles": m, "lam": panel.base.lam, "seed": seed, "policy": policy,
                    "ceis": len(workload.ceis), "eis": eis, "captured": captured,
                    "completeness": f"{captured / res.total if res.total else 0.0:.6f}",
                    "runtime_s": f"{res.runtime_s:.6f}", "cpu_s": f"{cpu_s:.6f}",
                    "us_per_ei": f"{1e6 * cpu_s / eis if eis else 0.0:.4f}",
                    "wall_us_per_ei": f"{1e6 * res.runtime_s / eis if eis else 0.0:.4f}",
                    "status": str(res.extra.get("status", "")),
                })
                if on_row:
                    on_row(rows[-1])
                if on_run:
                    on_run()
    csv_path = write_runtime_csv(panel, rows, out_dir)
    png_path = out_dir / f"{panel.name}.png"
    _plot_runtime(panel, rows, png_path)
    return csv_path, png_path


def write_runtime_csv(panel: RuntimePanel, rows: Sequence[dict[str, object]], out_dir: Path) -> Path:
    """``<name>.csv`` of a runtime panel's rows (all of them, or those done before a Ctrl-C)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / f"{panel.name}.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=RUNTIME_HEADER)
        w.writeheader()
        w.writerows(rows)
    return csv_path


def runtime_runs_of(panel: RuntimePanel, seeds: int) -> int:
    return seeds * sum(len(panel.policies) + len(panel.solvers_at(m)) for m in panel.profiles)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value, NaN for none)."""
    if not values:
        return float("nan"), float("nan")
    mu = sum(values) / len(values)
    if len(values) == 1:
        return mu, 0.0
    return mu, math.sqrt(sum((v - mu) ** 2 for v in values) / (len(values) - 1))


def markdown_table(csv_path: Path, x: str, column: str, *, digits: int = 3) -> str:
    """A markdown table of ``column``'s mean ± std over seeds, one line per ``x`` value, one column per policy.

    Reads a CSV written by :func:`run_figure` or :func:`run_runtime_panel`;
    cells with no number (e.g. no optimum) are left blank.
    """
    with csv_path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError(f"{csv_path}: no rows")
    for name in (x, column, "policy", "seed"):
        if name not in rows[0]:
            raise ValueError(f"{csv_path}: no column {name!r} (columns: {', '.join(rows[0])})")
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    xs = list(dict.fromkeys(r[x] for r in rows))
    lines = [f"| {x} | seeds | " + " | ".join(policies) + " |", "|---|---:|" + "---:|" * len(policies)]
    for xv in xs:
        mine = [r for r in rows if r[x] == xv]
        cells = []
        for p in policies:
            vals = [float(r[column]) for r in mine if r["policy"] == p and r[column] != ""]
            mu, sd = mean_std(vals)
            cells.append("" if not vals else f"{mu:.{digits}f} ± {sd:.{digits}f}")
        lines.append(f"| {xv} | {len({r['seed'] for r in mine})} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_figure(
    fig: Figure,
    out_dir: Path,
    seeds: Sequence[int],
    *,
    with_optimal: bool = False,
    time_limit: float | None = None,
    on_run: Callable[[], None] | None = None,
    on_row: Callable[[SweepRow], None] | None = None,
) -> tuple[Path, Path]:
    """Run ``fig``'s sweep and write ``<name>.csv`` and ``<name>.png`` into ``out_dir``.

    ``on_row`` receives each row as it is made (:func:`write_figure_csv`)."""
    rows = run_sweep(
        fig.base, {fig.vary: list(fig.values)}, seeds, fig.policies,
        with_optimal=fig.optimal or with_optimal, time_limit=time_limit, on_run=on_run,
        on_row=on_row,
    )
    csv_path = write_figure_csv(fig, rows, out_dir)
    png_path = out_dir / f"{fig.name}.png"
    _plot(fig, rows, png_path)
    return csv_path, png_path


def write_figure_csv(fig: Figure, rows: Sequence[SweepRow], out_dir: Path) -> Path:
    """``<name>.csv`` of a figure's rows (all of them, or those done before a Ctrl-C)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / f"{fig.name}.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow([fig.vary, "seed", "policy", "captured", "total", "completeness",
                    "share_of_optimum", "runtime_s", "status", "bound"])
        for r in rows:
            w.writerow([r.point[0][1], r.seed, r.policy, r.captured, r.total, f"{r.completeness:.6f}",
                        "" if r.share_of_optimum is None else f"{r.share_of_optimum:.6f}",
                        f"{r.runtime_s:.6f}", r.status, "" if r.bound is None else f"{r.bound:.6f}"])
    return csv_path


def runs_of(fig: Figure, seeds: int, with_optimal: bool) -> int:
    return len(fig.values) * seeds * (len(fig.policies) + int(fig.optimal or with_optimal))


def means(rows: Sequence[SweepRow], values: Sequence[object]) -> dict[str, list[float]]:
    """Mean completeness per policy at each value of the varied parameter."""
    out: dict[str, list[float]] = {}
    for policy in dict.fromkeys(r.policy for r in rows):
        series = []
        for v in values:
            vals = [r.completeness for r in rows if r.policy == policy and r.point[0][1] == v]
            series.append(sum(vals) / len(vals) if vals else float("nan"))
        out[policy] = series
    return out


def _mean(values: Sequence[float | None]) -> float:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else float("nan")


def _plot(fig: Figure, rows: Sequence[SweepRow], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    series = means(rows, fig.values)
    xs = [float(v) for v in fig.values]  # type: ignore[arg-type]
    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    for policy, ys in series.items():
        if policy == "optimal":
            proven = all(r.status == "optimal" for r in rows if r.policy == "optimal")
            ax.plot(xs, ys, "--", marker="o", color="black",
                    label="optimal" if proven else "optimum: best found")
            if not proven:
                # Where HiGHS hit its time limit the optimum lies between the two lines.
                bounds = [_mean([r.bound for r in rows if r.policy == "optimal" and r.point[0][1] == v
                                 and r.bound is not None]) for v in fig.values]
                ax.plot(xs, bounds, ":", color="black", label="optimum: upper bound")
            continue
        ax.plot(xs, ys, "-", marker="o", label=policy)
    ax.set_xticks(xs)
    ax.set_title(fig.title, fontsize=10)
    ax.set_xlabel(fig.xlabel or fig.vary)
    ax.set_ylabel("gained completeness")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _plot_runtime(panel: RuntimePanel, rows: Sequence[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    xs = [float(m) for m in panel.profiles]
    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    for policy in dict.fromkeys(str(r["policy"]) for r in rows):
        ys = [mean_std([float(str(r["us_per_ei"])) for r in rows
                        if r["policy"] == policy and r["profiles"] == m])[0] for m in panel.profiles]
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if not math.isnan(y)]
        offline = policy in ("optimal", "lp-bound")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--" if offline else "-", marker="o", label=policy)
    # The paper labels its curves with the profile counts and plots against the EIs they make.
    eis = [mean_std([float(str(r["eis"])) for r in rows if r["profiles"] == m and r["policy"] == panel.policies[0]])[0]
           for m in panel.profiles]
    ax.set_xticks(xs, [f"{m}\n{e / 1000:.1f}k EIs" for m, e in zip(panel.profiles, eis, strict=True)])
    if panel.offline:
        ax.set_yscale("log")  # the offline solvers are one to two orders of magnitude slower
    else:
        ax.set_ylim(bottom=0)  # a flat line is the linear scaling the paper looks for
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel("profiles m (mean EIs per workload)")
    ax.set_ylabel("CPU time per EI (µs)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
