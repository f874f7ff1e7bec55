"""Planning the budget (issue 18, deliverable 5): the completeness the rules can expect, and the least budget for a target.

Paper 002 §2.2 poses two dual problems: maximise user utility under a probe
budget, and minimise the probes that satisfy the profiles. This module answers
both for the proxy's own rules, pull-only, by Monte Carlo over futures sampled
from per-feed update intensities (for the service: its learnt
``FeedUpdateModels``, see ``proxy.service.planning``):

* :meth:`Planner.evaluate` — the expected completeness at a budget ``C`` (mean
  over ``S`` sampled futures, with its standard error) and the probes per
  chronon it uses;
* :meth:`Planner.least_budget` — the least integer budget whose expected
  completeness reaches a target (002's dual problem), searched up from a
  starting budget then down (guarded secant steps). Every budget runs on the *same* futures
  (common random numbers), so the search compares budgets, not noise, and
  ``least - 1`` always falls short of the target on these futures.

One future, one budget: each chronon ``t`` of the horizon

1. temporal triggers (``every``, ``cron``) due at ``t`` open their CEI
   ``[t, t + slack]``, unsealed, as ``TriggerEvaluator.on_tick`` does;
2. the policy picks from the one engine's pool; the budget left goes to
   background probes of the feeds rules wait for. With ``allocator`` (the
   service passes the one its loop runs, ``proxy.service.loop.background_allocator``):
   that :class:`proxy.core.discovery.CaptureExplore`, shown every chronon
   what ``ChrononLoop._background`` shows it: the feeds rules wait for, the
   weights and groups ``TriggerEvaluator.update_weights`` / ``update_groups``
   would hold (a watch rule's worth spread over the feeds its current CEI has
   not been found on, ``dead_weight`` of it once that CEI is missed; 1 per
   ``on: update`` trigger), the shortest waiting window, and the rates: with
   ``learning`` (:class:`PlanLearning`, what the service passes), those the
   loop would learn, pooled from each feed's record before the horizon and
   what this future's probes have found, shaped by the planned intensities'
   cycle; without, the planned intensities as known rates (each feed's mean
   over the chronons its frequencies serve). Without an allocator: the greedy index
   ``w · P(changed since the last probe)``, ``w`` the rules reading the
   feed (``proxy.core.discovery.rank_background``, the service's first
   background allocation);
3. every probe succeeds and finds the feed's updates since its previous probe:
   the first of them, at ``u``, advances watch rules (AuctionWatch EIs
   ``[u, u + within]``) and opens ``on: update`` triggers ``[u, u + slack]``;
   a trigger probed inside its window fires when the probe found updates
   (``every_nth``: when the count of updates found passes a multiple), and
   its query EIs ``[t, t + within]`` join; otherwise it is sealed at rank 1.
   This is ``TriggerEvaluator.on_probe`` with dated entries.

Completeness is captured / (captured + missed) over the CEIs opened in the
horizon; the run goes on past the horizon (no new CEI opens, the budget is
still spent) until they resolve or the longest window has passed.

Approximations, on purpose (``docs/plan.md``):

* update times are sampled per chronon (a Poisson count with the chronon's
  expected updates); several updates in one chronon are one change;
* conditions on entry text (``contains``, ``regex``) are assumed to hold for
  every batch of new entries: the plan counts every query EI the rule could
  open, so its completeness is a lower bound and its budget an upper one on
  that account;
* ``overwrite`` lives last the feed's mean interval over the horizon (the
  evaluator uses an EWMA of observed gaps), clamped to ``[1, 1440]``;
* every feed starts with a successful probe just before the horizon (the
  service has been running), except, with ``learning``, a feed with no
  record (never fetched), which the allocation sees as never probed;
  probes never fail or wait for politeness; pings are not modelled (every
  feed is pull-only).

Pure: rules, rates and a seed in, numbers out. No clock, no I/O, no service
(``jobs`` > 1 forks workers that compute the same numbers).
"""

from __future__ import annotations

import math
import multiprocessing
import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import repeat

import numpy as np
import numpy.typing as npt

from proxy.core.discovery import DEAD_CEI_WEIGHT, CaptureExplore, rank_background, waiting_share
from proxy.core.engine import CeiCaptured, CeiMissed, Engine
from proxy.core.rates import pooled_rates

__all__ = [
    "GridRates",
    "LeastBudget",
    "PlanLearning",
    "PlanPoint",
    "PlanQuery",
    "PlanRule",
    "PlanTrigger",
    "PlanWatch",
    "Planner",
    "every_fires",
]

FloatArray = npt.NDArray[np.float64]

#: The longest ``overwrite`` life, as the evaluator's ``MAX_OVERWRITE``.
MAX_INTERVAL = 1440
#: Chronons of probes the engine keeps for EIs revealed late (at least the longest EI).
_HISTORY = 64


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True, slots=True)
class PlanQuery:
    """A query feed of a trigger rule: ``[p, p + within]`` from the trigger's probe ``p`` (``None``: overwrite)."""

    feed: int
    within: int | None = None


@dataclass(frozen=True, slots=True)
class PlanTrigger:
    """A trigger rule in plan chronons (0 = the horizon's first).

    ``fires``: the chronons a temporal trigger (``every``, ``cron``) opens
    ``[f, f + slack]`` at; ``None``: an ``on: update`` trigger, opened at each
    update found. ``every_nth``: the condition ``WHEN COUNT(*) % X = 0``.
    ``first``/``last``: the rule's active period (``None``: open).
    """

    profile: str
    feed: int
    queries: tuple[PlanQuery, ...]
    slack: int = 1
    fires: tuple[int, ...] | None = None
    every_nth: int | None = None
    first: int | None = None
    last: int | None = None


@dataclass(frozen=True, slots=True)
class PlanWatch:
    """An AuctionWatch(k) rule: one EI ``[u, u + within]`` per feed at its next update ``u``."""

    profile: str
    feeds: tuple[int, ...]
    within: int
    first: int | None = None
    last: int | None = None


PlanRule = PlanTrigger | PlanWatch


def every_fires(every: int, horizon: int, anchor: int = 0) -> tuple[int, ...]:
    """The fire chronons in ``[0, horizon)`` of a trigger firing every ``every`` chronons from ``anchor``."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    first = anchor if anchor >= 0 else anchor + math.ceil(-anchor / every) * every
    return tuple(range(first, horizon, every))


# --------------------------------------------------------------------------- rates


class GridRates:
    """Expected updates of each feed in each chronon of the plan: ``expected[feed, t]``.

    A :class:`proxy.core.rates.RateModel` (``rate(feed, t)``, updates per
    chronon). Past the grid a feed keeps its mean rate over the grid.
    """

    __slots__ = ("_grid", "_mean")

    def __init__(self, expected: npt.ArrayLike) -> None:
        grid = np.asarray(expected, dtype=np.float64)
        if grid.ndim != 2 or grid.shape[1] < 1:
            raise ValueError("expected updates must be a (feeds, chronons) array with at least one chronon")
        if not np.all(np.isfinite(grid)) or np.any(grid < 0):
            raise ValueError("expected updates must be finite and >= 0")
        self._grid = grid
        self._mean = grid.mean(axis=1) if grid.shape[0] else np.zeros(0)

    @classmethod
    def constant(cls, rates: Sequence[float], chronons: int) -> GridRates:
        """Each feed's constant rate (updates per chronon) over ``chronons`` chronons."""
        return cls(np.repeat(np.asarray(rates, dtype=np.float64).reshape(-1, 1), max(chronons, 1), axis=1))

    @property
    def feeds(self) -> int:
        return int(self._grid.shape[0])

    @property
    def chronons(self) -> int:
        return int(self._grid.shape[1])

    def rate(self, resource: int, t: int) -> float:
        if not 0 <= resource < self.feeds:
            return 0.0
        if 0 <= t < self.chronons:
            return float(self._grid[resource, t])
        return float(self._mean[resource])

    def mean_rate(self, resource: int) -> float:
        return float(self._mean[resource])

    def extended(self, chronons: int) -> FloatArray:
        """The grid cut or padded (with each feed's mean) to exactly ``chronons`` columns."""
        have = self.chronons
        if chronons <= have:
            return self._grid[:, :chronons]
        pad = np.repeat(self._mean.reshape(-1, 1), chronons - have, axis=1)
        return np.concatenate([self._grid, pad], axis=1)


@dataclass(frozen=True, slots=True)
class PlanLearning:
    """The allocator learns the rates as the service's loop does, from each feed's record.

    ``updates[i]``, ``exposure[i]``: what feed ``i``'s update model held
    before the horizon (``FeedUpdateModels.evidence``: updates, and chronons
    of complete observation; zeros for a feed never fetched). In each run the
    record grows with what the probes find (every update up to the feed's
    last probe, dated, as a fetched document dates its entries), and the
    allocator is shown ``pooled_rates(updates, exposure, strength, z,
    unseen, fade)`` (the loop's ``POOL_STRENGTH``, ``OPTIMISM_Z``,
    ``EVIDENCE_FADE``), shaped by the planned intensities' cycle, instead of
    the planned intensities themselves: what the service would know, not
    what the models say is true.
    """

    updates: tuple[float, ...]
    exposure: tuple[float, ...]
    strength: float
    z: float
    fade: float = math.inf

    def __post_init__(self) -> None:
        if len(self.updates) != len(self.exposure):
            raise ValueError("updates and exposure must have one value per feed")
        # Checked now, by the function every run will call, so a bad record fails before any work.
        pooled_rates(self.updates, self.exposure, self.strength, self.z, fade=self.fade)

    @classmethod
    def fresh(cls, feeds: int, strength: float, z: float, fade: float = math.inf) -> PlanLearning:
        """No feed has a record yet: a service that starts with these rules."""
        return cls((0.0,) * feeds, (0.0,) * feeds, strength, z, fade)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class PlanPoint:
    """The expected outcome of one budget over the sampled futures.

    ``completeness``: mean over the futures in which some CEI resolved
    (``None`` if none did), ``stderr`` its standard error (0 with one such
    future); ``probes_per_chronon``: probes used per chronon of the horizon,
    mean over futures; ``ceis``: CEIs resolved per future, mean.
    """

    budget: int
    completeness: float | None
    stderr: float
    probes_per_chronon: float
    ceis: float
    futures: int

    def reaches(self, target: float) -> bool:
        return self.completeness is not None and self.completeness >= target - 1e-12


@dataclass(frozen=True, slots=True)
class LeastBudget:
    """The answer to the dual problem: the least budget reaching ``target``, or ``None``.

    ``point`` is the plan at that budget; ``best`` the highest completeness
    seen up to ``max_budget`` (at ``max_budget`` when the target is out of
    reach); ``evaluated`` every budget up to ``max_budget`` evaluated so far
    (the planner memoises), ascending.
    """

    target: float
    budget: int | None
    point: PlanPoint | None
    best: PlanPoint | None
    max_budget: int
    evaluated: tuple[PlanPoint, ...]


# --------------------------------------------------------------------------- planner


@dataclass(frozen=True, slots=True)
class _Future:
    """One sampled future: per feed its update chronons and running update count; the update CEIs.

    ``ceis``: (rule, EIs) of each CEI the true updates make (AuctionWatch,
    ``on: update``); ``hidden``: per feed, (start, CEI, finish) of their EIs,
    ascending: each is known only when a probe at or after its start finds it.
    """

    times: tuple[list[int], ...]
    cum: tuple[list[int], ...]
    ceis: tuple[tuple[int, int], ...]
    hidden: tuple[list[tuple[int, int, int]], ...]


@dataclass(frozen=True, slots=True)
class _Outcome:
    captured: int
    missed: int
    probes: int


class Planner:
    """Expected completeness per budget for fixed rules, rates and sampled futures; memoised per budget.

    ``rates`` covers the horizon (``horizon`` defaults to its chronons); feeds
    are ``0 .. rates.feeds - 1``. ``futures`` futures are drawn once from
    ``seed`` and reused for every budget. ``policy`` is an engine policy name.
    ``allocator`` makes a fresh background allocator for each run (the
    service's: ``proxy.service.loop.background_allocator``); ``None``: the
    greedy index. ``dead_weight``: a missed watch CEI's pull on the feeds it
    still waits for (default ``DEAD_CEI_WEIGHT``, the evaluator's), read only
    with an allocator. ``learning``: the allocator learns the rates from each
    feed's record (:class:`PlanLearning`) instead of being given ``rates``.
    ``replay``: a backtest, each feed's recorded update chronons as the one
    future instead of ``futures`` sampled ones (``rates`` still gives the
    allocator's rates and the ``overwrite`` lives). ``jobs``: futures run at
    once in forked worker processes (each future's run is deterministic, so
    the answer is the same for any ``jobs``; 1, the default, runs them in this
    process; so does a process with other threads running, where forking is
    not safe: the service's API plans with 1).
    """

    def __init__(
        self,
        rules: Sequence[PlanRule],
        rates: GridRates,
        *,
        policy: str = "adm-edf",
        futures: int = 8,
        seed: int = 0,
        horizon: int | None = None,
        allocator: Callable[[], CaptureExplore] | None = None,
        dead_weight: float = DEAD_CEI_WEIGHT,
        learning: PlanLearning | None = None,
        replay: Sequence[Sequence[int]] | None = None,
        jobs: int = 1,
    ) -> None:
        from proxy.core.policies import get_policy

        get_policy(policy)  # an unknown name fails before any work
        if futures < 1:
            raise ValueError(f"futures must be >= 1, got {futures}")
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        self.jobs = jobs
        self.horizon = rates.chronons if horizon is None else horizon
        if self.horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {self.horizon}")
        self.rules = tuple(rules)
        self.policy = policy
        self.futures = futures
        self.seed = seed
        if not 0.0 <= dead_weight <= 1.0:
            raise ValueError(f"dead_weight must be in [0, 1], got {dead_weight}")
        self.allocator = allocator
        self.dead_weight = dead_weight
        n = rates.feeds
        if learning is not None and len(learning.updates) != n:
            raise ValueError(f"learning holds {len(learning.updates)} feeds' records; the rates cover {n}")
        self.learning = learning
        self._prior_updates = np.asarray(learning.updates if learning else (), dtype=np.float64)
        self._prior_exposure = np.asarray(learning.exposure if learning else (), dtype=np.float64)
        for rule in self.rules:
            feeds = rule.feeds if isinstance(rule, PlanWatch) else (rule.feed, *(q.feed for q in rule.queries))
            for f in feeds:
                if not 0 <= f < n:
                    raise ValueError(f"rule of profile {rule.profile!r} reads feed {f}; the rates cover 0..{n - 1}")
        self._n = n
        used: set[int] = set()
        for rule in self.rules:
            used.update(rule.feeds if isinstance(rule, PlanWatch) else (rule.feed, *(q.feed for q in rule.queries)))
        self._used = len(used)
        # Overwrite lives: the feed's mean interval, clamped as the evaluator's MAX_OVERWRITE.
        self._life = [
            MAX_INTERVAL if rates.mean_rate(f) <= 0 else min(MAX_INTERVAL, max(1, round(1 / rates.mean_rate(f))))
            for f in range(n)
        ]
        windows = [0]
        waits: list[int] = []  # the windows rules waiting for updates allow (TriggerEvaluator.update_window)
        for rule in self.rules:
            if isinstance(rule, PlanWatch):
                windows.append(rule.within)
                waits.append(rule.within)
            else:
                if rule.fires is None:
                    waits.append(rule.slack)
                lives = [q.within if q.within is not None else self._life[q.feed] for q in rule.queries]
                windows.append(rule.slack + max(lives, default=0))
        self._tail = max(windows) + 1
        self._wait_window = min(waits) if waits else None
        self._end = self.horizon + self._tail
        expected = rates.extended(self._end)
        self._cum = np.concatenate([np.zeros((n, 1)), np.cumsum(expected, axis=1)], axis=1)
        if replay is not None:
            # A backtest: the recorded updates are the one future (nothing after them).
            if len(replay) != n:
                raise ValueError(f"replay holds {len(replay)} feeds' updates; the rates cover {n}")
            times = [sorted({int(u) for u in ups if 0 <= u < self._end}) for ups in replay]
            self.futures = 1
            self._futures = [_future(self.rules, times, [list(range(len(ts) + 1)) for ts in times], n, self.horizon)]
        else:
            rng = np.random.default_rng(seed)
            self._futures = [_future(self.rules, *_sample(rng, expected), n, self.horizon) for _ in range(futures)]
        # Which rules each feed's updates reach, which triggers each feed's probes decide.
        self._by_feed: list[list[int]] = [[] for _ in range(n)]
        self._triggers_on: list[list[int]] = [[] for _ in range(n)]
        self._fires: dict[int, list[int]] = {}
        weight = np.zeros(n)
        for i, rule in enumerate(self.rules):
            if isinstance(rule, PlanWatch):
                for f in rule.feeds:
                    self._by_feed[f].append(i)
                    weight[f] += 1
                continue
            self._triggers_on[rule.feed].append(i)
            if rule.fires is None:
                self._by_feed[rule.feed].append(i)
                weight[rule.feed] += 1
            else:
                for t in rule.fires:
                    if 0 <= t < self.horizon:
                        self._fires.setdefault(t, []).append(i)
        self._watched = np.flatnonzero(weight > 0)
        self._weight = weight[self._watched]
        # The allocator's rates: each feed's mean over the chronons its frequencies serve from t
        # (CaptureExplore reads a seasonal feed's rate over max(window + 1, refresh) chronons ahead).
        self._ahead = np.zeros((n, 0))
        if allocator is not None:
            span = max((self._wait_window or 0) + 1, 10)
            longer = np.concatenate([np.zeros((n, 1)), np.cumsum(rates.extended(self._end + span), axis=1)], axis=1)
            self._ahead = np.maximum(longer[:, span:] - longer[:, :-span], 0.0) / span
            if learning is not None:
                # Learning: the level comes from the record, the cycle from the plan (1 for a flat feed).
                mean = np.array([rates.mean_rate(f) for f in range(n)])
                self._ahead = np.divide(self._ahead, mean[:, None], out=np.ones_like(self._ahead),
                                        where=mean[:, None] > 0)
        self._memo: dict[int, PlanPoint] = {}

    @property
    def max_budget(self) -> int:
        """The distinct feeds the rules read: a larger budget has nothing more to probe."""
        return self._used

    def evaluate(self, budget: int) -> PlanPoint:
        """The expected completeness and probes at ``budget`` probes per chronon."""
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        point = self._memo.get(budget)
        if point is not None:
            return point
        ratios: list[float] = []
        probes: list[int] = []
        resolved: list[int] = []
        for out in self._outcomes(budget):
            probes.append(out.probes)
            done = out.captured + out.missed
            resolved.append(done)
            if done:
                ratios.append(out.captured / done)
        mean: float | None = float(np.mean(ratios)) if ratios else None
        se = float(np.std(ratios, ddof=1) / math.sqrt(len(ratios))) if len(ratios) > 1 else 0.0
        point = PlanPoint(
            budget=budget,
            completeness=mean,
            stderr=se,
            probes_per_chronon=float(np.mean(probes)) / self.horizon,
            ceis=float(np.mean(resolved)),
            futures=self.futures,
        )
        self._memo[budget] = point
        return point

    def _outcomes(self, budget: int) -> list[_Outcome]:
        """Each future's run at ``budget``, in order: here, or in ``jobs`` forked workers.

        Forked only from a process whose one thread is this one: a fork copies
        the locks other threads hold, and a worker could wait on them for ever
        (CPython deprecates forking a threaded process). ``proxy plan`` has no
        other thread when it plans; a threaded caller gets the same figures
        from this process.
        """
        workers = min(self.jobs, len(self._futures))
        if (workers <= 1 or "fork" not in multiprocessing.get_all_start_methods()
                or threading.active_count() > 1):
            return [_Run(self, fut, budget).run() for fut in self._futures]
        global _FORKED
        _FORKED = self  # the workers inherit the planner, futures included: nothing is pickled but outcomes
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                return list(pool.map(_run_forked, range(len(self._futures)), repeat(budget)))
        finally:
            _FORKED = None

    def least_budget(self, target: float, *, start: int = 1, max_budget: int | None = None) -> LeastBudget:
        """The least budget in ``1..max_budget`` whose expected completeness is at least ``target``.

        From ``start`` up to a budget that reaches the target, then down to the
        least one, each step a secant guess guarded like a galloping and a
        bisection search: up, at least one more and at most double; down,
        strictly inside the bracket, and a bisection whenever the guess did not
        halve it. Evaluations cost in proportion to the budget, so a guess
        beats doubling past the target (``docs/plan.md``: 5 budgets instead
        of 10 for 1,000 profiles). ``start`` reaching the target already searches
        ``1..start``. ``max_budget`` defaults to :attr:`max_budget` (probing
        every feed every chronon). ``budget`` is ``None`` when even
        ``max_budget`` falls short; ``best`` then says what it reached.
        """
        if not 0 <= target <= 1:
            raise ValueError(f"target must be in [0, 1], got {target}")
        cap = self.max_budget if max_budget is None else max_budget
        if cap < 1:
            return LeastBudget(target, None, None, None, max(cap, 0), ())

        def value(b: int) -> float:  # budget 0 is never evaluated: it captures nothing
            c = self.evaluate(b).completeness if b > 0 else 0.0
            return 0.0 if c is None else c

        b = min(max(start, 1), cap)
        if self.evaluate(b).reaches(target):
            lo, hi = 0, b  # budget 0 never counts as reaching: the least budget is at least 1
        else:
            x0, lo = 0, b
            while True:
                if lo >= cap:
                    return self._answer(target, None, cap)
                slope = (value(lo) - value(x0)) / (lo - x0)
                # Completeness is concave in the budget, so the secant undershoots: aim 25 % further.
                guess = lo + math.ceil(1.25 * (target - value(lo)) / slope) if slope > 0 else 2 * lo
                nxt = min(max(guess, lo + 1), 2 * lo, cap)
                if self.evaluate(nxt).reaches(target):
                    hi = nxt
                    break
                x0, lo = lo, nxt
        bisect = False
        while hi - lo > 1:
            width = hi - lo
            mid = (lo + hi) // 2
            if not bisect and value(hi) > value(lo):
                guess = lo + round((target - value(lo)) / (value(hi) - value(lo)) * width)
                mid = min(max(guess, lo + 1), hi - 1)
            if self.evaluate(mid).reaches(target):
                hi = mid
            else:
                lo = mid
            bisect = not bisect and 2 * (hi - lo) > width
        return self._answer(target, hi, cap)

    def _answer(self, target: float, budget: int | None, cap: int) -> LeastBudget:
        points = tuple(self._memo[b] for b in sorted(self._memo) if 1 <= b <= cap)
        seen = [p for p in points if p.completeness is not None]
        best = max(seen, key=lambda p: (p.completeness, -p.budget)) if seen else None
        point = self._memo[budget] if budget is not None else None
        return LeastBudget(target, budget, point, point if point is not None else best, cap, points)


_FORKED: Planner | None = None
"""The planner whose futures forked workers run (``Planner._outcomes``); set only while they do."""


def _run_forked(index: int, budget: int) -> _Outcome:
    """In a forked worker: future ``index`` of the inherited planner at ``budget``."""
    assert _FORKED is not None, "a plan worker runs only in a process forked by Planner._outcomes"
    return _Run(_FORKED, _FORKED._futures[index], budget).run()


def _sample(rng: np.random.Generator, expected: FloatArray) -> tuple[list[list[int]], list[list[int]]]:
    """Update chronons per feed and the running count of updates (several in one chronon: one change)."""
    counts = rng.poisson(expected)
    times: list[list[int]] = []
    cum: list[list[int]] = []
    for row in counts:
        nz = np.flatnonzero(row)
        times.append(nz.tolist())
        cum.append([0, *np.cumsum(row[nz]).tolist()])
    return times, cum


def _future(
    rules: Sequence[PlanRule], times: list[list[int]], cum: list[list[int]], n: int, horizon: int
) -> _Future:
    """The CEIs the rules want in one future: AuctionWatch CEIs and ``on: update`` CEIs from its true updates.

    Every update counts, found or not (the user's completeness, as
    ``proxy.sim.pull`` scores it): an update no probe finds in its window is
    a missed CEI, even though the service itself never learns of it.
    """
    ceis: list[tuple[int, int]] = []  # (rule, EIs)
    hidden: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]  # feed -> (start, CEI, finish)
    for i, rule in enumerate(rules):
        if isinstance(rule, PlanWatch):
            # AuctionWatch (main paper §4): CEI j+1 takes, for each feed, its first update
            # strictly after the last EI start of CEI j.
            prev = -1
            while True:
                starts = []
                for f in rule.feeds:
                    ts = times[f]
                    k = bisect_right(ts, prev)
                    while k < len(ts) and not _active(rule, ts[k], horizon) and ts[k] < horizon:
                        k += 1
                    if k == len(ts) or ts[k] >= horizon:
                        break
                    starts.append(ts[k])
                if len(starts) < len(rule.feeds):
                    break  # some feed does not change again before the horizon: no more CEIs
                c = len(ceis)
                ceis.append((i, len(starts)))
                for f, u in zip(rule.feeds, starts, strict=True):
                    hidden[f].append((u, c, u + rule.within))
                prev = max(starts)
        elif rule.fires is None:
            for u in times[rule.feed]:
                if u >= horizon:
                    break
                if _active(rule, u, horizon):
                    hidden[rule.feed].append((u, len(ceis), u + rule.slack))
                    ceis.append((i, 1))
    for lst in hidden:
        lst.sort()
    return _Future(tuple(times), tuple(cum), tuple(ceis), tuple(hidden))


class _Run:
    """One simulated future at one budget: the evaluator's semantics over the one engine."""

    def __init__(self, plan: Planner, future: _Future, budget: int) -> None:
        self.p = plan
        self.fut = future
        self.budget = budget
        n, r = plan._n, len(plan.rules)
        self.engine = Engine(n, history=_HISTORY)
        # Each feed's last probe: -1, the baseline probe just before the horizon; NaN when learning, for a
        # feed without a record before the horizon (never fetched: the allocator probes those first, and
        # its first probe counts the updates since the horizon as the baseline's would).
        self.last = np.full(n, -1.0)
        if plan.learning is not None:
            self.last[plan._prior_exposure <= 0] = np.nan
        self.next_hidden = [0] * n
        self.unknown = [k for _, k in future.ceis]  # EIs of each update CEI not found yet
        self.seq = [0] * r
        self.open: list[dict[str, tuple[int, int]]] = [{} for _ in range(r)]  # trigger CEIs awaiting their probe
        self.last_open: list[int | None] = [None] * r
        self.nth = [0] * r
        self.temporal = 0  # CEIs of temporal triggers opened
        self.captured = 0
        self.alloc = plan.allocator() if plan.allocator is not None else None
        if self.alloc is not None:
            self.rule_ceis: list[list[int]] = [[] for _ in range(r)]  # a watch rule's CEIs, in order
            for c, (i, _) in enumerate(future.ceis):
                if isinstance(plan.rules[i], PlanWatch):
                    self.rule_ceis[i].append(c)
            self.current = [0] * r  # index in rule_ceis of the CEI the rule is filling
            self.found: dict[int, set[int]] = {}  # watch CEI -> feeds whose EI a probe found
            self.dead: set[int] = set()  # watch CEIs with an EI found too late
            self.weights = np.zeros(n)
            self.weight_of: dict[int, tuple[tuple[int, ...], float]] = {}
            for i in range(r):
                self._reweigh(i)
            # The updates each feed's probes have dated so far (distinct chronons up to its last probe),
            # which the learning adds to its record.
            self.dated = np.zeros(n)

    def run(self) -> _Outcome:
        p, engine = self.p, self.engine
        horizon, budget, policy = p.horizon, self.budget, p.policy
        watched, weight, cum = p._watched, p._weight, p._cum
        watched_list = watched.tolist()
        slot = np.full(p._n, -1)
        slot[watched] = np.arange(len(watched))
        last_w = np.full(len(watched), -1)
        probes = 0
        for t in range(p._end):
            engine.advance(t)
            self._events()
            if t < horizon:
                for i in p._fires.get(t, ()):
                    rule = p.rules[i]
                    assert isinstance(rule, PlanTrigger)
                    if _active(rule, t, horizon) and self.last_open[i] != t:
                        self.temporal += 1
                        self._open_trigger(i, rule, t, t + rule.slack)
            chosen = engine.select(budget, policy) if budget else []
            spare = budget - len(chosen)
            if self.alloc is not None:
                chosen = [*chosen, *self._background(spare, t, chosen)]
            elif spare > 0 and watched_list:
                # The greedy index, weight × P(changed since the last probe): the service's first allocation.
                score = weight * -np.expm1(-(cum[watched, t + 1] - cum[watched, last_w + 1]))
                for r in chosen:
                    if slot[r] >= 0:
                        score[slot[r]] = 0.0  # the engine's picks are probed already
                chosen = [*chosen, *rank_background(spare, watched_list, score.tolist(), (t - last_w).tolist())]
            for r in chosen:
                self._probe(r, t)
                if slot[r] >= 0:
                    last_w[slot[r]] = t
            engine.probe(chosen)
            self._events()
            if t < horizon:
                probes += len(chosen)
        return _Outcome(self.captured, len(self.fut.ceis) + self.temporal - self.captured, probes)

    def _background(self, spare: int, t: int, chosen: Sequence[int]) -> list[int]:
        """``ChrononLoop._background``: the allocator, shown the feeds rules wait for, every chronon."""
        p, alloc = self.p, self.alloc
        assert alloc is not None
        window = p._wait_window
        if window is None:
            return []
        waited = self.weights > 1e-9
        waited[list(chosen)] = False  # the engine's picks are probed already
        picked = np.flatnonzero(waited)
        last = self.last[picked]  # arrays, not lists: the allocator works on arrays
        learning = p.learning
        if learning is None:
            rate = p._ahead[picked, t]
        else:
            # The loop's pooled rates on each record: what it held before the horizon and what was
            # found since. A feed with no record had never been fetched: no last success, no exposure.
            probed = ~np.isnan(last)
            level = pooled_rates(
                p._prior_updates[picked] + self.dated[picked],
                p._prior_exposure[picked] + np.where(probed, last + 1.0, 0.0),
                learning.strength, learning.z, unseen=np.where(probed, t - last, 0.0), fade=learning.fade)
            rate = np.asarray(level) * p._ahead[picked, t]
        return alloc.pick(max(spare, 0), t, picked, last, rate, self.weights[picked], window,
                          groups=lambda: list(self.weight_of.values()))

    def _reweigh(self, i: int) -> None:
        """Rule ``i``'s share of the weights, as ``TriggerEvaluator._reweigh`` keeps it."""
        p = self.p
        old = self.weight_of.pop(i, None)
        if old is not None:
            feeds, share = old
            for f in feeds:
                self.weights[f] = max(self.weights[f] - share, 0.0)
        rule = p.rules[i]
        if isinstance(rule, PlanWatch):
            ceis, k = self.rule_ceis[i], self.current[i]
            while k < len(ceis) and self.unknown[ceis[k]] == 0:
                k += 1  # every EI found: the next CEI is the one filling
            self.current[i] = k
            if k == len(ceis):  # no CEI left in this future: the rule waits for all its feeds
                feeds, alive = rule.feeds, True
            else:
                c = ceis[k]
                got = self.found.get(c, set())
                feeds, alive = tuple(f for f in rule.feeds if f not in got), c not in self.dead
            if not feeds:
                return
            share = waiting_share(len(feeds), alive, p.dead_weight)
        elif rule.fires is None:
            feeds, share = (rule.feed,), 1.0
        else:
            return  # a temporal trigger waits for its fire, not for updates
        self.weight_of[i] = (feeds, share)
        for f in feeds:
            self.weights[f] += share

    # -- what the evaluator does ------------------------------------------------------

    def _probe(self, r: int, t: int) -> None:
        p, engine = self.p, self.engine
        a = self.last[r].item()
        if a != a:  # NaN: never fetched; the baseline is the horizon
            a = -1.0
        times, cum = self.fut.times[r], self.fut.cum[r]
        upto = bisect_right(times, t)  # the updates this probe's document dates
        count = cum[upto] - cum[bisect_right(times, a)]
        hidden = self.fut.hidden[r]
        k = self.next_hidden[r]
        while k < len(hidden) and hidden[k][0] <= t:
            u, c, finish = hidden[k]
            k += 1
            i, _ = self.fut.ceis[c]
            rule = p.rules[i]
            cid = f"u{c}"
            if isinstance(rule, PlanWatch):
                # Found: the EI [u, u + within] is known now; captured by this probe if t <= finish.
                self.unknown[c] -= 1
                seal = self.unknown[c] == 0
                if self.unknown[c] + 1 == len(rule.feeds):
                    engine.add_cei(cid, rule.profile, [(r, u, finish)], sealed=seal)
                else:
                    engine.reveal_ei(cid, r, u, finish, seal=seal)
                if self.alloc is not None:
                    self.found.setdefault(c, set()).add(r)
                    if t > finish:
                        self.dead.add(c)
                    self._reweigh(i)
            elif t <= finish:  # an on: update trigger found inside its window; decided below
                self.open[i][cid] = (u, finish)
                engine.add_cei(cid, rule.profile, [(r, u, finish)], sealed=False)
            # else: found too late, missed; the service would not even open it
        self.next_hidden[r] = k
        if self.alloc is not None:
            self.dated[r] = upto
        for i in p._triggers_on[r]:
            rule = p.rules[i]
            assert isinstance(rule, PlanTrigger)
            opens = self.open[i]
            due = [cid for cid, (s, f) in opens.items() if s <= t <= f] if opens else []
            if not due and rule.every_nth is None:
                continue
            if rule.every_nth is None:
                fired = count > 0
            else:  # paper 002 §2.1, WHEN COUNT(*) % X = 0: some update found is the X-th, 2X-th, …
                before = self.nth[i]
                self.nth[i] += count
                fired = self.nth[i] // rule.every_nth > before // rule.every_nth
            for cid in due:
                del opens[cid]
                if fired and not rule.queries:  # a single-feed alert: the trigger's EI alone
                    engine.seal(cid)
                elif fired:
                    last = len(rule.queries) - 1
                    for j, q in enumerate(rule.queries):
                        life = q.within if q.within is not None else p._life[q.feed]
                        engine.reveal_ei(cid, q.feed, t, t + life, seal=j == last)
                else:
                    engine.seal(cid)  # rank 1: captured with its trigger EI
        self.last[r] = t

    def _open_trigger(self, i: int, rule: PlanTrigger, t: int, finish: int) -> None:
        cei = f"{i}t{self.seq[i]}"
        self.seq[i] += 1
        self.last_open[i] = t
        self.open[i][cei] = (t, finish)
        self.engine.add_cei(cei, rule.profile, [(rule.feed, t, finish)], sealed=False)

    def _events(self) -> None:
        for ev in self.engine.drain_events():
            if isinstance(ev, CeiCaptured):
                self.captured += 1
            elif isinstance(ev, CeiMissed) and ev.cei_id[0] != "u":
                # TriggerEvaluator.on_trigger_missed: a temporal trigger's window passed unprobed.
                i = int(ev.cei_id.split("t", 1)[0])
                if self.open[i].pop(ev.cei_id, None) is not None:
                    self.engine.seal(ev.cei_id)


def _active(rule: PlanRule, t: int, horizon: int) -> bool:
    """Whether ``rule`` acts on an update or fire at ``t``: its period, cut at the horizon."""
    return t < horizon and (rule.first is None or t >= rule.first) and (rule.last is None or t <= rule.last)
