"""Pull-only simulation: updates of feeds that never ping are found by probing them.

In the pushed mode (:func:`proxy.sim.run.simulate`) an EI that starts at an
update of its resource — an *update EI*: one whose ``reveal`` equals its
``start``, as ``proxy sim gen --reveal update`` writes them — is known at its
start, as if the feed had pinged. Here it is known only when a successful
probe of its resource at ``p >= start`` sees the entry (issue 18; the
service's ``TriggerEvaluator.on_probe``, ``docs/discovery.md``): it is then
captured by that very probe if ``p <= finish``, else its CEI is missed. Every
other EI keeps its reveal (its CEI's release by default).

Each chronon ``t``, in this order:

1. ``engine.advance(t)``; EIs whose static reveal is ``t`` join the engine;
2. a planner, if any (:class:`proxy.core.sup.SupPlanner`: SUP or fbSUP),
   adds its predicted EIs as rank-1 CEIs (ids ``~sup…``, profile ``~sup``):
   they compete with the known EIs for the budget in the same engine;
3. the policy selects at most ``C_t`` resources from the engine's pool;
4. the budget left goes to background probes of the *watched* resources
   (those with an update EI; weight = the profiles watching them) by one of
   the :class:`Background` allocations (:mod:`proxy.core.discovery`), with
   rates from a :class:`proxy.core.rates.RateModel`;
5. every probe succeeds; a probe of ``r`` finds the updates of ``r`` since
   its previous probe (the first probe compares with the epoch start: the
   proxy took its baseline before chronon 0), reveals their update EIs to
   the engine, feeds the planner (fbSUP) and the online rate model.

Captures are scored by :mod:`proxy.sim.score` from the schedule alone, as
in the pushed mode: how the policy learnt of an EI changes the schedule, not
what a schedule captures.

What the proxy "knows" up front, and says so: the profiles (which feeds each
watches, hence the weights), the rules' window and life (for SUP), and with
``rates=known`` each feed's true rate (clairvoyant about rates, not times).
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from proxy.core.coupdate import CoUpdates
from proxy.core.discovery import (
    CaptureExplore,
    FrequencyStride,
    MemorylessSqrt,
    RoundRobinWatch,
    background_probes,
    capture_frequencies,
    freshness_frequencies,
    revisit_bound,
    wic_probes,
)
from proxy.core.model import EI, Workload
from proxy.core.rates import KnownRates, OnlineRates, RateModel, UpdatePredictor
from proxy.core.sup import Life, SupPlanner, WatchSpec
from proxy.sim.result import Result, result_of

PLANNERS = ("sup", "fbsup")


class Reveal(StrEnum):
    """How the simulated proxy learns of update EIs."""

    PUSHED = "pushed"  # at their reveal (a ping at the update): the spec's semantics
    PULL = "pull"  # only when a probe finds the update


class Background(StrEnum):
    """Where the budget the policy leaves goes (``docs/discovery-sim.md`` compares them)."""

    NONE = "none"
    GREEDY = "greedy"  # proxy.core.discovery.background_probes: w·P(changed since last probe)
    WIC = "wic"  # paper 003's index for window(W) EIs: w·λ·min(elapsed, W+1)
    ROUND_ROBIN = "round-robin"  # a plain reader's cycle over watched feeds
    SQRT = "sqrt"  # paper 004: memoryless, p ∝ sqrt(w·λ)
    FRESHNESS = "freshness"  # Cho & Garcia-Molina's freshness-optimal frequencies, strided
    CAPTURE = "capture"  # capture-optimal frequencies for window(W) EIs, strided
    CAPTURE_EXPLORE = "capture-explore"  # capture on optimistic (UCB) rates + a stalest-first floor + greedy fill


class Rates(StrEnum):
    """Which rate model background probes and SUP use."""

    KNOWN = "known"  # each feed's true mean rate over the epoch (updates / K)
    ONLINE = "online"  # learnt from discovered updates (proxy.core.rates.OnlineRates)


@dataclass(frozen=True, slots=True)
class PullOptions:
    """How a pull-only run learns and spends its spare budget.

    ``updates``: the true update chronons per resource (default: the starts
    of the update EIs, i.e. only updates that open an EI are visible).
    ``rate_model`` / ``predictor`` override ``rates`` (e.g. a seasonal
    :class:`KnownRates`, or FPN's :class:`proxy.core.rates.PlannedUpdates`).
    ``every``, ``window``, ``life``: the watch rule SUP plans for (default:
    from the workload's ``meta``, else inferred from the update EIs).
    ``refresh``: chronons between recomputations of frequency allocations.
    ``explore_z``, ``explore_epsilon``: ``capture-explore``'s optimism (the
    posterior quantile, in standard deviations) and its share of the spare
    budget for the stalest feeds (:class:`proxy.core.discovery.CaptureExplore`).
    ``revisit_factor``: ``capture-explore``'s revisit bound
    (:func:`proxy.core.discovery.revisit_bound` over the watched feeds and the
    chronon's budget; 0: none), as the service's ``PROXY_DISCOVERY_REVISIT_FACTOR``.
    ``co_update``: ``capture-explore`` gets the hints of a co-update model told every
    probe's finds (:class:`proxy.core.coupdate.CoUpdates`), as the service's
    ``PROXY_DISCOVERY_COUPDATE``.
    """

    background: Background = Background.GREEDY
    rates: Rates = Rates.KNOWN
    planner: str | None = None
    seed: int = 0
    updates: Sequence[Sequence[int]] | None = None
    rate_model: RateModel | None = None
    predictor: UpdatePredictor | None = None
    every: int | None = None
    window: int | None = None
    life: Life | None = None
    prior_count: float = 1.0
    prior_chronons: float = 10.0
    refresh: int = 10
    explore_z: float = 1.0
    explore_epsilon: float = 0.2
    revisit_factor: float = 0.0
    co_update: bool = False
    extra: dict[str, object] = field(default_factory=dict)


def is_update_ei(ei: EI) -> bool:
    """An EI that starts at an update of its resource: its reveal is its start (``--reveal update``)."""
    return ei.reveal is not None and ei.reveal == ei.start


def update_eis(workload: Workload) -> int:
    """How many EIs of ``workload`` a pull-only proxy must discover."""
    return sum(is_update_ei(e) for c in workload.ceis for e in c.eis)


def watch_specs(workload: Workload, options: PullOptions) -> list[WatchSpec]:
    """One watch rule per watched resource, with the rule's ``every``, ``window`` and ``life``."""
    params = workload.meta.get("params")
    params = params if isinstance(params, dict) else {}
    every = options.every or int(workload.meta.get("every", 1))  # type: ignore[call-overload]
    life = options.life or Life(str(params.get("life", "window")))
    widths: dict[int, int] = {}
    for cei in workload.ceis:
        for e in cei.eis:
            if is_update_ei(e):
                widths[e.resource] = max(widths.get(e.resource, 0), e.finish - e.start)
    if options.window is not None:
        window = options.window
    elif "window" in params:
        window = int(params["window"])
    else:
        window = max(widths.values(), default=0)
    return [WatchSpec(r, every, window, life) for r in sorted(widths)]


def true_updates(workload: Workload, options: PullOptions) -> list[list[int]]:
    """Update chronons per resource: ``options.updates``, else the update EIs' starts."""
    if options.updates is not None:
        if len(options.updates) != workload.resources:
            raise ValueError(f"updates cover {len(options.updates)} resources, the workload {workload.resources}")
        return [sorted(set(u)) for u in options.updates]
    per: list[set[int]] = [set() for _ in range(workload.resources)]
    for cei in workload.ceis:
        for e in cei.eis:
            if is_update_ei(e):
                per[e.resource].add(e.start)
    return [sorted(s) for s in per]


def updates_from_meta(workload: Workload) -> list[list[int]] | None:
    """The true update chronons a workload file remembers, if any.

    ``meta.update_chronons`` (written by :mod:`proxy.sim.synthetic`), or the
    Poisson stage of ``proxy.sim.generate/1`` replayed from its seed and
    parameters (stage 1 draws first from the seeded generator). ``None``
    otherwise (e.g. a trace workload): then only the update EIs' starts are
    visible as updates.
    """
    meta = workload.meta
    raw = meta.get("update_chronons")
    if isinstance(raw, list) and len(raw) == workload.resources:
        return [[int(t) for t in ts] for ts in raw]
    params = meta.get("params")
    if meta.get("generator") == "proxy.sim.generate/1" and "trace" not in meta and isinstance(params, dict):
        from proxy.sim.generate import poisson_updates

        try:
            rng = np.random.default_rng(int(meta["seed"]))  # type: ignore[call-overload]
            ups = poisson_updates(rng, workload.resources, workload.chronons, float(params["lam"]),
                                  float(params.get("rate_sigma", 0.0)))
        except (KeyError, TypeError, ValueError):
            return None
        return ups
    return None


def simulate_pull(
    workload: Workload,
    policy_name: str,
    options: PullOptions | None = None,
    *,
    progress: Callable[[int], None] | None = None,
) -> Result:
    """Run ``policy_name`` pull-only over ``workload`` (``sup`` / ``fbsup``: the planner alone).

    ``sup`` and ``fbsup`` name paper 002's planners run stand-alone: their
    predicted EIs scheduled earliest-deadline-first (``s-edf-p``) and no
    background probes, unless ``options`` say otherwise. Any online policy
    may also run with ``options.planner`` set.
    """
    from proxy.core.engine import CeiState, Engine
    from proxy.core.policies import get_policy

    opts = options or PullOptions()
    planner_name = opts.planner
    engine_policy = policy_name
    if policy_name in PLANNERS:
        planner_name = policy_name
        engine_policy = "s-edf-p"
        if options is None or options.background is Background.GREEDY:
            opts = _replace_background(opts, Background.NONE)
    if planner_name is not None and planner_name not in PLANNERS:
        raise ValueError(f"unknown planner {planner_name!r}; valid: {', '.join(PLANNERS)}")
    get_policy(engine_policy)
    began = time.perf_counter()
    k, n = workload.chronons, workload.resources

    # What becomes known when: static reveals, and update EIs per resource by start.
    static_at: dict[int, list[tuple[int, EI]]] = defaultdict(list)  # t -> (CEI index, EI)
    hidden: dict[int, list[tuple[int, int, EI]]] = defaultdict(list)  # r -> (start, CEI index, EI)
    unknown = [0] * len(workload.ceis)
    watchers: dict[int, set[str]] = defaultdict(set)
    for ci, cei in enumerate(workload.ceis):
        rel = cei.effective_release
        for e in cei.eis:
            unknown[ci] += 1
            if is_update_ei(e):
                hidden[e.resource].append((e.start, ci, e))
                watchers[e.resource].add(cei.profile)
            else:
                static_at[max(rel, e.reveal if e.reveal is not None else rel)].append((ci, e))
    for lst in hidden.values():
        lst.sort(key=lambda x: (x[0], x[1]))
    next_hidden = dict.fromkeys(hidden, 0)
    in_engine = [False] * len(workload.ceis)

    engine = Engine(resources=n)

    def make_known(ci: int, e: EI) -> None:
        cei = workload.ceis[ci]
        unknown[ci] -= 1
        seal = unknown[ci] == 0
        if not in_engine[ci]:
            in_engine[ci] = True
            engine.add_cei(cei.id, cei.profile, [(e.resource, e.start, e.finish)], sealed=seal)
        else:
            engine.reveal_ei(cei.id, e.resource, e.start, e.finish, seal=seal)

    updates = true_updates(workload, opts)
    watched = sorted(watchers)
    weight = [float(len(watchers[r])) for r in watched]
    online = OnlineRates(opts.prior_count, opts.prior_chronons) if opts.rates is Rates.ONLINE else None
    if online is not None:
        for r in watched:
            online.observe_probe(r, -1, 0)  # the baseline before the epoch
    model: RateModel
    if opts.rate_model is not None:
        model = opts.rate_model
    elif online is not None:
        model = online
    else:
        model = KnownRates.from_counts([len(u) for u in updates], k)
    planner: SupPlanner | None = None
    if planner_name is not None:
        predictor = opts.predictor or (model if isinstance(model, UpdatePredictor) else None)
        if predictor is None:
            raise ValueError("the planner needs an UpdatePredictor: pass options.predictor")
        planner = SupPlanner(predictor, watch_specs(workload, opts), k, feedback=planner_name == "fbsup")
    specs_window = None
    if opts.background in (Background.WIC, Background.CAPTURE, Background.CAPTURE_EXPLORE):
        spec = watch_specs(workload, opts)
        specs_window = max((s.window for s in spec), default=0)
    rr = RoundRobinWatch()
    sqrt = MemorylessSqrt(np.random.default_rng(opts.seed))
    stride = FrequencyStride()
    explore = CaptureExplore(z=opts.explore_z, epsilon=opts.explore_epsilon, refresh=opts.refresh)
    co = CoUpdates() if opts.co_update and opts.background is Background.CAPTURE_EXPLORE else None
    freq: list[float] = []
    freq_at = -opts.refresh
    last_success: dict[int, int] = {}
    predicted = 0
    background_count = 0
    schedule: list[tuple[int, int]] = []
    step = max(1, k // 100)
    for t in range(k):
        engine.advance(t)
        for ci, e in static_at.get(t, ()):
            make_known(ci, e)
        if planner is not None:
            for pe in planner.plan(t):
                engine.add_cei(f"~sup{predicted:07d}", "~sup", [pe.probe_window()])
                predicted += 1
        cap = workload.budget.at(t)
        chosen = engine.select(cap, engine_policy)
        spare = cap - len(chosen)
        if spare > 0 and watched and opts.background is not Background.NONE:
            taken = set(chosen)
            cand = [r for r in watched if r not in taken]
            idx = {r: i for i, r in enumerate(watched)}
            w = [weight[idx[r]] for r in cand]
            lam = [model.rate(r, t) for r in cand]
            bg = _background(opts, spare, t, cand, [last_success.get(r, -1) for r in cand], lam, w,
                             specs_window, rr, sqrt, stride)
            if opts.background in (Background.FRESHNESS, Background.CAPTURE):
                if t - freq_at >= opts.refresh or len(freq) != len(watched):
                    freq_at = t
                    all_lam = [model.rate(r, t) for r in watched]
                    avg_spare = max(cap - len(chosen), 0)
                    if opts.background is Background.FRESHNESS:
                        freq = freshness_frequencies(all_lam, weight, avg_spare)
                    else:
                        freq = capture_frequencies(all_lam, weight, avg_spare, specs_window or 0)
                fmap = dict(zip(watched, freq, strict=True))
                bg = stride.pick(spare, cand, [fmap[r] for r in cand])
            if opts.background is Background.CAPTURE_EXPLORE:
                post = [online.posterior(r) for r in cand] if online is not None and opts.rate_model is None else None
                bound = (revisit_bound(cap, len(watched), specs_window or 0, opts.revisit_factor)
                         if opts.revisit_factor else None)
                hint = (None if co is None
                        else co.hints(t, specs_window or 0, cand, [last_success.get(r) for r in cand], lam))
                bg = explore.pick(spare, t, cand, [last_success.get(r, -1) for r in cand], lam, w,
                                  specs_window or 0, post, revisit=bound, hint=hint)
            background_count += len(bg)
            chosen = [*chosen, *bg]
        engine.probe(chosen)
        for r in chosen:
            prev = last_success.get(r, -1)
            ups = updates[r]
            found = bisect_right(ups, t) - bisect_right(ups, prev)
            if co is not None:
                co.observe(r, t, ups[bisect_right(ups, prev):bisect_right(ups, t)])
            last_success[r] = t
            waiting = hidden.get(r)
            if waiting is not None:
                i = next_hidden[r]
                while i < len(waiting) and waiting[i][0] <= t:
                    _, ci, e = waiting[i]
                    make_known(ci, e)
                    i += 1
                next_hidden[r] = i
            if planner is not None:
                planner.on_probe(r, t, found)
            if online is not None and r in watchers:
                online.observe_probe(r, t, found)
        engine.drain_events()
        schedule.extend((t, int(r)) for r in chosen)
        if progress is not None and ((t + 1) % step == 0 or t + 1 == k):
            progress(step if (t + 1) % step == 0 else (t + 1) % step)
    runtime = time.perf_counter() - began
    engine_captured = 0
    for cei in workload.ceis:
        with suppress(KeyError):  # never known to the proxy (no probe found its update): missed
            engine_captured += engine.state(cei.id) is CeiState.CAPTURED
    extra: dict[str, object] = {
        "reveal": Reveal.PULL.value,
        "engine_policy": engine_policy,
        "background": opts.background.value,
        "rates": "custom" if opts.rate_model is not None else opts.rates.value,
        "background_probes": background_count,
        "revisit_factor": opts.revisit_factor,
        "co_update": opts.co_update,
        "engine_captured": engine_captured,
        **opts.extra,
    }
    if planner is not None:
        extra["planner"] = planner_name
        extra["predicted_eis"] = predicted
        extra["feedback_eis"] = planner.extra
    return result_of(workload, policy_name, schedule, runtime, extra)


def _replace_background(opts: PullOptions, background: Background) -> PullOptions:
    from dataclasses import replace

    return replace(opts, background=background)


def _background(
    opts: PullOptions, spare: int, t: int, cand: list[int], last: list[int], lam: list[float], w: list[float],
    window: int | None, rr: RoundRobinWatch, sqrt: MemorylessSqrt, stride: FrequencyStride,
) -> list[int]:
    bg = opts.background
    if bg is Background.GREEDY:
        return background_probes(spare, t, cand, list(last), lam, w)
    if bg is Background.WIC:
        return wic_probes(spare, t, cand, list(last), lam, w, window or 0)
    if bg is Background.ROUND_ROBIN:
        return rr.pick(spare, cand)
    if bg is Background.SQRT:
        return sqrt.pick(spare, cand, lam, w)
    return []  # frequency allocations are picked by the caller (they need every watched feed)
