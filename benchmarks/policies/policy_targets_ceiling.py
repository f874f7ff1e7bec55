"""How far issue 45's targets are reachable at all: the replica's frontier with oracle rates, and a bound.

Issue 45's targets (live, pull-only): **T1** completeness ≥ 1.3× the better plain reader *and* a
p90 detection delay ≤ that reader's p90, on every trace; **T2** single-feed alerts (``--rank 1
--rule-kind alert``) ≥ 1.2× the better reader; **T3** on the real trace, a third of the gap between
pull-only and the same run with pings closed. Four sessions tried allocation variants against
them (``docs/discovery.md``); this asks what *any* setting of the allocation reaches, with every
feed's true mean rate over the run given to it (``--rates run``: the oracle of
``benchmarks/policies/policy_pull_replica.py``), with its true rate so far (``--rates past``: what
only probes of every feed buy, no future) and with the learnt rates, on each trace:

1. the readers (mean over 64 feed orders, at equal probes, as the replica), the better one, the
   completeness each target needs, and the clairvoyant's (the simulator told of every update:
   ``sim`` on the live bench's line), flagged where the line is above 100 % or above the
   clairvoyant;
2. T1's frontier: completeness ratio against p90 over the tail floor's share (0, 0.3, 0.45, 0.6,
   0.8, 1.0; fixed ``--tail-target 0 --tail-hopeless 1`` and adaptive, the defaults), the revisit
   factor (off, 1, 2, 3, 5) and the rates (run, past, learnt), whether any point reaches both
   halves, and how many traces each single setting meets;
3. T2: rank 1 with oracle rates, age hazards off and at 5 (``--hazard 5``), and the best of a few
   floors, and the same with the true past rates, against the 1.2× line;
4. T3 (the real trace): the line a third of the way from the default pull-only replay to the
   clairvoyant, and the best completeness any setting reaches;
5. how unequal the rates are (the fewest watched feeds holding 90 % of the updates), and the
   bound that decides T1's room (:func:`tail_budget_needed`): the probes a chronon that *any*
   policy blind to update times needs to keep the pooled p90 at the better reader's, from
   Jensen's inequality on ``sum max(0, I - d)`` over the probe intervals (``docs/discovery.md``,
   "How far the targets reach").

Every replay is ``policy_pull_replica.replay_run`` (imported, not copied) with the issue's options
(``--lead 10``, readers over 64 orders). The frontier is this allocation's with better rates, not
an information bound (the clairvoyant is that): with the run's rates it sometimes does worse than
with the learnt ones. About 20-30 s a trace on a shared machine (about 160 replays of 0.1 s and
the readers' baselines once per rank; ``--jobs`` replays traces in parallel)::

    .venv/bin/python benchmarks/policies/policy_targets_ceiling.py \\
        ../shared/traces/real_feeds_items.csv:40:2:1 /tmp/h1/s60_5001.csv:40:2 ...
    .venv/bin/python benchmarks/policies/policy_targets_ceiling.py --lemma   # the lemma's numeric check
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import NamedTuple

import numpy as np
import policy_pull_replica as replica  # a sibling script, not a package
from policy_pull_replica import TraceSpec, parse_spec

from proxy.bench.live import trace_workload
from proxy.bench.metrics import ProbeRec, Pub, entry_outcome, quantiles

LEAD = replica.LEAD  # the live bench's lead, as the replica options (--lead 10)
T1_FACTOR, T2_FACTOR = 1.3, 1.2  # issue 45's completeness lines, over the better reader
T3_SHARE = 1 / 3  # the share of the gap to the run with pings that T3 asks to close
FLOOR_SHARES = (0.3, 0.45, 0.6, 0.8, 1.0)  # the tail floor's budget shares swept (and 0: off)
REVISITS = (5.0, 3.0, 2.0, 1.0)  # revisit factors swept with a floor (5: the service's default)
HAZARD = 5.0  # the age hazards' strength tried on alerts (the replica's --hazard 5)
SWEPT_RATES = ("run", "past", "learnt")  # the replica's --rates: the run's true mean, the true past, the service's
DEFAULT = ("learnt", 5.0, "adaptive", replica.TAIL_BUDGET)  # the service's settings: the run
ALERT_SETTINGS = ((0.0, "off", 0.0), (5.0, "off", 0.0), (5.0, "fixed", 0.3), (5.0, "fixed", 0.6), (5.0, "fixed", 1.0),
                  (3.0, "fixed", 0.3))  # T2's oracle settings besides the default's


class Point(NamedTuple):
    """One replay: its setting (rates, revisit factor, floor kind, floor share) and its figures."""

    rates: str
    revisit: float  # 0: no bound (and no floor)
    floor: str  # "off", "fixed" or "adaptive"
    share: float
    live: float
    ratio: float  # completeness over the better reader's
    p50: float
    p90: float
    p99: float

    def setting(self) -> str:
        bound = "no bound" if not self.revisit else f"R{self.revisit:g}"
        floor = "no floor" if self.floor == "off" else f"{self.floor} {self.share:g}"
        return f"{self.rates}, {bound}, {floor}"


# ----------------------------------------------------------------------------- pure figures


def target_line(readers: Mapping[str, float], factor: float) -> tuple[str, float]:
    """The better reader (the first named on a tie) and the completeness ``factor`` times its."""
    better = max(readers, key=lambda k: readers[k])
    return better, factor * readers[better]


def t3_line(pull: float, clairvoyant: float, share: float = T3_SHARE) -> float:
    """The completeness that closes ``share`` of the gap from ``pull`` to ``clairvoyant``."""
    return pull + share * (clairvoyant - pull)


def feeds_holding(counts: Sequence[float], share: float = 0.9) -> int:
    """The fewest feeds whose updates make at least ``share`` of them all (0 for no updates)."""
    total = sum(counts)
    acc = 0.0
    for k, c in enumerate(sorted(counts, reverse=True), 1):
        if total <= 0:
            break
        acc += c
        if acc >= share * total - 1e-9:
            return k
    return 0


def late_share_floor(rates: Sequence[float], budget: float, delay: float) -> float:
    """The lowest expected share of the pooled updates detected more than ``delay`` chronons late.

    Over every policy that spends ``budget`` probes a chronon and does not know when the feeds
    (independent, Poisson at ``rates``) change. In chronons, an update published just before
    chronon ``u`` and found by a probe at ``u + d`` waits ``d``; a feed probed at intervals
    ``I_k`` leaves ``sum max(0, I_k - delay - 1)`` of its chronons' updates later than
    ``delay``, in expectation ``rate`` each (the interval is chosen without seeing the feed,
    so it covers a Poisson stretch whatever its length). That sum is convex in each ``I_k``:
    at ``f`` probes a chronon over ``T`` chronons, Jensen gives at least
    ``rate × T × max(0, 1 - (delay + 1) f)``, equality for even spacing. The best spread of
    the budget is then a fractional knapsack: the fastest feeds first, each at one probe per
    ``delay + 1`` chronons (beyond that a probe removes nothing).
    """
    total = sum(rates)
    if total <= 0:
        return 0.0
    period = delay + 1.0
    left, late = budget, 0.0
    for r in sorted(rates, reverse=True):
        f = min(1.0 / period, max(left, 0.0))
        late += r * (1.0 - f * period)
        left -= f
    return late / total


def tail_budget_needed(rates: Sequence[float], delay: float, late: float = 0.1) -> float:
    """The fewest probes a chronon with which a blind policy can expect at most ``late`` of the pooled
    updates later than ``delay`` (``late`` 0.1: a p90 of ``delay``), by :func:`late_share_floor`'s
    argument: the fastest feeds at one probe per ``delay + 1`` chronons until ``1 - late`` of
    the update mass is covered."""
    total = sum(rates)
    if total <= 0:
        return 0.0
    need, cost = (1.0 - late) * total, 0.0
    for r in sorted(rates, reverse=True):
        if need <= 1e-12:
            break
        take = min(1.0, need / r) if r > 0 else 0.0
        cost += take / (delay + 1.0)
        need -= take * r
    return cost


def quantile_floor(rates: Sequence[float], budget: float, q: float = 0.9) -> int:
    """The lowest whole ``delay`` whose expected late share can be at most ``1 - q``: no policy blind to
    update times has an expected pooled ``q``-quantile below it (:func:`late_share_floor`)."""
    d = 0
    while late_share_floor(rates, budget, d) > 1.0 - q + 1e-12:
        d += 1
    return d


def stride_schedule(weights: Sequence[float], budget: int, chronons: int) -> list[tuple[int, int]]:
    """``(chronon, feed)`` probes, ``budget`` a chronon, each feed at a pace ∝ its weight, evenly
    spaced (the earliest due first), whatever the feeds publish: a policy blind to update times."""
    total, n = sum(weights), len(weights)
    period = [total / (budget * w) for w in weights]
    due = [p * i / n for i, p in enumerate(period)]  # the feeds' phases spread over their periods
    out = []
    for t in range(chronons):
        for r in sorted(range(n), key=lambda i: (due[i], i))[:budget]:  # the earliest due first
            out.append((t, r))
            due[r] += period[r]
    return out


def blind_delays(rates: Sequence[float], weights: Sequence[float], budget: int, chronons: int,
                 seed: int) -> list[float]:
    """The pooled detection delays of :func:`stride_schedule` on feeds that change as Bernoulli
    processes at ``rates`` a chronon (a seeded draw; an update at ``u`` is seen by a probe at ``u``):
    the lemma's numeric check."""
    rng = np.random.default_rng(seed)
    pubs = [Pub(r, float(u)) for r, p in enumerate(rates) for u in range(chronons) if rng.random() < p]
    probes = [ProbeRec(r, t, float(t)) for t, r in stride_schedule(weights, budget, chronons)]
    return list(entry_outcome(pubs, probes, 10**6).delays)


# ----------------------------------------------------------------------------- the replays


def point(tr: TraceSpec, rates: str, revisit: float, floor: str, share: float, rank: int) -> tuple[Point, replica.Replay]:
    """One replay at the issue's options (``--lead 10``), this setting of rates, bound and floor."""
    run = replica.replay_run(tr.path, tr.profiles, tr.budget, seed=tr.seed, lead=LEAD, rank=rank, rates=rates,
                             revisit=revisit or None, tail_budget=share if floor != "off" else 0.0,
                             tail_target=None if floor == "fixed" else replica.TAIL_TARGET,
                             tail_hopeless=1.0 if floor == "fixed" else replica.TAIL_HOPELESS)
    d = run.delays["proxy"]
    ratio = run.live / max(run.rr, run.ad)
    return Point(rates, revisit, floor, share, run.live, ratio, d["p50"], d["p90"], d["p99"]), run


def settings() -> list[tuple[float, str, float]]:
    """T1's sweep: no bound; each revisit factor with no floor and with each floor kind and share."""
    out: list[tuple[float, str, float]] = [(0.0, "off", 0.0)]
    for revisit in REVISITS:
        out.append((revisit, "off", 0.0))
        out.extend((revisit, kind, share) for kind in ("fixed", "adaptive") for share in FLOOR_SHARES)
    return out


def frontier(points: Sequence[Point]) -> list[Point]:
    """The points no other beats on both ratio (higher) and p90 (lower), by p90; the first of equal ones."""
    keep: dict[tuple[float, float], Point] = {}
    for p in points:
        if not any(o.ratio >= p.ratio and o.p90 <= p.p90 and (o.ratio, o.p90) != (p.ratio, p.p90) for o in points):
            keep.setdefault((p.ratio, p.p90), p)
    return sorted(keep.values(), key=lambda p: (p.p90, -p.ratio))


def update_counts(tr: TraceSpec, rank: int) -> list[int]:
    """Each watched feed's updates over the run."""
    bw = trace_workload(tr.path, chronons=replica.CHRONONS, days=replica.DAYS, profiles=tr.profiles, rank=rank,
                        window=replica.WINDOW, seed=tr.seed, budget=tr.budget)
    watched = sorted({r for w in bw.watched for r in w})
    return [len(bw.updates[r]) for r in watched]


class Study(NamedTuple):
    """One trace's figures for the three targets (:func:`study`)."""

    trace: TraceSpec
    rr: float  # the readers' completeness, rank 3 (mean over the orders)
    ad: float
    delays: dict[str, dict[str, float]]  # the readers' and the clairvoyant's delays, rank 3
    sim: float  # the clairvoyant's completeness, rank 3
    counts: list[int]  # each watched feed's updates over the run, rank 3
    points: dict[str, list[Point]]  # T1's sweep by rates ("run", "learnt")
    alerts: dict[str, Point]  # T2: "learnt" (the default), "run", "run+hazard", "best" (oracle, best of 7),
    # "past" and "past best" (the true past rates, default setting and best of 7)
    alert_readers: tuple[float, float]
    alert_sim: float


def study(tr: TraceSpec, only: frozenset[str]) -> Study:
    """Every replay of one trace: T1's sweep (which holds T3's points) and T2's alerts."""
    counts = update_counts(tr, replica.RANK)
    pts: dict[str, list[Point]] = {rates: [] for rates in SWEPT_RATES}
    sweep = settings() if only & {"t1", "t3"} else [DEFAULT[1:]]
    base = None
    for rates in pts:
        for revisit, floor, share in sweep:
            p, base = point(tr, rates, revisit, floor, share, replica.RANK)
            pts[rates].append(p)
    assert base is not None
    alerts: dict[str, Point] = {}
    readers, alert_sim = (math.nan, math.nan), math.nan
    if "t2" in only:
        alerts["learnt"], run = point(tr, *DEFAULT, 1)
        readers, alert_sim = (run.rr, run.ad), run.sim
        alerts["run"], _ = point(tr, "run", *DEFAULT[1:], 1)
        alerts["past"], _ = point(tr, "past", *DEFAULT[1:], 1)
        alerts["past best"] = max([alerts["past"], *(point(tr, "past", revisit, floor, share, 1)[0]
                                                     for revisit, floor, share in ALERT_SETTINGS)],
                                  key=lambda p: p.live)
        replica.HAZARD = HAZARD  # the replica's --hazard: a module setting, read by every replay
        try:
            alerts["run+hazard"], _ = point(tr, "run", *DEFAULT[1:], 1)
        finally:
            replica.HAZARD = 0.0
        others = [point(tr, "run", revisit, floor, share, 1)[0] for revisit, floor, share in ALERT_SETTINGS]
        alerts["best"] = max([alerts["run"], *others], key=lambda p: p.live)
    return Study(tr, base.rr, base.ad, base.delays, base.sim, counts, pts, alerts, readers, alert_sim)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _d(x: float) -> str:
    return "-" if x != x else f"{x:.0f}"


def _where(p: Point) -> str:
    return p.setting().split(", ", 1)[1]


def default_point(st: Study) -> Point:
    return next(p for p in st.points["learnt"] if (p.rates, p.revisit, p.floor, p.share) == DEFAULT)


def t1_line(st: Study) -> tuple[str, float, float]:
    """The better reader, T1's completeness line and its p90 line."""
    better, line = target_line({"round-robin": st.rr, "adaptive": st.ad}, T1_FACTOR)
    return better, line, st.delays[better]["p90"]


def print_t1(studies: Sequence[Study]) -> None:
    rows, fronts, bounds = [], [], []
    met: dict[str, list[str]] = {rates: [] for rates in SWEPT_RATES}
    for st in studies:
        better, line, line90 = t1_line(st)
        dflt = default_point(st)
        flag = "above 100 %" if line > 1 else "above the clairvoyant" if line > st.sim else ""
        rr, ad = st.delays["round-robin"], st.delays["adaptive"]
        cells = [f"{st.trace.label} | {_pct(st.rr)} · {_d(rr['p50'])}/{_d(rr['p90'])} | "
                 f"{_pct(st.ad)} · {_d(ad['p50'])}/{_d(ad['p90'])} | {better} | {_pct(line)} · ≤ {_d(line90)} | "
                 f"{_pct(st.sim)} · {_d(st.delays['clairvoyant']['p90'])} | {_pct(dflt.live)} ({dflt.ratio:.2f}×) · "
                 f"{_d(dflt.p90)} | {flag}"]
        for rates, ps in st.points.items():
            both = [p for p in ps if p.ratio >= T1_FACTOR and p.p90 <= line90]
            best_ratio = max((p for p in ps if p.p90 <= line90), key=lambda p: p.ratio, default=None)
            best_p90 = min((p for p in ps if p.ratio >= T1_FACTOR), key=lambda p: p.p90, default=None)
            cells.append(f"{len(both)} of {len(ps)}"
                         + " | " + ("-" if best_ratio is None else
                                    f"{best_ratio.ratio:.2f}× · {_d(best_ratio.p90)} ({_where(best_ratio)})")
                         + " | " + ("-" if best_p90 is None else f"{_d(best_p90.p90)} · {best_p90.ratio:.2f}×"))
            if both:
                met[rates].append(st.trace.label)
            fronts.append(f"| {st.trace.label} | {rates} | {_d(line90)} | "
                          + "; ".join(f"{p.ratio:.2f}×/{_d(p.p90)} ({_where(p)})" for p in frontier(ps)) + " |")
        rows.append("| " + " | ".join(cells) + " |")
        pace = [c / replica.CHRONONS for c in st.counts]
        need = tail_budget_needed(pace, line90)
        k90 = feeds_holding(st.counts)
        budget = st.trace.budget
        bounds.append(f"| {st.trace.label} | {len(st.counts)} | {sum(st.counts)} | {k90} ({k90 / len(st.counts):.0%}) | "
                      f"{_d(line90)} | {need:.2f} ({need / budget:.0%}) | {quantile_floor(pace, budget)} | "
                      f"{quantile_floor([1.0] * len(pace), budget)} |")
    print("### T1: readers, lines, and the best settings (rank 3)\n")
    print("Readers: completeness · p50/p90 (64 orders). T1 line: the completeness and the p90 it needs. "
          "Default: the service's settings, learnt rates. For each rates (run: every feed's true mean over the run; "
          "past: its true rate so far; learnt: the service's): the settings "
          "meeting both halves, of those swept; the best ratio among settings with a p90 at the line · "
          "its p90 (where); the lowest p90 among settings at ≥ 1.3× · its ratio.\n")
    print("| trace | round-robin | adaptive | better | T1 line | clairvoyant · p90 | default | flag | "
          + " | ".join(f"{r}: both | {r}: best ratio at the p90 line | {r}: lowest p90 at 1.3×" for r in SWEPT_RATES)
          + " |")
    print("|---|---|---|---|---|---|---|---|" + "---|---|---|" * len(SWEPT_RATES))
    print("\n".join(rows))
    for rates, labels in met.items():
        print(f"\nT1 with {rates} rates: both halves reached by some setting on {len(labels)} of {len(studies)} "
              "traces" + (f" ({', '.join(labels)})" if labels else ""))
    print("\n### T1: one setting on every trace\n")
    print(f"Per setting, over the {len(studies)} traces: those meeting both halves, those at ≥ 1.3×, those with "
          "the p90 at the line, the median ratio and the median p90 over the line; the 6 best settings per "
          "rates by traces met (then median ratio), and the default.\n")
    print("| rates, setting | both halves | ≥ 1.3× | p90 at the line | ratio: median, worst | p90 / line: median, worst |")
    print("|---|---:|---:|---:|---|---|")
    for row in setting_summary(studies):
        print(row)
    print("\n### T1: the frontier (ratio/p90: the settings no other beats on both)\n")
    print("| trace | rates | p90 line | frontier |\n|---|---|---:|---|")
    print("\n".join(fronts))
    print("\n### How unequal the rates are, and the bound\n")
    print("Watched feeds, their updates over the run, the fewest feeds holding 90 % of them; the probes a "
          "chronon (share of the budget) that a policy blind to update times, every rate known, needs to "
          "expect a pooled p90 at the line; the lowest p90 it can expect with the whole budget on it, and "
          "the same were the rates equal (round-robin's).\n")
    print("| trace | watched | updates | feeds holding 90 % | p90 line | probes needed for it | "
          "lowest p90, whole budget | the same, equal rates |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(bounds))


def setting_summary(studies: Sequence[Study], top: int = 6) -> list[str]:
    """The rows of "one setting on every trace": per rates, the ``top`` settings by traces met, and the default."""
    rows = []
    for rates in SWEPT_RATES:
        stats = []
        for k, p0 in enumerate(studies[0].points[rates]):
            ps = [st.points[rates][k] for st in studies]
            lines = [t1_line(st)[2] for st in studies]
            both = sum(p.ratio >= T1_FACTOR and p.p90 <= ln for p, ln in zip(ps, lines, strict=True))
            ratios = [p.ratio for p in ps]
            over = [p.p90 / ln for p, ln in zip(ps, lines, strict=True)]
            stats.append((both, statistics.median(ratios), p0, ps, lines, ratios, over))
        ranked = sorted(stats, key=lambda x: (-x[0], -x[1]))
        chosen = ranked[:top] + [x for x in ranked[top:] if (rates, *x[2][1:4]) == DEFAULT]
        for both, med, p0, ps, lines, ratios, over in chosen:
            name = p0.setting() + (" (the default)" if (rates, *p0[1:4]) == DEFAULT else "")
            rows.append(f"| {name} | {both} of {len(ps)} | {sum(r >= T1_FACTOR for r in ratios)} | "
                        f"{sum(p.p90 <= ln for p, ln in zip(ps, lines, strict=True))} | {med:.2f}×, {min(ratios):.2f}× | "
                        f"{statistics.median(over):.2f}, {max(over):.2f} |")
    return rows


def print_t2(studies: Sequence[Study]) -> None:
    rows, met, past_met = [], [], []
    for st in studies:
        _, line = target_line({"round-robin": st.alert_readers[0], "adaptive": st.alert_readers[1]}, T2_FACTOR)
        flag = "above 100 %" if line > 1 else "above the clairvoyant" if line > st.alert_sim else ""
        if max(st.alerts[k].live for k in ("run", "run+hazard", "best")) >= line:
            met.append(st.trace.label)
        if max(st.alerts[k].live for k in ("past", "past best")) >= line:
            past_met.append(st.trace.label)
        best = st.alerts["best"]
        rows.append(f"| {st.trace.label} | {_pct(st.alert_readers[0])} | {_pct(st.alert_readers[1])} | {_pct(line)} | "
                    f"{_pct(st.alert_sim)} | "
                    + " | ".join(f"{_pct(st.alerts[k].live)} ({st.alerts[k].ratio:.2f}×)"
                                 for k in ("learnt", "run", "run+hazard"))
                    + f" | {_pct(best.live)} ({best.ratio:.2f}×, {_where(best)}) | "
                    + " | ".join(f"{_pct(st.alerts[k].live)} ({st.alerts[k].ratio:.2f}×)" for k in ("past", "past best"))
                    + f" | {flag} |")
    print("### T2: single-feed alerts (rank 1)\n")
    print("| trace | round-robin | adaptive | 1.2× line | clairvoyant | learnt (default) | oracle rates | "
          f"oracle rates, hazard {HAZARD:g} | oracle rates, best of {len(ALERT_SETTINGS) + 1} settings | "
          f"true past rates | true past rates, best of {len(ALERT_SETTINGS) + 1} | flag |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
    print("\n".join(rows))
    print(f"\nT2: the line reached by some oracle (run) setting on {len(met)} of {len(studies)} traces"
          + (f" ({', '.join(met)})" if met else ""))
    print(f"T2: the line reached with the true past rates on {len(past_met)} of {len(studies)} traces"
          + (f" ({', '.join(past_met)})" if past_met else ""))
    learnt = [st.trace.label for st in studies
              if st.alerts["learnt"].live >= T2_FACTOR * max(st.alert_readers)]
    print(f"T2: the line reached by the default (learnt rates) on {len(learnt)} of {len(studies)} traces"
          + (f" ({', '.join(learnt)})" if learnt else ""))


def print_t3(studies: Sequence[Study]) -> None:
    rows = []
    for st in studies:
        dflt = default_point(st)
        before = st.points["learnt"][0]  # learnt rates, no bound, no floor: pull-only when issue 45 was filed
        lines = (t3_line(before.live, st.sim), t3_line(dflt.live, st.sim))
        best = {rates: max(ps, key=lambda p: p.live) for rates, ps in st.points.items()}
        top = max(p.live for p in best.values())
        rows.append(f"| {st.trace.label} | {_pct(before.live)} | {_pct(dflt.live)} | {_pct(st.sim)} | "
                    f"{_pct(lines[0])} | {_pct(lines[1])} | "
                    + " | ".join(f"{_pct(best[k].live)} · p90 {_d(best[k].p90)} ({_where(best[k])})"
                                 for k in ("learnt", "past", "run"))
                    + " | " + ", ".join("yes" if top >= line else "no" for line in lines) + " |")
    print("### T3: a third of the gap to the clairvoyant (rank 3)\n")
    print("The line from pull-only as issue 45 found it (learnt rates, no bound, no floor) and from the "
          "default now; the best completeness each rates reaches over the sweep (whatever its p90).\n")
    print("| trace | pull-only, issue 45's | pull-only, default | clairvoyant | T3 line from issue 45's | "
          "T3 line from the default | learnt, best setting | true past rates, best setting | "
          "oracle rates, best setting | some setting reaches it (each line) |")
    print("|---|---:|---:|---:|---:|---:|---|---|---|---|")
    print("\n".join(rows))


def lemma(n: int = 40, budget: int = 2, chronons: int = 2000, seeds: int = 4) -> None:
    """Equal rates: round-robin's pooled quantiles are the lowest; unequal rates: they are not."""
    print("### The lemma, numerically (Bernoulli feeds, stride schedules blind to updates)\n")
    print(f"{n} feeds, {budget} probes a chronon, {chronons} chronons, {seeds} draws pooled; "
          "pace split: the first half of the feeds get `a` times the second half's probes.\n")
    print("| rates | pace split a | p50 | p90 | p99 | bound on p90 |\n|---|---:|---:|---:|---:|---:|")
    cases = {"equal, 0.1": [0.1] * n,
             "unequal (half 0.18, half 0.02)": [0.18] * (n // 2) + [0.02] * (n - n // 2)}
    for name, rates in cases.items():
        for a in (1.0, 1.5, 2.0, 3.0):
            weights = [a] * (n // 2) + [1.0] * (n - n // 2)
            ds = [d for s in range(seeds) for d in blind_delays(rates, weights, budget, chronons, s)]
            q = quantiles(ds)
            print(f"| {name} | {a:g} | {_d(q['p50'])} | {_d(q['p90'])} | {_d(q['p99'])} | "
                  f"{quantile_floor(rates, budget)} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("traces", nargs="*", help="TRACE.csv:PROFILES:BUDGET[:SEED], as the replica's")
    parser.add_argument("--only", choices=("t1", "t2", "t3"), action="append",
                        help="the targets to study (default all; t3 is for the real trace)")
    parser.add_argument("--jobs", type=int, default=1, help="traces replayed at once (default 1)")
    parser.add_argument("--lemma", action="store_true", help="print the lemma's numeric check")
    args = parser.parse_args(argv)
    only = frozenset(args.only or ("t1", "t2", "t3"))
    if args.lemma:
        lemma()
        print()
    traces = [parse_spec(s) for s in args.traces]
    if not traces:
        return 0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        studies = list(pool.map(study, traces, [only] * len(traces)))
    for name, show in (("t1", print_t1), ("t2", print_t2), ("t3", print_t3)):
        if name in only:
            show(studies)
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
