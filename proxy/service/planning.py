"""The budget plan of stored profiles under the learnt update models: ``proxy plan`` and ``GET /api/v1/plan``.

:func:`plan_inputs` turns stored profiles into :mod:`proxy.sim.plan`'s rules the
way the trigger evaluator compiles them (durations to chronons with the chronon
length, the default slack of one chronon, ``every`` anchored at the rule's saved
next fire, ``cron`` fire times over the horizon, active periods), and the
per-feed update models (seconds) into expected updates per chronon of the
horizon. :func:`run_plan` then runs the pure planner: the expected completeness
at a budget, and the least budget for a target (paper 002's dual problem).

Both the CLI (every user's profiles, the saved models) and the API (the
caller's profiles, the running service's models) use these. What it does not
do: read the database or the clock (callers pass profiles, models and the
first chronon), or decide anything for the running loop.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError as PydanticValidationError

from proxy.rules import FeedUpdateModels, ProfileSpec, parse_duration, to_chronons
from proxy.rules.evaluator import ALERT_SLACK
from proxy.rules.ports import ChrononMapping, first_chronon_from
from proxy.service.loop import EVIDENCE_FADE, OPTIMISM_Z, POOL_STRENGTH, background_allocator
from proxy.sim.plan import (
    GridRates,
    LeastBudget,
    PlanLearning,
    Planner,
    PlanPoint,
    PlanQuery,
    PlanRule,
    PlanTrigger,
    PlanWatch,
    every_fires,
)
from proxy.store import Profile

__all__ = ["PlanInputs", "PlanReport", "plan_inputs", "run_plan", "service_planner"]


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What the planner needs, copied out of the service (safe to hand to a worker thread).

    ``feeds``: the store id of each plan feed (plan feed ``i`` is ``feeds[i]``);
    ``skipped``: rules left out because they read a feed the proxy does not
    probe (deleted meanwhile) or their profile's stored spec does not validate;
    ``evidence``: each plan feed's record in its update model (updates, and
    chronons of complete observation: ``FeedUpdateModels.evidence``), from
    which the planned allocation learns the rates as the loop does
    (``proxy.sim.plan.PlanLearning``); ``None``: the allocation is given the
    planned rates.
    """

    rules: tuple[PlanRule, ...]
    rates: GridRates
    feeds: tuple[int, ...]
    profiles: int
    skipped: int
    start: int
    chronon_seconds: float
    evidence: tuple[tuple[float, float], ...] | None = None

    @property
    def horizon(self) -> int:
        return self.rates.chronons

    @property
    def unrecorded(self) -> int | None:
        """Feeds whose update model holds no record yet (never fetched): the plan learns them from nothing."""
        return None if self.evidence is None else sum(1 for _, exposure in self.evidence if exposure <= 0)


@dataclass(frozen=True, slots=True)
class PlanReport:
    """The plan: the expected completeness at ``budget`` and the least budget for ``target``."""

    inputs: PlanInputs
    policy: str
    futures: int
    seed: int
    current: PlanPoint
    least: LeastBudget
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The JSON document ``proxy plan --json`` prints and ``GET /api/v1/plan`` answers (docs/plan.md)."""
        i = self.inputs
        return {
            "profiles": i.profiles,
            "rules": len(i.rules),
            "skipped_rules": i.skipped,
            "feeds": len(i.feeds),
            "unrecorded_feeds": i.unrecorded,
            "horizon": i.horizon,
            "chronon_seconds": i.chronon_seconds,
            "futures": self.futures,
            "seed": self.seed,
            "policy": self.policy,
            "target": self.least.target,
            "current": _point(self.current),
            "least": None if self.least.point is None else _point(self.least.point),
            "best": None if self.least.best is None else _point(self.least.best),
            "max_budget": self.least.max_budget,
            "seconds": round(self.seconds, 3),
        }

    def lines(self) -> list[str]:
        """The human lines of ``proxy plan`` (stable: scripts may read them; docs/plan.md)."""
        i, cur, least = self.inputs, self.current, self.least
        out = [
            f"plan: {i.profiles} profiles, {len(i.rules)} rules, {len(i.feeds)} feeds; "
            f"horizon {i.horizon} chronons of {i.chronon_seconds:g} s, {self.futures} futures, "
            f"seed {self.seed}, policy {self.policy}"
        ]
        if cur.completeness is None:
            out.append(f"budget {cur.budget}: expected completeness n/a (no CEIs in the horizon)")
            out.append(f"least budget for {least.target:.2f}: n/a")
            return out
        out.append(f"budget {cur.budget}: expected completeness {cur.completeness:.3f} ± {cur.stderr:.3f} "
                   f"(probes/chronon {cur.probes_per_chronon:.1f})")
        if least.point is not None and least.point.completeness is not None:
            p = least.point
            out.append(f"least budget for {least.target:.2f}: {p.budget} (expected {p.completeness:.3f} "
                       f"± {p.stderr:.3f}, probes/chronon {p.probes_per_chronon:.1f})")
        elif least.best is not None and least.best.completeness is not None:
            b = least.best
            out.append(f"least budget for {least.target:.2f}: none up to {least.max_budget} "
                       f"(best {b.completeness:.3f} ± {b.stderr:.3f} at budget {b.budget})")
        else:
            out.append(f"least budget for {least.target:.2f}: n/a")
        return out


def _point(p: PlanPoint) -> dict[str, Any]:
    return {
        "budget": p.budget,
        "completeness": None if p.completeness is None else round(p.completeness, 6),
        "stderr": round(p.stderr, 6),
        "probes_per_chronon": round(p.probes_per_chronon, 6),
        "ceis": round(p.ceis, 3),
    }


def plan_inputs(
    profiles: Sequence[Profile],
    resource_of: Mapping[int, int],
    models: FeedUpdateModels,
    clock: ChrononMapping,
    start: int,
    horizon: int,
) -> PlanInputs:
    """Rules and expected updates per chronon for ``horizon`` chronons from chronon ``start``.

    ``resource_of`` maps a store feed id to its engine resource (the key of
    ``models``); the models' clock is POSIX seconds (the service's). Rules
    reading a feed missing from it, and profiles whose stored spec no longer
    validates, are skipped and counted.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    index: dict[int, int] = {}  # store feed id -> plan feed

    def feed(fid: str) -> int:
        key = int(fid)
        if key not in resource_of:
            raise KeyError(key)
        return index.setdefault(key, len(index))

    rules: list[PlanRule] = []
    skipped = 0
    for profile in profiles:
        try:
            spec = ProfileSpec.model_validate({"name": profile.name, "rules": [r.spec for r in profile.rules]})
        except PydanticValidationError:
            skipped += len(profile.rules)  # not restorable either (Runtime.restore skips it too)
            continue
        for stored, rule in zip(profile.rules, spec.rules, strict=True):
            try:
                rules.append(_rule(str(profile.id), rule, stored.state, feed, clock, start, horizon))
            except KeyError:
                skipped += 1
    feeds = tuple(index)
    origin = clock.start_of(start).timestamp()
    edges = origin + np.arange(horizon + 1, dtype=np.float64) * clock.length
    grid = np.zeros((len(feeds), horizon))
    evidence: list[tuple[float, float]] = []
    for i, fid in enumerate(feeds):
        grid[i] = models.expected_updates_between(resource_of[fid], edges)
        updates, seconds = models.evidence(resource_of[fid])
        evidence.append((updates, seconds / clock.length))
    return PlanInputs(tuple(rules), GridRates(grid), feeds, len(profiles), skipped, start, float(clock.length),
                      tuple(evidence))


def _rule(
    profile: str, rule: Any, state: Any, feed: Any, clock: ChrononMapping, start: int, horizon: int
) -> PlanRule:
    """One rule as the evaluator compiles it (``TriggerEvaluator._compile``), in plan chronons."""

    def chronons(text: str, *, minimum: int = 0) -> int:
        return to_chronons(parse_duration(text), clock.length, minimum=minimum)

    first = last = None
    if rule.period is not None:
        if rule.period.start is not None:
            first = first_chronon_from(clock, rule.period.start) - start
        if rule.period.end is not None:
            last = first_chronon_from(clock, rule.period.end) - 1 - start
    if rule.watch is not None:
        return PlanWatch(profile, tuple(feed(f) for f in rule.watch.feeds), chronons(rule.watch.within),
                         first, last)
    trigger = rule.trigger
    queries = tuple(PlanQuery(feed(q.feed), None if q.within is None else chronons(q.within)) for q in rule.query or ())
    fires: tuple[int, ...] | None = None
    if trigger.every is not None:
        every = chronons(trigger.every, minimum=1)
        saved = state.get("next_fire") if isinstance(state, Mapping) else None
        # The evaluator anchors at its saved next fire, else the period's start, else the next tick.
        anchor = int(saved) if saved is not None else (first + start if first is not None else start)
        fires = every_fires(every, horizon, anchor - start)
    elif trigger.cron is not None:
        fires = _cron_fires(trigger.cron, trigger.timezone, clock, start, horizon)
    every_nth = trigger.when.every_nth if trigger.when is not None else None
    return PlanTrigger(profile, feed(trigger.feed), queries,
                       # The evaluator's defaults: one chronon, an alert's ALERT_SLACK.
                       slack=(chronons(trigger.slack) if trigger.slack is not None
                              else 1 if rule.query is not None
                              else max(1, chronons(ALERT_SLACK))),
                       fires=fires, every_nth=every_nth, first=first, last=last)


def _cron_fires(expr: str, timezone: str, clock: ChrononMapping, start: int, horizon: int) -> tuple[int, ...]:
    """The chronons in the horizon holding a cron fire time (several in one chronon: one fire)."""
    from apscheduler.triggers.cron import CronTrigger

    cron = CronTrigger.from_crontab(expr, timezone=timezone)
    fires: list[int] = []
    c = start
    while c < start + horizon:
        moment = cron.get_next_fire_time(None, clock.start_of(c))
        if moment is None:
            break
        fc = max(c, clock.chronon_at(moment))
        if fc >= start + horizon:
            break
        fires.append(fc - start)
        c = fc + 1
    return tuple(fires)


def service_planner(inputs: PlanInputs, *, policy: str = "adm-edf", futures: int = 8, seed: int = 0,
                    jobs: int = 1) -> Planner:
    """A planner of ``inputs`` whose background probes are the loop's (``background_allocator``).

    With ``inputs.evidence``, the allocation learns the rates from each feed's
    record as the loop does (``PlanLearning`` with the loop's ``POOL_STRENGTH``,
    ``OPTIMISM_Z`` and ``EVIDENCE_FADE``): a feed seen little costs the plan
    what it costs the service (``docs/plan.md``). ``jobs``: worker processes
    for the futures (``Planner``; the command line's, not the server's).
    """
    learning = None
    if inputs.evidence is not None:
        learning = PlanLearning(tuple(n for n, _ in inputs.evidence), tuple(t for _, t in inputs.evidence),
                                POOL_STRENGTH, OPTIMISM_Z, EVIDENCE_FADE)
    return Planner(inputs.rules, inputs.rates, policy=policy, futures=futures, seed=seed,
                   allocator=background_allocator, learning=learning, jobs=jobs)


def run_plan(
    inputs: PlanInputs,
    *,
    budget: int,
    target: float,
    policy: str,
    futures: int,
    seed: int,
    max_budget: int | None = None,
    jobs: int = 1,
) -> PlanReport:
    """Expected completeness at ``budget`` and the least budget for ``target`` (CPU-bound: run off the loop)."""
    began = time.perf_counter()
    planner = service_planner(inputs, policy=policy, futures=futures, seed=seed, jobs=jobs)
    current = planner.evaluate(budget)
    start = min(max(budget, 1), max(planner.max_budget, 1))
    least = planner.least_budget(target, start=start, max_budget=max_budget)
    return PlanReport(inputs, policy, futures, seed, current, least, time.perf_counter() - began)

