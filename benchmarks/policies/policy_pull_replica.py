"""A fast replica of ``proxy bench live --ping-drop-rate 1.0``: the service's background allocation, no HTTP.

Figures quoted in ``docs/discovery.md`` (section "Background probes"). The
live bench takes one to four minutes a run and moves by a few points between
runs of one command; this replays the same workload
(``proxy.bench.live.trace_workload``) chronon by chronon with what the
service's loop does in pull-only mode, so allocation variants can be compared
over many traces in seconds:

- every probe goes to the background (pull-only: no EI is known before the
  probe that finds its update), chosen by ``CaptureExplore`` with the loop's
  inputs: each feed's record in ``FeedUpdateModels`` (documents and censored
  probes, in seconds of 0.3 s chronons, dates in whole seconds as the feed
  farm serves them, merged within a chronon as the service's models do:
  ``update_model_settings``), pooled over the waited-for feeds
  (``pooled_rates``, the loop's ``POOL_STRENGTH`` and ``OPTIMISM_Z``, each
  record faded by the time since the feed's last probe, ``EVIDENCE_FADE``), the
  models' cycles (``FeedSlot.shape``), the frequencies' trust in the rates
  (``LEVEL_EXPONENT``), the explore share (``EXPLORE_SHARE``), the rules'
  coordinated shares behind the frequencies (``COORDINATION_ROUNDS``), and the
  weights of ``TriggerEvaluator.update_weights`` (a watch rule's worth spread
  over the feeds its CEI still lacks, ``DEAD_CEI_WEIGHT`` once it is missed: ``waiting_share``),
  with the AuctionWatch bookkeeping redone here;
- scored like the live bench (``cei_outcome``) against the plain readers at
  equal probes (``match_probes``);
- with ``--predicted sup|fbsup`` (section "Predicted EIs"), the loop's
  ``proxy.service.predicted.PredictedProbes`` first takes the budget for the
  predicted EIs due, as the loop does after the engine's known EIs, and sees
  every probe's outcome (fbSUP). ``--chronon-seconds 6048`` replays the two
  weeks at their real pace (200 chronons of 1.68 h), where the models' prior
  lets predictions come due; at the bench's 0.3 s they never do.

What it leaves out: HTTP timing, probes in flight, the evaluator's exact
update-time estimate (it dates a found update by its true chronon), and, by
default, the live bench's lead: its rules exist ten chronons before the run,
and the service spends those chronons' probes on documents holding only the
placeholder, so about twenty feeds start the run with a last success and a
record of silence (``docs/discovery.md``, "Where learning loses"). ``--lead
10`` replays that lead too; it brought the replica no closer to the live
bench (mean distance 3.7 points against 4.1 without, on nine traces on
2026-11-28, within a live run's own spread of 3 to 5 points), and neither
version foretold the live effect of a change to the order of the first
probes. So its figures are close to the live ones, not equal; a choice it
suggests must be confirmed live.

    .venv/bin/python benchmarks/policies/policy_pull_replica.py TRACE.csv:PROFILES:BUDGET[:SEED] ...
    .venv/bin/python benchmarks/policies/policy_pull_replica.py --pool-strength 1 --pool-strength 8 \\
        --explore 0 --explore 0.2 TRACE.csv:PROFILES:BUDGET ...
    .venv/bin/python benchmarks/policies/policy_pull_replica.py --chronon-seconds 6048 \\
        --predicted off --predicted sup --predicted fbsup TRACE.csv:PROFILES:BUDGET ...
    .venv/bin/python benchmarks/policies/policy_pull_replica.py --co-update 0.5 TRACE.csv:PROFILES:BUDGET ...

``--co-update R`` hands the allocator the co-update model's hints
(``proxy.core.coupdate.CoUpdates``, told every probe's finds) with ``CaptureExplore``'s
``react`` threshold ``R`` (0, the default: no hints), in every column.

``--hints σ`` (repeatable, a column each; ``none``, ``c0.1``) gives each feed a publisher's
stated rate as its prior, and ``--changepoint RATIO:THRESHOLD`` (repeatable) resets a feed's
record at a detected regime shift (issue 45, section "Publisher hints and regime shifts").

``SEED`` (default 1, the live bench's) draws the workload's profiles. Each
column is one ``(z, level_exponent, pool strength, explore share, predicted)``
choice; the last line of the output gives, per column, the worst and the
median ratio to the better reader.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

import numpy as np

from proxy.bench.baselines import READER_ORDERS, AdaptiveParams, match_probes
from proxy.bench.live import BenchWorkload, reader_view, trace_workload
from proxy.bench.metrics import ProbeRec, Pub, cei_outcome, entry_outcome, quantiles
from proxy.core.changepoint import ShiftDetector
from proxy.core.coupdate import CoUpdates
from proxy.core.discovery import (
    CaptureExplore,
    TailFloor,
    revisit_bound,
    tail_period,
    waiting_share,
)
from proxy.core.hazard import AgeHazard
from proxy.core.rates import CycleShape, pooled_rates
from proxy.rules import FeedUpdateModels
from proxy.service._feeds import update_model_settings
from proxy.service.loop import (
    COORDINATION_ROUNDS,
    EVIDENCE_FADE,
    EXPLORE_SHARE,
    LEVEL_EXPONENT,
    OPTIMISM_Z,
    POOL_STRENGTH,
    TAIL_POOL_STRENGTH,
    UNFUNDED_CATCH,
)
from proxy.service.predicted import Predicted, PredictedProbes

LENGTH = 0.3  # seconds per chronon, as the live bench
ORIGIN = 1.7e9  # model seconds of chronon 0
WEEK = 7 * 86_400.0
PLACEHOLDER = -1.0  # the chronon the live bench dates each feed's placeholder entry at, before its lead (about)
LEAD = 10  # the live bench's lead: its rules exist this many chronons before the run (LiveConfig.lead_chronons)
RATES = ("learnt", "run", "past")  # replay's rates: the service's, or an oracle's
CHRONONS, WINDOW, DAYS, RANK = 200, 10, 14, 3  # the live bench's defaults in docs/discovery.md
CLAIRVOYANT = "adm-edf"  # the clairvoyant's policy: the live bench's in docs/discovery.md's commands
TAIL_BUDGET = 0.3  # the service's PROXY_DISCOVERY_TAIL_BUDGET (proxy.core.discovery.TailFloor; with a revisit bound)
TAIL_TARGET = 0.1  # the service's PROXY_DISCOVERY_TAIL_TARGET (TailFloor.target: the adaptive floor)
TAIL_HOPELESS = 0.2  # the service's PROXY_DISCOVERY_TAIL_HOPELESS (TailFloor.hopeless)
TAIL_STICKY = 0  # the service's PROXY_DISCOVERY_TAIL_STICKY (TailFloor.sticky)
FEED_WINDOW = 20  # entries per farm document (LiveConfig.feed_window): an entry pushed out is never seen
HAZARD = 0.0  # the age hazards' strength in every column (--hazard; PROXY_DISCOVERY_HAZARD; 0: off)


class Replay(NamedTuple):
    """One replay's figures: completeness (the proxy's, each reader's mean over the orders), probes and delays.

    ``delays``: detection-delay quantiles (``p50``, ``p90``, ``p99``, ``mean``, ``max``, in chronons:
    publication to the first probe that saw it, on the watched feeds) of ``proxy``, ``round-robin``
    and ``adaptive`` (pooled over the orders, at equal probes) and ``clairvoyant`` (the simulator
    told of every update at once, ``CLAIRVOYANT``, same budget).
    """

    live: float
    rr: float
    ad: float
    probes: int
    delays: dict[str, dict[str, float]]
    sim: float = math.nan
    """The clairvoyant's completeness (the live bench's ``sim``), at the same budget."""


class TraceSpec(NamedTuple):
    """A trace argument ``TRACE.csv:PROFILES:BUDGET[:SEED]`` (the live bench's options; SEED draws the profiles)."""

    path: Path
    profiles: int
    budget: int
    seed: int
    label: str


def parse_spec(spec: str) -> TraceSpec:
    """``spec`` as a :class:`TraceSpec`; the seed is 1 when not given, as the live bench's ``--seed``."""
    name, profiles, budget, *seed = spec.split(":")
    label = Path(name).name + (f" (seed {seed[0]})" if seed else "")
    return TraceSpec(Path(name), int(profiles), int(budget), int(seed[0]) if seed else 1, label)


def replay(path: Path, profiles: int, budget: int, z: float = OPTIMISM_Z, level_exponent: float = LEVEL_EXPONENT,
           predicted: str = "off", share: float = 1.0, length: float = LENGTH,
           kinds: frozenset[str] | None = None, *, pool: float = POOL_STRENGTH, explore: float = EXPLORE_SHARE,
           seed: int = 1, fade: float = EVIDENCE_FADE,
           rounds: int = COORDINATION_ROUNDS, rates: str = "learnt",
           rank: int = RANK, window: int = WINDOW, chronons: int = CHRONONS,
           days: float = DAYS, whole_windows: bool = False, lead: int = 0,
           orders: int = READER_ORDERS, revisit: float | None = None, hints: float | None = None,
           hint_strength: float | None = None,
           changepoint: tuple[float, float] | None = None, co_update: float = 0.0,
           tail_budget: float = TAIL_BUDGET, tail_target: float | None = TAIL_TARGET,
           tail_hopeless: float = TAIL_HOPELESS, tail_sticky: int = TAIL_STICKY) -> tuple[float, float, float, int]:
    """Live-equivalent completeness, round-robin's and adaptive's at equal probes, and the probes.

    :func:`replay_run`'s first four figures (its arguments).
    """
    return replay_run(path, profiles, budget, z, level_exponent, predicted, share, length, kinds, pool=pool,
                      explore=explore, seed=seed, fade=fade, rounds=rounds, rates=rates, rank=rank,
                      window=window, chronons=chronons, days=days, whole_windows=whole_windows, lead=lead,
                      orders=orders, revisit=revisit, hints=hints, hint_strength=hint_strength,
                      changepoint=changepoint, co_update=co_update, tail_budget=tail_budget,
                      tail_target=tail_target, tail_hopeless=tail_hopeless, tail_sticky=tail_sticky)[:4]


def replay_run(path: Path, profiles: int, budget: int, z: float = OPTIMISM_Z,
               level_exponent: float = LEVEL_EXPONENT, predicted: str = "off", share: float = 1.0,
               length: float = LENGTH, kinds: frozenset[str] | None = None, *, pool: float = POOL_STRENGTH,
               explore: float = EXPLORE_SHARE, seed: int = 1, fade: float = EVIDENCE_FADE,
               rounds: int = COORDINATION_ROUNDS, rates: str = "learnt", rank: int = RANK, window: int = WINDOW,
               chronons: int = CHRONONS, days: float = DAYS, whole_windows: bool = False, lead: int = 0,
               orders: int = READER_ORDERS, revisit: float | None = None, hints: float | None = None,
               hint_strength: float | None = None, changepoint: tuple[float, float] | None = None, co_update: float = 0.0,
               tail_budget: float = TAIL_BUDGET, tail_target: float | None = TAIL_TARGET,
               tail_hopeless: float = TAIL_HOPELESS, tail_sticky: int = TAIL_STICKY) -> Replay:
    """One replay: live-equivalent completeness, the readers' at equal probes, the probes, the delays.

    ``predicted``: the service's predicted EIs (``off``, ``sup``, ``fbsup``), given at most
    ``share`` of the budget before the background allocation, as the loop does at 1.
    ``length``: seconds per chronon on the models' clock (the live bench's 0.3 s squeezes
    two weeks into a minute, faster than any model's prior expects updates).
    ``pool``, ``explore``: the loop's ``POOL_STRENGTH`` and ``EXPLORE_SHARE``; ``seed``: the
    workload's profiles (the live bench's ``--seed``). ``rates``: what the allocation is given,
    ``learnt`` (the service's pooled rates), ``run`` (each feed's true mean rate over the run:
    what perfect knowledge of the rates, not of the update times, would buy) or ``past`` (each
    feed's true rate so far, every update up to now, probed or not, with half an update of prior
    at the pool's pace: what knowing every feed's past, which only probes buy, is worth, without
    the future that ``run`` adds). ``rank``, ``window``, ``chronons``,
    ``days``: the live bench's ``--rank``, ``--window``, ``--chronons`` and ``--days``.
    ``whole_windows``: the service's completeness counts only the CEIs whose every EI has its
    whole window inside the run (the bench cuts the last ones at its end; ``proxy plan`` runs on
    past its horizon until they resolve); the readers' still count every CEI.
    ``lead``: chronons the loop runs before the run with the rules in place and every document
    holding only its placeholder, as the live bench's ``lead_chronons`` (``LEAD``); their
    probes are spent but not counted. 0, the default, starts the rules at chronon 0 (the
    figures of ``docs/discovery.md`` before 2026-11-28).
    ``orders``: feed orders the readers' figures are the mean over, as the live bench's
    ``--reader-orders`` (1: the feeds' own order, the figures of ``docs/discovery.md`` before
    2026-11-28's "One order is one draw").
    ``revisit``: the loop's revisit factor (``proxy.core.discovery.revisit_bound``; ``None`` or 0:
    no bound), as ``PROXY_DISCOVERY_REVISIT_FACTOR``: every watched feed is then shown to the
    allocator, those no rule waits for now at weight 0, so the bound covers them too.
    ``hints``: publisher hints as priors (``PROXY_DISCOVERY_PUBLISHER_HINTS``), each feed's stated
    rate its true mean rate over the trace's replayed chronons times ``exp(hints · N(0, 1))`` (drawn
    per feed, seeded by the workload's seed: the error of a publisher's round "hourly" or "daily"),
    worth ``hint_strength`` pseudo-updates (default the pool's); ``None``: none, as the real trace
    carries none; negative: every feed states ``-hints`` updates a chronon, whatever its pace (a
    platform's default, as WordPress's "hourly, 1" in every blog's feed).
    ``changepoint``: ``(ratio, threshold)`` of a ``ShiftDetector`` whose record replaces a feed's
    once it detects a regime shift (``PROXY_DISCOVERY_CHANGEPOINT``); ``None``: off.
    ``tail_budget``: the tail floor's share of the budget (``PROXY_DISCOVERY_TAIL_BUDGET``,
    ``proxy.core.discovery.TailFloor``), with a revisit bound only (as the loop: the feeds no rule
    waits for are shown only then); 0: off. ``tail_target``, ``tail_hopeless``: the adaptive floor's
    ``TailFloor.target`` and ``hopeless`` (``None`` and 1: the fixed floor of ``docs/discovery.md``'s
    "The tail where the updates are"); ``tail_sticky``: its ``TailFloor.sticky`` (0: not sticky).
    ``co_update``: the co-update hints' react threshold (``CaptureExplore``'s ``react``,
    ``proxy.core.coupdate.CoUpdates``; 0: no hints).
    ``HAZARD`` (the module's, set by ``--hazard``): the age hazards' shrinkage strength
    (``proxy.core.hazard.AgeHazard``, told every probe's document; a feed without a cycle is read at
    its age since its last publication); 0: off.
    """
    if rates not in RATES:
        raise ValueError(f"rates must be one of {', '.join(RATES)}, got {rates!r}")
    bw = trace_workload(path, chronons=chronons, days=days, profiles=profiles, rank=rank, window=window, seed=seed,
                        budget=budget)
    ups = bw.updates
    watches = [tuple(w) for w in bw.watched]
    covered: list[dict[int, int]] = [{} for _ in watches]
    prev = [-1] * len(watches)
    alive = [True] * len(watches)
    watched = sorted({r for w in watches for r in w})
    rules_of: dict[int, list[int]] = defaultdict(list)
    for i, w in enumerate(watches):
        for r in w:
            rules_of[r].append(i)
    models = FeedUpdateModels(update_model_settings(length))
    said: dict[int, float] = {}  # the publishers' stated rates, per chronon
    if hints is not None and hints < 0:  # a platform's default: every feed states the same -hints a chronon
        said = dict.fromkeys(watched, -hints)
    elif hints is not None:
        noise = np.random.default_rng(seed)
        said = {r: max(len(ups[r]), 0.5) / chronons * math.exp(hints * noise.standard_normal()) for r in watched}
    detector = None if changepoint is None else ShiftDetector(*changepoint)
    believed: dict[int, float] = {}  # each feed's last rate given to the allocator (the detector's prior)
    last: dict[int, int | None] = dict.fromkeys(watched)
    last_at: dict[int, float] = {}
    evidence = dict.fromkeys(watched, (0.0, 0.0))  # FeedSlot.evidence
    shapes: dict[int, CycleShape | None] = dict.fromkeys(watched)  # FeedSlot.shape
    allocator = CaptureExplore(epsilon=explore, level_exponent=level_exponent, coordination_rounds=rounds,
                               unfunded=UNFUNDED_CATCH, react=co_update or 0.5)
    co = CoUpdates() if co_update > 0 else None
    ages = AgeHazard(strength=HAZARD) if HAZARD > 0 else None
    paced: dict[int, float] = {}  # each feed's last rate given to the allocator (what the age table is relative to)
    mode = Predicted(predicted)
    planner = (None if mode is Predicted.OFF
               else PredictedProbes(models, ORIGIN, length, feedback=mode is Predicted.FBSUP, kinds=kinds))

    def dated(u: int) -> float:
        """When the farm dates update ``u``: published just before its chronon, in whole seconds."""
        return float(math.floor(ORIGIN + (u - 0.1) * length))

    placeholder = PLACEHOLDER - lead  # dated a chronon before the rules exist
    probes: list[ProbeRec] = []
    for t in range(-lead, chronons):
        weight: dict[int, float] = defaultdict(float)
        groups: list[tuple[list[int], float]] = []  # TriggerEvaluator.update_groups
        for i, w in enumerate(watches):
            left = [r for r in w if r not in covered[i]]
            if left:
                groups.append((left, waiting_share(len(left), alive[i])))
            for r in left:
                weight[r] += groups[-1][1]
        waits = {r: w for r, w in weight.items() if w > 0}
        first = [] if planner is None else planner.pick(math.ceil(share * budget), t, waits, window, set())
        feeds = [r for r in watched if r in waits and r not in first]
        if rates == "past":
            seen = [sum(1 for u in ups[r] if u <= t) for r in feeds]
            pace = (sum(seen) + 1.0) / (len(feeds) * (max(t, 0) + 1.0) + 1.0)
            rate = [(c + 0.5) / (max(t, 0) + 1.0 + 0.5 / pace) for c in seen]
        elif rates == "run":
            rate = [max(len(ups[r]) / chronons, 1e-9) for r in feeds]
        else:
            records = [evidence[r] if detector is None or (cp := detector.record(r)) is None
                       else (cp[0], cp[1] * length) for r in feeds]
            rate = pooled_rates([n for n, _ in records], [e / length for _, e in records], pool, z,
                                unseen=[0.0 if last[r] is None else float(t - last[r]) for r in feeds], fade=fade,
                                prior=[said.get(r, math.nan) for r in feeds] if said else None,
                                prior_strength=hint_strength)
            believed.update(zip(feeds, rate, strict=True))
        bound = None
        tail, tail_rate = None, None
        paced.update(zip(feeds, rate, strict=True))
        shown = [shapes[r] if ages is None or shapes[r] is not None else ages.shape(r, t) for r in feeds]
        if revisit:  # ChrononLoop._background: every watched feed, those no rule waits for at weight 0,
            # rate 0 and no cycle, so that only the bound probes them
            extra = [r for r in watched if r not in waits and r not in first]
            feeds, rate, shown = feeds + extra, list(rate) + [0.0] * len(extra), shown + [None] * len(extra)
            bound = revisit_bound(budget, len(feeds), window, revisit)
            if tail_budget > 0:  # ChrononLoop._background: every shown feed's own pace, barely pooled
                tail = TailFloor(tail_period(budget, len(feeds), window), tail_budget, target=tail_target,
                                 hopeless=tail_hopeless, sticky=tail_sticky)
                tail_rate = pooled_rates([evidence[r][0] for r in feeds], [evidence[r][1] / length for r in feeds],
                                         TAIL_POOL_STRENGTH, 0.0, fade=fade,
                                         unseen=[0.0 if last[r] is None else float(t - last[r]) for r in feeds])
        lasts = [last[r] for r in feeds]
        hint = None if co is None else co.hints(t, window, feeds, lasts, rate)
        picked = first + allocator.pick(budget - len(first), t, feeds, lasts, rate,
                                        [waits.get(r, 0.0) for r in feeds], window, shape=shown,
                                        groups=lambda g=groups: g, revisit=bound, tail=tail, tail_rate=tail_rate, hint=hint)
        for r in picked:
            if t >= 0:  # the lead's probes are not the run's
                probes.append(ProbeRec(r, t, float(t), True))
            at = ORIGIN + t * length
            before = last[r]
            # The first probe's changes are those dated since the rules' install (before chronon 0):
            # TriggerEvaluator._first_probe_updates.
            found = [u for u in ups[r] if (before is None or before < u) and u <= t]
            if co is not None:
                co.observe(r, t, found)
            if before is not None:
                models.observe_probe(r, last_at[r], at, len(found), [dated(u) for u in found])
                if detector is not None and t >= 0:
                    detector.observe(r, t - before, len(found), max(believed.get(r, 1.0 / chronons), 1e-9))
            for i in rules_of[r] if found else ():
                for u in found:  # each change in turn, as TriggerEvaluator.on_probe (update_chronons)
                    if u <= prev[i] or r in covered[i]:
                        continue
                    alive[i] = alive[i] and t <= u + window
                    covered[i][r] = u
                    if len(covered[i]) == len(watches[i]):
                        prev[i], covered[i], alive[i] = max(covered[i].values()), {}, True
            # The farm's document: its placeholder entry (dated a chronon before the rules exist), then
            # the updates so far, the newest 20.
            models.observe_document(r, at, [dated(u) for u in [placeholder, *(u for u in ups[r] if u <= t)]][-20:])
            if ages is not None:  # the document's dates, in chronons, as the loop converts them
                ages.observe(r, t, [(dated(u) - ORIGIN) / length
                                    for u in [placeholder, *(u for u in ups[r] if u <= t)]][-20:],
                             paced.get(r, 1.0 / chronons))
            last[r], last_at[r] = t, at
            if planner is not None:
                planner.on_probe(r, t, before is not None and bool(found))
            evidence[r] = models.evidence(r)  # FeedSlot.learn_rate
            cycle = models.cycle_profile(r)
            shapes[r] = None if cycle is None else CycleShape((cycle[0] - ORIGIN) / length, cycle[1] / length,
                                                              cycle[2])
    scored = bw.workload.ceis
    if whole_windows:
        scored = tuple(c for c in scored if all(e.start + window <= chronons - 1 for e in c.eis))
    live = cei_outcome(scored, probes).completeness
    delays: dict[str, dict[str, float]] = {}
    pubs = [Pub(r, float(u)) for r in watched for u in ups[r]]
    delays["proxy"] = quantiles(entry_outcome(pubs, probes, FEED_WINDOW).delays)
    key = (str(path), profiles, budget, seed, rank, window, chronons, days, len(probes), orders)
    if key not in _BASELINES:  # the readers and the clairvoyant do not depend on the proxy's settings
        _BASELINES[key] = _baselines(bw, watched, pubs, chronons, len(probes), orders)
    figures, others = _BASELINES[key]
    delays.update(others)
    return Replay(live, figures[0], figures[1], len(probes), delays, figures[2])


_BASELINES: dict[tuple[object, ...], tuple[list[float], dict[str, dict[str, float]]]] = {}
"""The readers' and the clairvoyant's figures per workload and probes: one computation per trace, not per column."""


def _baselines(bw: BenchWorkload, watched: list[int], pubs: list[Pub], chronons: int, probes: int,
               orders: int) -> tuple[list[float], dict[str, dict[str, float]]]:
    """Both readers' completeness at ``probes`` (mean over ``orders``) and the clairvoyant's, and the delays of all three."""
    from proxy.sim.run import simulate

    view = reader_view(bw)
    params = AdaptiveParams(max_interval=chronons // 2, lookback=chronons // 5, window=20)
    reader_pubs = [Pub(view.index[p.resource], p.time) for p in pubs]
    figures: list[float] = []
    delays: dict[str, dict[str, float]] = {}
    for kind in ("round-robin", "adaptive"):
        eq = match_probes(kind, view.ceis, view.updates, chronons, probes, params, orders)
        figures.append(eq.completeness)
        seen = [entry_outcome(reader_pubs, [ProbeRec(r, t, float(t)) for t, r in s], FEED_WINDOW).delays
                for s in eq.schedules]
        delays[kind] = quantiles([d for one in seen for d in one])  # pooled over the orders, as the live bench
    sim = simulate(bw.workload, CLAIRVOYANT)
    delays["clairvoyant"] = quantiles(entry_outcome(pubs, [ProbeRec(r, t, float(t)) for t, r in sim.schedule],
                                                    FEED_WINDOW).delays)
    figures.append(sim.completeness)
    return figures, delays


def _mode(text: str) -> tuple[str, str, float, frozenset[str] | None]:
    """``fbsup/periodic,seasonal@0.5`` -> (text, mode, share, kinds)."""
    rest, _, share = text.partition("@")
    mode, _, kinds = rest.partition("/")
    return text, mode, float(share or 1.0), frozenset(kinds.split(",")) if kinds else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("traces", nargs="+",
                        help="TRACE.csv:PROFILES:BUDGET[:SEED] (the live bench's options; SEED draws the profiles)")
    parser.add_argument("--z", type=float, action="append", help=f"optimism quantiles to compare (default {OPTIMISM_Z:g})")
    parser.add_argument("--level-exponent", type=float, action="append",
                        help=f"trust in the rates to compare, in [0, 1] (default {LEVEL_EXPONENT:g})")
    parser.add_argument("--pool-strength", type=float, action="append",
                        help=f"pseudo-updates of the pool's rate to compare (default {POOL_STRENGTH:g})")
    parser.add_argument("--explore", type=float, action="append",
                        help=f"stalest-first shares of the budget to compare (default {EXPLORE_SHARE:g})")
    parser.add_argument("--fade", type=float, default=EVIDENCE_FADE,
                        help=f"pool updates per halving of an unprobed feed's record (default {EVIDENCE_FADE:g}; "
                             "inf: records never fade)")
    parser.add_argument("--rounds", type=int, default=COORDINATION_ROUNDS,
                        help=f"rounds of coordinated weights behind the frequencies (default {COORDINATION_ROUNDS}; "
                             "0: the plain weights)")
    parser.add_argument("--predicted", action="append",
                        help="predicted EIs to compare: off, sup, fbsup, optionally /KINDS (the model kinds "
                             "that get them) and @SHARE of the budget (fbsup/periodic,seasonal@0.5); default off")
    parser.add_argument("--window", type=int, default=WINDOW, help=f"the rules' window W (default {WINDOW})")
    parser.add_argument("--rank", type=int, default=RANK, help=f"largest profile rank (default {RANK})")
    parser.add_argument("--chronons", type=int, default=CHRONONS, help=f"chronons K (default {CHRONONS})")
    parser.add_argument("--days", type=float, default=DAYS, help=f"days of the trace replayed (default {DAYS:g})")
    parser.add_argument("--rates", choices=RATES, default="learnt",
                        help="the rates the allocation gets: learnt (the service's), run (each feed's true mean "
                             "over the run) or past (its true rate so far, probed or not)")
    parser.add_argument("--chronon-seconds", type=float, default=LENGTH,
                        help=f"seconds per chronon on the models' clock (default {LENGTH}, the live bench's; "
                             f"{DAYS * 86_400 // CHRONONS}: the trace's real time)")
    parser.add_argument("--lead", type=int, default=0,
                        help=f"chronons the rules exist before the run, their probes finding only the placeholder "
                             f"(default 0; {LEAD}: as the live bench)")
    parser.add_argument("--reader-orders", type=int, default=READER_ORDERS,
                        help=f"feed orders the readers' figures are the mean over (default {READER_ORDERS}, the "
                             "live bench's; 1: the feeds' own order alone)")
    parser.add_argument("--hints", type=_hint, action="append",
                        help="publisher hints to compare: the noise (log-normal sigma) of each feed's stated rate "
                             "around its true one; c0.1: every feed states 0.1 a chronon (a platform's default); "
                             "none (the default)")
    parser.add_argument("--hint-strength", type=float, default=None,
                        help="pseudo-updates a stated rate is worth (default the pool strength)")
    parser.add_argument("--changepoint", action="append",
                        help="regime-shift detectors to compare: RATIO:THRESHOLD, or off (the default)")
    parser.add_argument("--tail-budget", type=float, default=TAIL_BUDGET,
                        help=f"the tail floor's share of the budget, in every column, with --revisit only "
                             f"(PROXY_DISCOVERY_TAIL_BUDGET; default {TAIL_BUDGET:g}, the service's; 0: off)")
    parser.add_argument("--tail-target", type=float, default=TAIL_TARGET,
                        help="the adaptive tail floor: the share of the expected update mass allowed to wait "
                             f"past the floor's period (TailFloor.target; default {TAIL_TARGET:g}, the service's; "
                             "0: the fixed floor)")
    parser.add_argument("--tail-hopeless", type=float, default=TAIL_HOPELESS,
                        help="no floor when its budget share cannot bring that share to this (TailFloor.hopeless; "
                             f"default {TAIL_HOPELESS:g}, the service's; 1: never skipped)")
    parser.add_argument("--tail-sticky", type=int, default=TAIL_STICKY,
                        help="a recomputation whose adaptive floor takes no feed keeps the last floor's feeds, "
                             "up to this many in a row (TailFloor.sticky, PROXY_DISCOVERY_TAIL_STICKY; "
                             f"default {TAIL_STICKY}, the service's; 0: not sticky)")
    parser.add_argument("--hazard", type=float, default=0.0,
                        help="the age hazards' shrinkage strength, in every column (proxy.core.hazard.AgeHazard, "
                             "PROXY_DISCOVERY_HAZARD; 0: off, the default)")
    parser.add_argument("--co-update", type=float, default=0.0,
                        help="react threshold of the co-update hints, in every column (proxy.core.coupdate; "
                             "0: no hints, the default)")
    parser.add_argument("--revisit", type=float, action="append",
                        help="revisit factors to compare (proxy.core.discovery.revisit_bound; 0: no bound, the "
                             "default)")
    args = parser.parse_args()
    global HAZARD  # one setting for every column, as --tail-budget
    HAZARD = args.hazard
    modes = [_mode(m) for m in args.predicted or ["off"]]
    columns = [(z, e, pool, explore, revisit, hint, cp, *m) for z in (args.z or [OPTIMISM_Z])
               for e in (args.level_exponent or [LEVEL_EXPONENT])
               for pool in (args.pool_strength or [POOL_STRENGTH])
               for explore in (args.explore or [EXPLORE_SHARE]) for revisit in (args.revisit or [0.0])
               for hint in (args.hints or [None]) for cp in (args.changepoint or ["off"])
               for m in modes]
    heads = [f"z = {z:g}, e = {e:g}, pool {pool:g}, explore {explore:g}"
             + ("" if args.revisit is None else f", revisit {revisit:g}")
             + ("" if args.hints is None else (", no hints" if hint is None else f", every feed states {-hint:g}"
                                                if hint < 0 else f", hints σ {hint:g}"))
             + ("" if args.changepoint is None else f", change points {cp}")
             + ("" if args.predicted is None else f", {text}")
             for z, e, pool, explore, revisit, hint, cp, text, *_ in columns]
    # Each cell: completeness (ratio to the better reader) · detection delay p50/p90/p99 in chronons.
    print("| trace | profiles | budget | round-robin | adaptive | clairvoyant | " + " | ".join(heads) + " |")
    print("|---|---:|---:|---:|---:|---:|" + "---:|" * len(columns))
    ratios: list[list[float]] = [[] for _ in columns]
    tails: list[list[float]] = [[] for _ in columns]  # p90 over round-robin's p90
    level: list[int] = [0] * len(columns)  # traces with p90 <= the better reader's p90
    for spec in args.traces:
        tr = parse_spec(spec)
        cells = []
        rr = ad = math.nan
        delays: dict[str, dict[str, float]] = {}
        for k, (z, e, pool, explore, revisit, hint, cp, _, mode, share, kinds) in enumerate(columns):
            run = replay_run(tr.path, tr.profiles, tr.budget, z, e, mode, share,
                             args.chronon_seconds, kinds, pool=pool, explore=explore,
                             seed=tr.seed, fade=args.fade,
                             rounds=args.rounds, rank=args.rank, window=args.window,
                             rates=args.rates, lead=args.lead, orders=args.reader_orders,
                             co_update=args.co_update, tail_budget=args.tail_budget,
                             tail_target=args.tail_target or None, tail_hopeless=args.tail_hopeless,
                             tail_sticky=args.tail_sticky, chronons=args.chronons, days=args.days, revisit=revisit or None,
                             hints=hint, hint_strength=args.hint_strength,
                             changepoint=None if cp == "off" else _ratio_threshold(cp))
            live, rr, ad, delays = run.live, run.rr, run.ad, run.delays
            ratios[k].append(live / max(rr, ad))
            tails[k].append(delays["proxy"]["p90"] / delays["round-robin"]["p90"])
            better = "round-robin" if rr >= ad else "adaptive"
            level[k] += delays["proxy"]["p90"] <= delays[better]["p90"]
            cells.append(f"{100 * live:.1f} % ({ratios[k][-1]:.2f}×) · {_q(delays['proxy'])}")
        print(f"| {tr.label} | {tr.profiles} | {tr.budget} | {100 * rr:.1f} % · {_q(delays['round-robin'])} | "
              f"{100 * ad:.1f} % · {_q(delays['adaptive'])} | {_q(delays['clairvoyant'])} | "
              + " | ".join(cells) + " |")
    print("| worst / median ratio | | | | | | "
          + " | ".join(f"{min(r):.2f}× / {statistics.median(r):.2f}×" for r in ratios) + " |")
    print("| p90 / round-robin's p90: median, worst; traces with p90 <= the better reader's | | | | | | "
          + " | ".join(f"{statistics.median(t):.2f}, {max(t):.2f}; {n} of {len(t)}" for t, n in zip(tails, level,
                                                                                                strict=True))
          + " |")


def _hint(text: str) -> float | None:
    """``none`` -> None, ``0.5`` -> 0.5 (a noise), ``c0.1`` -> -0.1 (every feed states 0.1 a chronon)."""
    if text == "none":
        return None
    if text.startswith("c"):
        return -float(text[1:])
    return float(text)


def _ratio_threshold(text: str) -> tuple[float, float]:
    """``4:5`` -> (4.0, 5.0): a ShiftDetector's ratio and threshold."""
    ratio, _, threshold = text.partition(":")
    return float(ratio), float(threshold or 5.0)


def _q(d: dict[str, float]) -> str:
    """``p50/p90/p99`` in chronons, ``-`` where nothing was seen."""
    return "/".join("-" if d[k] != d[k] else f"{d[k]:.0f}" for k in ("p50", "p90", "p99"))


if __name__ == "__main__":
    main()
