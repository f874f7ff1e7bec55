"""``docs/benchmarks.md`` and its PNGs from the JSON results of ``proxy bench live``.

Deliberately not here: running anything (:mod:`proxy.bench.live`); this
module only reads result files and writes markdown and matplotlib figures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

GAP_TARGET = 0.03
"""Live CEI completeness within 3 points of the simulator's (the issue's target)."""
LEAD_TARGET = 0.20
PROBE_RATIO_TARGET = 3.0


def load_results(folder: Path) -> list[dict[str, Any]]:
    """Every ``*.json`` result in ``folder``, ordered by workload, ping drops, policy and budget."""
    out = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "live" in data and "sim" in data:
            out.append(data)
    return sorted(out, key=_key)


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    c = r["config"]
    return (r["workload"], c["ping_drop_rate"], c["ping_delay"], c["policy"], c["budget"], r.get("tag", ""))


def _pct(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def _num(x: float | None, fmt: str = ".1f") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _ratio(need: int | None, have: int) -> str:
    if need is None:
        return "never"
    return f"{need} ({need / have:.1f}×)" if have else str(need)


def table(results: Sequence[dict[str, Any]]) -> list[str]:
    """Two tables, one row per run: live vs the simulators; then cost, entries and the readers."""
    sims = [
        "| policy | C | pings lost | live CEI % | sim % (reveal at update) "
        "| sim % (ping lag, generator ids) | sim % (ping lag) | live − sim(lag) | service says % "
        "| EIs as generated % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    cost = [
        "| policy | C | pings lost | probes | budget used | entries % | delay p50 / p90 (chronons) "
        "| round-robin % | adaptive % | round-robin probes to match | adaptive probes to match |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        c, live = r["config"], r["live"]
        st = live["service_states"]
        resolved = st.get("captured", 0) + st.get("missed", 0)
        says = st.get("captured", 0) / resolved if resolved else None
        d = live["delay_chronons"]
        rr, ad = r["readers"]["round-robin"], r["readers"]["adaptive"]
        gap = live["cei_completeness"] - r["sim_lag"]["cei_completeness"]
        head = f"| {c['policy']} | {c['budget']} | {_pct(c['ping_drop_rate'])} "
        sims.append(
            f"{head}| {_pct(live['cei_completeness'])} | {_pct(r['sim']['cei_completeness'])} "
            f"| {_pct(r.get('sim_lag_generator_ids', {}).get('cei_completeness'))} "
            f"| {_pct(r['sim_lag']['cei_completeness'])} | {100 * gap:+.1f} | {_pct(says)} "
            f"| {_pct(live['eis_agree'] / live['eis_total'] if live.get('eis_total') else None)} |")
        cost.append(
            f"{head}| {live['probes']} "
            f"| {live['budget_mean']:.2f} of {c['budget']} ({_pct(live.get('budget_full_share'))}% full) "
            f"| {_pct(live['entry_completeness'])} | {_num(d['p50'])} / {_num(d['p90'])} "
            f"| {_pct(rr['completeness'])} | {_pct(ad['completeness'])} "
            f"| {_ratio(rr['probes_to_match'], live['probes'])} "
            f"| {_ratio(ad['probes_to_match'], live['probes'])} |")
    return ["CEI completeness, live and simulated:", "", *sims, "",
            "Probes, entries and the plain readers at the same total probes:", "", *cost]


def plot_curves(results: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    """Completeness among resolved CEIs over the run: live (solid) and lag simulator (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, r in enumerate(results):
        color = f"C{i % 10}"
        k = r["chronons"]
        for key, style, label in (("live", "-", "live"), ("sim_lag", "--", "sim")):
            ys = [math.nan if v is None else v for v in r["curves"][key]]
            xs = [j * k / len(ys) for j in range(len(ys))]
            ax.plot(xs, ys, style, color=color, linewidth=1.2,
                    label=f"{r['config']['policy']} C={r['config']['budget']} {label}")
    ax.set_xlabel("chronon")
    ax.set_ylabel("CEI completeness among resolved CEIs")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_delays(results: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    """Histogram of entry capture delays (chronons from publication to first fetch), live runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    top = max((max(r["live"]["delays"], default=0.0) for r in results), default=1.0)
    bins = [b * max(top, 1.0) / 40 for b in range(41)]
    for i, r in enumerate(results):
        ax.hist(r["live"]["delays"], bins=bins, histtype="step", color=f"C{i % 10}", linewidth=1.2,
                label=f"{r['config']['policy']} C={r['config']['budget']}")
    ax.set_xlabel("capture delay (chronons from publication to the first probe that fetched it)")
    ax.set_ylabel("entries")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def targets(results: Sequence[dict[str, Any]]) -> list[str]:
    """The issue's two targets, checked row by row."""
    lines = []
    for r in results:
        c, live = r["config"], r["live"]
        if c["ping_drop_rate"] or c["ping_delay"]:
            continue
        gap = live["cei_completeness"] - r["sim_lag"]["cei_completeness"]
        raw = live["cei_completeness"] - r["sim"]["cei_completeness"]
        ok = "met" if abs(gap) <= GAP_TARGET else "MISSED"
        line = (f"- {r['workload']} {c['policy']} C={c['budget']}: live − sim(lag) {100 * gap:+.1f} points "
                f"({ok}); live − sim(reveal at update) {100 * raw:+.1f}")
        if r["workload"] == "poisson":
            best = max(r["readers"][k]["completeness"] for k in ("round-robin", "adaptive"))
            lead = live["cei_completeness"] - best
            needs = [r["readers"][k]["probes_to_match"] for k in ("round-robin", "adaptive")]
            ratio = min((n / live["probes"] if n is not None else math.inf) for n in needs) if live["probes"] else 0
            met = lead >= LEAD_TARGET or ratio >= PROBE_RATIO_TARGET
            line += (f"; lead over the best reader at equal probes {100 * lead:+.1f} points, "
                     f"readers need ≥ {ratio:.1f}× the probes ({'met' if met else 'MISSED'})")
        lines.append(line)
    return lines


def summary(results: Sequence[dict[str, Any]]) -> list[str]:
    """A few sentences with the headline figures, computed from the results."""
    lines = []
    clean = [r for r in results if not (r["config"]["ping_drop_rate"] or r["config"]["ping_delay"])]
    for name in dict.fromkeys(r["workload"] for r in clean):
        runs = [r for r in clean if r["workload"] == name]
        gaps = [r["live"]["cei_completeness"] - r["sim_lag"]["cei_completeness"] for r in runs]
        raw = [r["live"]["cei_completeness"] - r["sim"]["cei_completeness"] for r in runs]
        lines.append(
            f"- **{name}** ({len(runs)} runs): live CEI completeness is within "
            f"{100 * max(map(abs, gaps)):.1f} points of the live-equivalent simulator "
            f"(and {100 * min(raw):+.1f} to {100 * max(raw):+.1f} points from the paper's simulator, "
            "which probes an update in the chronon it happens).")
        leads, ratios = [], []
        for r in runs:
            best = max(r["readers"][k]["completeness"] for k in ("round-robin", "adaptive"))
            leads.append(r["live"]["cei_completeness"] - best)
            needs = [r["readers"][k]["probes_to_match"] for k in ("round-robin", "adaptive")]
            ratios.append(min((n / r["live"]["probes"]) if n is not None else math.inf for n in needs))
        lines.append(
            f"  At equal probes the proxy leads the better plain reader by {100 * min(leads):.1f} to "
            f"{100 * max(leads):.1f} points of CEI completeness; the readers need "
            f"{min(ratios):.1f}× to {max(ratios):.1f}× the proxy's probes to match it.")
    return lines


def write_report(results: Sequence[dict[str, Any]], doc: Path, command: str, notes: str = "") -> None:
    """Regenerate ``doc`` and ``doc.parent/img/bench_*.png`` from ``results``."""
    img = doc.parent / "img"
    img.mkdir(parents=True, exist_ok=True)
    out = [
        "# Live benchmark: the service against the feed farm, the simulator and plain readers",
        "",
        "<!-- Generated by `proxy bench live` / `proxy bench report` (proxy/bench/report.py); "
        "edit the generator, not this file. -->",
        "",
        f"Regenerate the page from saved results: `{command}`; after a change to the analysis, "
        "`proxy bench reanalyse` with the same options first recomputes every result from its run's "
        "database and publication log. The runs behind it:",
        "",
        "```",
        *sorted({r.get("command") or "(command not recorded)" for r in results}),
        "```",
        "",
        "## Summary",
        "",
        *summary(results),
        "",
        notes.strip(),
        "",
    ]
    by_wl: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_wl.setdefault(r["workload"], []).append(r)
    for name, runs in by_wl.items():
        first = runs[0]
        out += [f"## Workload: {name}", "",
                f"{first['description']}. {first['feeds']} feeds, {first['profiles']} profiles, "
                f"{first['ceis']} CEIs, {first['publications']} publications over "
                f"{first['chronons']} chronons of {first['config']['chronon_seconds']:g} s.", ""]
        out += table(runs)
        clean = [r for r in runs if not (r["config"]["ping_drop_rate"] or r["config"]["ping_delay"])]
        curve_png = img / f"bench_{name}_completeness.png"
        delay_png = img / f"bench_{name}_delays.png"
        plot_curves(clean or runs, curve_png, f"{name}: CEI completeness over time")
        plot_delays(clean or runs, delay_png, f"{name}: entry capture delays (live)")
        rel = doc.parent
        out += ["", f"![completeness over time]({curve_png.relative_to(rel)})", "",
                f"![capture delays]({delay_png.relative_to(rel)})", ""]
    out += ["## Targets", "", *targets(results), ""]
    doc.write_text("\n".join(out).rstrip() + "\n", encoding="utf-8")
