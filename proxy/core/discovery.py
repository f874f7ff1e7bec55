"""Background probes: where the budget the EIs left goes, so updates of feeds that never ping are found.

A rule that waits for a feed's updates (``on: update``, a watch rule) learns of
one only from a ping or from a probe that finds new entries. Most feeds never
ping, so the probes that the EIs do not need each chronon go to the watched
feeds most likely to hold an update nobody has seen, weighted by how many
rules wait for them: ``weight * P(the feed changed since its last successful
probe)``, with ``P = 1 - exp(-rate * elapsed)`` under a Poisson update model
(paper 004 §2; Cho & Garcia-Molina 2003 for freshness). A feed never probed
successfully comes first: its first probe is what later ones are compared to.

With equal rates and weights this is round-robin over the watched feeds
(the stalest first); a faster feed is looked at more often, a slower one still
in its turn, because the chance it changed grows with the time since its last
probe. It is a greedy index, not yet the budget-optimal allocation for the
learnt models; ``docs/discovery.md`` says how it compares.

Pure: chronons, rates and weights in, resources out. Does not know why a feed
is watched, nor which feeds are blocked (the caller leaves them out).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from proxy.core.rates import CycleShape, cycle_masses

__all__ = [
    "COORDINATION_DAMPING",
    "DEAD_CEI_WEIGHT",
    "CaptureExplore",
    "FrequencyStride",
    "MemorylessSqrt",
    "RoundRobinWatch",
    "TailFloor",
    "background_probes",
    "capture_frequencies",
    "coordinated_weights",
    "freshness_frequencies",
    "rank_background",
    "revisit_bound",
    "tail_floor",
    "tail_period",
    "waiting_share",
    "wic_probes",
]

DEAD_CEI_WEIGHT = 0.25
"""A missed watch CEI's pull on the feeds it still waits for, against 1 for a live one
(``TriggerEvaluator.update_weights``): their updates only end the lost CEI, after which
the next one starts, so finding them is worth something but not a capture."""


def waiting_share(lacking: int, alive: bool, dead_weight: float = DEAD_CEI_WEIGHT) -> float:
    """A watch rule's worth on each of the ``lacking`` feeds its current CEI still needs.

    Its CEI is captured only if every one of them is caught in time, so one find of
    ``m`` is worth about ``1/m`` of it; ``dead_weight/m`` once the CEI is missed
    (``alive`` False). The background allocation's weights are sums of these: the
    evaluator's, the planner's and the bench's replica's.
    """
    if lacking < 1:
        raise ValueError(f"lacking must be >= 1, got {lacking}")
    return (1.0 if alive else dead_weight) / lacking


def revisit_bound(budget: float, feeds: int, window: int, factor: float) -> int:
    """Chronons a watched feed may go unprobed at most: ``max(window + 1, ceil(factor * feeds / budget))``.

    ``feeds / budget`` is a plain round-robin's cycle over the watched feeds:
    ``factor`` 1 would leave nothing to allocate (every probe is the bound's),
    2 lets an unfunded feed wait at most twice a round-robin's cycle while the
    bound costs at most half the budget (less, since the funded feeds are
    probed more often than that anyway). Never below ``window + 1``: a feed
    probed every ``window + 1`` chronons already catches every update within
    its rules' window, so a tighter bound buys no capture. Issue 45, item 1;
    the trade in numbers is in ``docs/discovery.md``.
    """
    if budget <= 0:
        raise ValueError(f"budget must be > 0, got {budget}")
    if feeds < 0 or window < 0:
        raise ValueError(f"feeds and window must be >= 0, got {feeds}, {window}")
    if not factor >= 1.0 or not math.isfinite(factor):
        raise ValueError(f"factor must be a finite number >= 1, got {factor}")
    return max(window + 1, math.ceil(factor * feeds / budget - 1e-9))


def tail_period(budget: float, feeds: int, window: int, cycle_share: float = 0.85) -> int:
    """Chronons between two probes of a feed the tail floor keeps: ``max(window + 1, floor(cycle_share * feeds / budget))``.

    A plain round-robin over ``feeds`` at ``budget`` probes a chronon finds each
    update within ``feeds / budget`` chronons, uniformly, so its p90 detection
    delay is about ``0.9 * feeds / budget``; a feed probed every
    ``cycle_share * feeds / budget`` chronons (0.85: a little under that p90, so
    that the pooled p90 stays below it) finds its updates sooner than that
    reader's p90. Issue 45, item 1 (``docs/discovery.md``, "The tail where the
    updates are").
    """
    if budget <= 0:
        raise ValueError(f"budget must be > 0, got {budget}")
    if feeds < 0 or window < 0:
        raise ValueError(f"feeds and window must be >= 0, got {feeds}, {window}")
    if not 0.0 < cycle_share <= 1.0:
        raise ValueError(f"cycle_share must be in (0, 1], got {cycle_share}")
    return max(window + 1, math.floor(cycle_share * feeds / budget + 1e-9))


@dataclass(frozen=True, slots=True)
class TailFloor:
    """How :class:`CaptureExplore` keeps the detection delay's p90 down: the feeds holding most updates, in turn.

    The feeds with the highest ``rate`` (the rates passed as ``tail_rate``, every
    watched feed's, those no rule waits for too), up to ``share`` of the rate
    mass, are probed at least once per ``period`` chronons (:func:`tail_period`),
    so long as the probes this adds to the capture frequencies stay within
    ``budget_share`` of the budget. The detection delay is pooled over updates,
    which concentrate on fast feeds: a watch rule's fast feed, once in its CEI,
    is worth nothing to the rule until its slow partners change, and without
    this it waits while its updates pile up.

    With ``target`` set (adaptive), the floor spends only what the expected
    pooled tail needs: each feed's updates wait uniformly over its planned
    period (``1 / funded``, or the period of a feed the frequencies leave to the
    explore step and the bound), so the share of the update mass expected to
    wait past ``period`` is ``Σ rate × max(0, 1 − period × f) / Σ rate``. The
    floor takes feeds (most of that mass per probe added first) until it is at
    most ``target``, and nothing when it is already; if ``budget_share`` cannot
    bring it to ``hopeless`` or below, the floor spends nothing at all: on
    traces with many feeds per probe the floor's whole share would buy a slow
    round-robin and little p90. ``share`` is then unused. Without ``target``,
    ``hopeless`` below 1 applies to the fixed floor's feeds in the same way.

    ``sticky`` (adaptive only; :class:`CaptureExplore` keeps the state): a
    recomputation whose adaptive floor takes no feed keeps the feeds the last
    one that took any had, at ``1 / period``, for up to ``sticky`` such
    recomputations in a row; the next one that takes a feed starts the count
    again. On the real trace the hopeless test flips the floor on and off
    between recomputations (its own probes lower the idle pace it judges by),
    and a fast feed it had kept drops out of the stride meanwhile. 0: each
    recomputation on its own (docs/discovery.md, "A sticky floor").
    """

    period: int
    budget_share: float
    share: float = 0.9
    target: float | None = None
    hopeless: float = 1.0
    sticky: int = 0

    def __post_init__(self) -> None:
        if self.period < 1:
            raise ValueError(f"period must be >= 1, got {self.period}")
        if not 0.0 <= self.budget_share <= 1.0:
            raise ValueError(f"budget_share must be in [0, 1], got {self.budget_share}")
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"share must be in [0, 1], got {self.share}")
        if self.target is not None and not 0.0 <= self.target <= 1.0:
            raise ValueError(f"target must be in [0, 1], got {self.target}")
        if not 0.0 <= self.hopeless <= 1.0:
            raise ValueError(f"hopeless must be in [0, 1], got {self.hopeless}")
        if self.sticky < 0:
            raise ValueError(f"sticky must be >= 0, got {self.sticky}")


def tail_floor(rate: Sequence[float] | npt.NDArray[np.float64], funded: Sequence[float] | npt.NDArray[np.float64],
               budget: float, floor: TailFloor, idle: float = 0.0) -> list[float]:
    """Each feed's floor frequency under ``floor``: ``1 / floor.period`` for the chosen feeds, 0 for the others.

    Feeds are taken fastest first (ties by position) while the rate mass before
    them is under ``floor.share`` of the total and the probes they add, ``1 /
    period`` minus what ``funded[i]`` (the capture frequency a feed has anyway)
    already gives, stay within ``floor.budget_share * budget``. Fastest first is
    the greedy optimum of the pooled tail: raising feed ``i`` to ``1 / period``
    removes about ``rate[i]`` updates a chronon from the tail at a cost of at
    most ``1 / period``, the same for every feed.

    With ``floor.target`` (adaptive, see :class:`TailFloor`), ``idle`` is the
    probes per chronon a feed gets without a capture frequency (the explore
    step's and the bound's share of it); the floor takes feeds by the expected
    updates per chronon it moves under ``period`` per probe added, only as many
    as bring the expected share waiting past ``period`` to ``target``, and none
    when ``budget_share`` cannot bring it to ``floor.hopeless``.
    """
    out = _tail_floor(np.asarray(rate, dtype=np.float64), np.asarray(funded, dtype=np.float64), budget, floor,
                      idle)
    return out.tolist()  # type: ignore[no-any-return]


def _tail_floor(rate: _Floats, funded: _Floats, budget: float, floor: TailFloor, idle: float = 0.0) -> _Floats:
    """:func:`tail_floor` on arrays."""
    lam = np.maximum(rate.reshape(rate.size), 0.0)
    if funded.size != lam.size:
        raise ValueError("rate and funded must have the same length")
    out = np.zeros(lam.size)
    total = float(lam.sum())
    if lam.size == 0 or total <= 0 or floor.budget_share <= 0:
        return out
    g = 1.0 / floor.period
    if floor.target is not None:
        return _adaptive_floor(lam, funded.reshape(lam.size), budget, floor, floor.target, idle)
    order = np.lexsort((np.arange(lam.size), -lam))
    before = np.concatenate(([0.0], np.cumsum(lam[order])[:-1]))
    spent = np.cumsum(np.maximum(g - funded.reshape(lam.size)[order], 0.0))
    take = np.logical_and.accumulate((before < floor.share * total * (1 - 1e-12))
                                     & (spent <= floor.budget_share * budget + 1e-9))
    if floor.hopeless < 1.0:  # the share waiting past the period once these are floored (see _adaptive_floor)
        late = lam * np.clip(1.0 - floor.period * np.maximum(funded.reshape(lam.size), max(idle, 0.0)), 0.0, 1.0)
        if float(late.sum() - late[order[take]].sum()) > floor.hopeless * total:
            return out
    out[order[take]] = g
    return out


def _adaptive_floor(lam: _Floats, funded: _Floats, budget: float, floor: TailFloor, target: float,
                    idle: float) -> _Floats:
    """The adaptive :func:`tail_floor`: only the floor the expected pooled tail needs (``lam`` summing above 0).

    An update of a feed probed every ``1/f`` chronons waits uniformly over ``[0, 1/f]``, so a
    share ``max(0, 1 - period × f)`` of its updates waits past ``period``. Raising a feed to
    ``1/period`` removes ``lam × that share`` from the tail at a cost of ``1/period − funded``:
    the feeds are taken by the ratio (free ones first, then the faster), a fractional knapsack.
    """
    n = lam.size
    g = 1.0 / floor.period
    total = float(lam.sum())
    late = lam * np.clip(1.0 - floor.period * np.maximum(funded, max(idle, 0.0)), 0.0, 1.0)
    excess = float(late.sum()) - target * total
    out = np.zeros(n)
    if excess <= 1e-12 * total:
        return out
    cost = np.maximum(g - funded, 0.0)
    worth = np.where(cost > 1e-12, late / np.maximum(cost, 1e-12), np.inf)
    order = np.lexsort((np.arange(n), -lam, -worth))
    order = order[late[order] > 0]
    gained = np.cumsum(late[order])
    spent = np.cumsum(cost[order])
    cap = floor.budget_share * budget + 1e-9
    enough = int(np.searchsorted(gained, excess * (1 - 1e-12)))  # the shortest prefix reaching the target
    if enough < order.size and spent[enough] <= cap:
        out[order[: enough + 1]] = g
        return out
    within = int(np.searchsorted(spent, cap, side="right"))  # the longest prefix the share pays for
    left = float(late.sum()) - (float(gained[within - 1]) if within else 0.0)
    if left > floor.hopeless * total:
        return out  # the share cannot bring the tail near the target: spend nothing
    out[order[:within]] = g
    return out


def background_probes(
    budget: int,
    now: int,
    resources: Sequence[int],
    last_success: Sequence[int | None],
    rate: Sequence[float],
    weight: Sequence[float],
) -> list[int]:
    """At most ``budget`` of ``resources`` to probe at ``now``, best first.

    ``last_success[i]`` is the chronon of resource ``i``'s last successful
    probe (``None``: never), ``rate[i]`` its expected updates per chronon and
    ``weight[i]`` how much an update of it is worth (the rules waiting for it).
    Ties go to the longer wait, then to the smaller resource id. A feed with
    nothing to gain (score 0: probed at ``now``, or a zero rate or weight) is
    never picked, nor a feed never probed whose weight is 0.
    """
    n = len(resources)
    if not n == len(last_success) == len(rate) == len(weight):
        raise ValueError("resources, last_success, rate and weight must have the same length")
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if budget == 0 or n == 0:
        return []
    res = _ids(resources)
    never, last = _chronons(last_success, now)
    lam = np.asarray(rate, dtype=np.float64)
    picked = _greedy(budget, now, res, never, last, lam, np.asarray(weight, dtype=np.float64))
    return res[picked].tolist()  # type: ignore[no-any-return]


def rank_background(
    budget: int, resources: Sequence[int], score: Sequence[float], waited: Sequence[float]
) -> list[int]:
    """At most ``budget`` of ``resources`` by ``score``, best first; the ranking behind :func:`background_probes`.

    For callers whose scores come from a richer model than a Poisson rate
    (the service's per-feed update models: seasonal, near-periodic). Ties go
    to the longer ``waited``, then to the smaller resource id; a score of 0
    (nothing to gain) is never picked.
    """
    if not len(resources) == len(score) == len(waited):
        raise ValueError("resources, score and waited must have the same length")
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if budget == 0 or not len(resources):
        return []
    res = _ids(resources)
    picked = _rank(budget, res, np.asarray(score, dtype=np.float64), np.asarray(waited, dtype=np.float64))
    return res[picked].tolist()  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------
# Array kernels behind the functions above and CaptureExplore: positions into
# the arrays they are given, the same floats and ties as a Python loop over the
# feeds, without one.

_Ints = npt.NDArray[np.int64]
_Floats = npt.NDArray[np.float64]
_Bools = npt.NDArray[np.bool_]


def _ids(resources: Sequence[int] | _Ints) -> _Ints:
    return np.asarray(resources, dtype=np.int64).reshape(len(resources))


def _chronons(last_success: Sequence[int | None] | _Ints | _Floats, now: int) -> tuple[_Bools, _Floats]:
    """Never probed (``None``, or NaN in a float array), and each last success as a float (``now`` when never)."""
    last = np.array(last_success, dtype=np.float64).reshape(len(last_success))  # None -> nan
    never = np.isnan(last)
    last[never] = now
    return never, last


def _due(budget: int, now: int, since: _Floats, revisit: _Ints) -> int:
    """Probes needed at ``now`` so that no feed waits more than ``revisit`` chronons, ``budget`` per chronon after.

    Feed ``i`` must be probed by ``since[i] + revisit`` (``since``: its last
    success, or when it was first watched). The chronons ``now .. now + j``
    hold ``budget * (j + 1)`` probes, so the feeds due by ``now + j`` beyond
    ``budget * j`` must go now: the largest such excess over ``j < revisit``
    (earliest-deadline-first on unit jobs, feasible while ``feeds <= budget *
    revisit``).
    """
    slack = np.maximum(since + revisit - now, 0.0)
    horizon = int(revisit.max())
    near = slack[slack < horizon].astype(np.int64)
    if near.size == 0:
        return 0
    due = np.cumsum(np.bincount(near, minlength=horizon))
    return max(int((due - budget * np.arange(horizon)).max()), 0)


def _best(budget: int, key: _Floats, *ties: npt.NDArray[np.generic]) -> npt.NDArray[np.intp]:
    """Positions of the ``budget`` smallest ``key`` (NaN last), ties by ``ties`` in turn, smallest first.

    ``np.lexsort((*reversed(ties), key))[:budget]``, sorting only the candidates
    at or below the ``budget``-th key: O(n) on the many, not O(n log n).
    """
    n = key.size
    if budget >= n:
        cand = np.arange(n)
    else:
        kth = np.partition(key, budget - 1)[budget - 1]
        cand = np.arange(n) if np.isnan(kth) else np.flatnonzero(key <= kth)
    keys = tuple(t[cand] for t in reversed(ties))
    return cand[np.lexsort((*keys, key[cand]))[:budget]]


def _rank(budget: int, res: _Ints, score: _Floats, waited: _Floats) -> npt.NDArray[np.intp]:
    """:func:`rank_background` on arrays: positions of the picks, best first."""
    if budget <= 0 or score.size == 0:
        return np.empty(0, dtype=np.intp)
    picked = _best(budget, -score, -waited, res)
    return picked[score[picked] > 0]  # a feed probed this very chronon has nothing new to show


def _greedy(budget: int, now: int, res: _Ints, never: _Bools, last: _Floats, rate: _Floats,
            weight: _Floats) -> npt.NDArray[np.intp]:
    """:func:`background_probes` on arrays (``last``: ``now`` where ``never``)."""
    elapsed = np.maximum(now - last, 0.0)
    lam = np.maximum(rate, 0.0)
    score = weight * -np.expm1(-lam * elapsed)
    # Never probed: first, unless no rule waits for it (weight 0: a feed only the revisit bound keeps).
    score[never & (weight > 0)] = np.inf
    elapsed[never] = np.inf
    return _rank(budget, res, score, elapsed)


class _Ledger:
    """``columns`` floats per resource id, as dicts that never forget an id would keep them: sorted ids, values beside."""

    __slots__ = ("keys", "values")

    def __init__(self, columns: int) -> None:
        self.keys: _Ints = np.empty(0, dtype=np.int64)
        self.values: npt.NDArray[np.float64] = np.empty((columns, 0), dtype=np.float64)

    def find(self, res: _Ints) -> tuple[npt.NDArray[np.intp], _Bools]:
        """Each id's slot, and whether it has one (where not, the slot is meaningless)."""
        if self.keys.size == 0:
            return np.zeros(res.size, dtype=np.intp), np.zeros(res.size, dtype=bool)
        pos = np.minimum(np.searchsorted(self.keys, res), self.keys.size - 1)
        return pos, self.keys[pos] == res

    def slots(self, res: _Ints) -> npt.NDArray[np.intp]:
        """Each id's slot, ids not seen yet added with 0.0 (the arrays are then new: take views after this)."""
        pos, found = self.find(res)
        if found.all():
            return pos
        keys = np.concatenate((self.keys, np.unique(res[~found])))
        order = np.argsort(keys, kind="stable")
        grown = np.zeros((self.values.shape[0], keys.size - self.keys.size))
        self.keys, self.values = keys[order], np.concatenate((self.values, grown), axis=1)[:, order]
        return np.searchsorted(self.keys, res)

    def get(self, resource: int, column: int, default: float) -> float:
        pos, found = self.find(np.array([resource], dtype=np.int64))
        return float(self.values[column, pos[0]]) if found[0] else default


def _stride(credit: _Floats, slot: npt.NDArray[np.intp], res: _Ints, freq: _Floats,
            budget: int) -> npt.NDArray[np.intp]:
    """:meth:`FrequencyStride.pick` on arrays: ``credit[slot[i]]`` is ``res[i]``'s; positions of the picks."""
    earned = np.minimum(credit[slot] + freq, 1.0 + freq)
    credit[slot] = earned
    if budget <= 0:
        return np.empty(0, dtype=np.intp)
    rich = np.flatnonzero(earned >= 1.0 - 1e-9)
    out = rich[_best(budget, -earned[rich], res[rich])]
    credit[slot[out]] -= 1.0
    return out


def _spend(credit: _Floats, slot: npt.NDArray[np.intp]) -> None:
    """:meth:`FrequencyStride.spend` on arrays, ``slot`` distinct. A credit of 0 is as good as none."""
    credit[slot] = np.maximum(credit[slot] - 1.0, 0.0)


# ---------------------------------------------------------------------------
# Allocation variants, compared in docs/discovery-sim.md. Each picks at most
# ``budget`` of ``resources`` (distinct, best first); the stateful ones keep
# their state between chronons and must see every chronon of one epoch.


def wic_probes(
    budget: int,
    now: int,
    resources: Sequence[int],
    last_success: Sequence[int | None],
    rate: Sequence[float],
    weight: Sequence[float],
    window: int,
) -> list[int]:
    """WIC's index (paper 003 §2.2) for EIs ``[u, u + window]``: expected updates still capturable now.

    ``g = weight * rate * min(elapsed, window + 1)``: with a sliding-window
    urgency, only updates of the last ``window + 1`` chronons count, so a
    feed left alone longer than that is worth no more than one just outside
    it (the greedy index above keeps growing). Never probed: first. Ties as
    :func:`background_probes`.
    """
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    n = len(resources)
    if not n == len(last_success) == len(rate) == len(weight):
        raise ValueError("resources, last_success, rate and weight must have the same length")
    if budget <= 0 or n == 0:
        return []
    res = np.asarray(resources, dtype=np.int64)
    never = np.array([t is None for t in last_success], dtype=bool)
    last = np.array([now if t is None else t for t in last_success], dtype=np.float64)
    elapsed = np.maximum(now - last, 0.0)
    score = np.asarray(weight, dtype=np.float64) * np.maximum(np.asarray(rate, dtype=np.float64), 0.0)
    score = score * np.minimum(elapsed, window + 1)
    score[never] = np.inf
    elapsed[never] = np.inf
    order = np.lexsort((res, -elapsed, -score))
    picked = order[:budget]
    picked = picked[score[picked] > 0]
    return [int(r) for r in res[picked]]


class RoundRobinWatch:
    """A plain reader's cycle over the watched feeds (ids ascending), ``budget`` per chronon."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = 0

    def pick(self, budget: int, resources: Sequence[int]) -> list[int]:
        if budget <= 0 or not resources:
            return []
        order = sorted(resources)
        n = len(order)
        start = self._next % n
        out = [order[(start + i) % n] for i in range(min(budget, n))]
        self._next = start + len(out)
        return out


class MemorylessSqrt:
    """Paper 004 §3: the memoryless schedule ``p_i ∝ sqrt(π_i)``, ``π_i = weight * rate``.

    Each chronon draws ``budget`` distinct feeds with probabilities ``p``
    (without replacement, so ``c > 1`` is paper 004's c-schedule up to the
    draw). ``rng`` is a ``numpy.random.Generator`` the caller seeds: core owns
    no randomness.
    """

    __slots__ = ("_rng",)

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def pick(self, budget: int, resources: Sequence[int], rate: Sequence[float], weight: Sequence[float]) -> list[int]:
        n = len(resources)
        if budget <= 0 or n == 0:
            return []
        pi = np.maximum(np.asarray(weight, dtype=np.float64) * np.asarray(rate, dtype=np.float64), 0.0)
        p = np.sqrt(pi)
        live = int((p > 0).sum())
        if live == 0:
            return []
        p = p / p.sum()
        idx = self._rng.choice(n, size=min(budget, live), replace=False, p=p)
        return [int(resources[i]) for i in idx]


def freshness_frequencies(rate: Sequence[float], weight: Sequence[float], budget: float) -> list[float]:
    """Cho & Garcia-Molina (2003): probe frequencies maximising weighted freshness under ``Σ f = budget``.

    Freshness of a Poisson(λ) page probed every ``1/f``: ``F = (f/λ)(1 - e^{-λ/f})``.
    Lagrange: ``w (1 - e^{-x}(1 + x)) / λ = μ`` with ``x = λ/f``; a page with
    ``w/λ <= μ`` gets ``f = 0`` (too fast to keep fresh: their famous result).
    For EIs that end at the next update (``overwrite``), ``F`` is also the
    chance an update is captured, so passing ``weight * rate`` as the weight
    maximises expected captures instead of freshness. Bisection, pure numpy.
    """
    lam = np.maximum(np.asarray(rate, dtype=np.float64), 0.0)
    w = np.maximum(np.asarray(weight, dtype=np.float64), 0.0)
    n = len(lam)
    if n == 0 or budget <= 0:
        return [0.0] * n
    live = (lam > 0) & (w > 0)
    if not live.any():
        return [0.0] * n
    ratio = np.where(live, w / np.where(lam > 0, lam, 1.0), 0.0)

    def freqs(mu: float) -> np.ndarray:
        # Solve g(x) = 1 - e^{-x}(1+x) = mu / ratio for x (g rises from 0 to 1): bisection on x.
        target = np.where(live & (ratio > mu), mu / np.where(ratio > 0, ratio, 1.0), np.nan)
        # x = λ/f spans many decades (a slow feed's share of a small budget): bisect on log x.
        lo = np.full(n, -12.0)
        hi = np.full(n, 16.0)
        for _ in range(48):
            mid_log = (lo + hi) / 2
            mid = np.exp(mid_log)
            g = -np.expm1(-mid) - mid * np.exp(-mid)
            below = g < target
            lo = np.where(below, mid_log, lo)
            hi = np.where(below, hi, mid_log)
        x = np.exp((lo + hi) / 2)
        return np.where(np.isnan(target), 0.0, lam / np.maximum(x, 1e-12))

    lo_mu, hi_mu = 0.0, float(ratio.max())
    for _ in range(40):
        mu = (lo_mu + hi_mu) / 2
        if freqs(mu).sum() > budget:
            lo_mu = mu
        else:
            hi_mu = mu
    f = freqs(hi_mu)
    short = budget - float(f.sum())
    if short > 1e-9 * budget:
        # Budget far below the rates: every page stays stale, F ≈ f/λ is linear and the marginal gain
        # w/λ beyond float precision of g; the optimum then gives the rest to the largest w/λ.
        top = live & (ratio >= float(ratio[live].max()) * (1 - 1e-9))
        f = f + np.where(top, short / int(top.sum()), 0.0)
    return [float(v) for v in f]


def capture_frequencies(rate: Sequence[float], weight: Sequence[float], budget: float, window: int) -> list[float]:
    """Probe frequencies maximising expected captures of EIs ``[u, u + window]`` under ``Σ f = budget``.

    A feed probed every ``1/f >= window + 1`` chronons captures an update with
    probability ``(window + 1) f`` (the update's phase is uniform), so the
    gain ``w λ (window + 1) f`` is linear up to ``f = 1/(window + 1)``, where
    every update is captured: the optimum fills feeds by ``w λ``, best first
    (a fractional knapsack). Unlike freshness, no fast feed is abandoned.
    """
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    if len(weight) != len(rate):
        raise ValueError("rate and weight must have the same length")
    out = _capture(np.asarray(rate, dtype=np.float64), np.asarray(weight, dtype=np.float64), budget, window)
    return out.tolist()  # type: ignore[no-any-return]


def _capture(rate: _Floats, weight: _Floats, budget: float, window: int) -> _Floats:
    """:func:`capture_frequencies` on arrays."""
    value = np.maximum(weight, 0.0) * np.maximum(rate, 0.0)
    n = len(value)
    cap = 1.0 / (window + 1)
    order = np.lexsort((np.arange(n), -value))  # best first, ties by index
    # The j-th best gets what is left after j full shares, capped at one: min(cap, budget - j cap).
    given = np.clip(float(budget) - cap * np.arange(n), 0.0, cap)
    given[given <= 1e-12 * max(float(budget), 1.0)] = 0.0  # rounding dust is no probe
    given[value[order] <= 0] = 0.0
    out = np.zeros(n)
    out[order] = given
    return out


COORDINATION_DAMPING = 0.5
"""How far each round of :func:`coordinated_weights` moves the weights (halfway: the rounds settle
instead of swinging between the two feeds of a pair); ``CaptureExplore`` uses it too."""


def coordinated_weights(
    groups: Iterable[tuple[Sequence[int], float]],
    resources: Sequence[int],
    rate: Sequence[float],
    weight: Sequence[float],
    budget: float,
    window: int,
    *,
    rounds: int = 3,
    unfunded: float = 0.3,
    damping: float = COORDINATION_DAMPING,
) -> list[float]:
    """``weight`` re-spread so that a rule's share on a feed counts the chance its other feeds are caught.

    ``groups``: one ``(feeds, share)`` per waiting rule, ``feeds`` those whose
    next update it still needs and ``share`` its worth on each (the split
    behind ``weight``: ``weight[i]`` is the sum of the shares on resource
    ``i``). A watch rule's CEI is captured only if *every* feed it lacks is
    caught in time, so a share on a feed whose partners get no probes buys
    nothing, while :func:`capture_frequencies` on the plain sums funds feeds one
    by one and often funds one feed of a rule and not its partner. Each round
    computes the frequencies the current weights give, takes each feed's chance
    of being caught from them (1 when funded in full, ``unfunded`` plus its
    share of full funding otherwise: what the fill and the stride's leftovers
    give a feed the frequencies do not fund), and scales every share by the
    product of the chances of its rule's *other* feeds; the weights then move
    ``1 − damping`` of the way to those. A feed not in ``resources`` (blocked,
    in flight, taken by the engine) counts as caught; a resource in no group
    keeps its ``weight``. Undamped, the rounds can swing between the two feeds
    of a pair (each funded alone makes the other look like the one to fund);
    halfway steps settle instead, on the lone rule's feed when a pair cannot be
    funded whole (``tests/test_core_capture_explore.py``). A heuristic for the
    product objective, not its optimum: ``docs/discovery.md`` has the figures.

    Vectorised (numpy) over the groups' feeds; one :func:`capture_frequencies`
    per round. Pure.
    """
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    if not 0.0 < unfunded <= 1.0:
        raise ValueError(f"unfunded must be in (0, 1], got {unfunded}")
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    n = len(resources)
    if not n == len(rate) == len(weight):
        raise ValueError("resources, rate and weight must have the same length")
    out = _coordinated(groups, _ids(resources), np.asarray(rate, dtype=np.float64),
                       np.asarray(weight, dtype=np.float64), budget, window, rounds, unfunded, damping)
    return out.tolist()  # type: ignore[no-any-return]


def _coordinated(groups: Iterable[tuple[Sequence[int], float]], res: _Ints, rate: _Floats, plain: _Floats,
                 budget: float, window: int, rounds: int, unfunded: float, damping: float) -> _Floats:
    """:func:`coordinated_weights` on arrays, arguments checked."""
    n = res.size
    members, weights = _unzip(groups)  # one C-level pass per field, not a Python loop over the rules
    size_all = np.fromiter(map(len, members), dtype=np.int64, count=len(members))
    if rounds == 0 or n == 0 or not (size_all > 0).any():
        return plain
    entries = np.fromiter(itertools.chain.from_iterable(members), dtype=np.int64, count=int(size_all.sum()))
    size = size_all[size_all > 0]  # a rule with no feed left counts for nothing
    shares = np.asarray(weights, dtype=np.float64)[size_all > 0]
    order = np.argsort(res, kind="stable")
    sorted_res = res[order]
    pos = np.minimum(np.searchsorted(sorted_res, entries), n - 1)
    valid = sorted_res[pos] == entries
    idx = order[pos]
    offsets = np.concatenate(([0], np.cumsum(size)[:-1]))
    share_of_entry = np.repeat(shares, size)
    group_of_entry = np.repeat(np.arange(size.size), size)
    grouped = np.zeros(n, dtype=bool)
    grouped[idx[valid]] = True
    cap = 1.0 / (window + 1)
    current = plain.copy()
    for _ in range(rounds):
        f = _capture(rate, current, budget, window)
        chance = np.where(f >= cap * (1 - 1e-9), 1.0, unfunded + (1.0 - unfunded) * np.minimum(f / cap, 1.0))
        p = np.where(valid, chance[idx], 1.0)
        together = np.multiply.reduceat(p, offsets)
        contrib = share_of_entry * together[group_of_entry] / p
        summed = np.bincount(idx[valid], weights=contrib[valid], minlength=n)
        current = damping * current + (1.0 - damping) * np.where(grouped, summed, plain)
    return current


def _unzip(groups: Iterable[tuple[Sequence[int], float]]) -> tuple[tuple[Sequence[int], ...], tuple[float, ...]]:
    pairs = groups if isinstance(groups, list | tuple) else list(groups)
    if not pairs:
        return (), ()
    members, weights = zip(*pairs, strict=True)
    return members, weights


class FrequencyStride:
    """Turns probe frequencies into probes: each chronon every feed earns its ``f``; the richest are probed.

    A deterministic, near-periodic schedule (stride scheduling): a feed with
    ``f = 1/5`` is probed about every 5 chronons. Credit is capped at one
    probe's worth plus ``f`` so a feed blocked for a while does not burst.
    """

    __slots__ = ("_credit",)

    def __init__(self) -> None:
        self._credit = _Ledger(1)  # credit per resource id, numpy arrays: no Python loop over the feeds

    def pick(self, budget: int, resources: Sequence[int], freq: Sequence[float]) -> list[int]:
        """At most ``budget`` of ``resources`` (distinct) once each earned its ``freq[i]``: most credit first, then smaller id."""
        res = _ids(resources)
        f = np.asarray(freq, dtype=np.float64).reshape(len(freq))
        if f.size != res.size:
            raise ValueError("resources and freq must have the same length")
        slot = self._credit.slots(res)
        return res[_stride(self._credit.values[0], slot, res, f, budget)].tolist()  # type: ignore[no-any-return]

    def spend(self, resources: Sequence[int]) -> None:
        """``resources`` were probed by someone else this chronon: their next strided probe is a period away."""
        slot, found = self._credit.find(_ids(resources))
        slot = slot[found]
        credit = self._credit.values[0]
        if np.unique(slot).size == slot.size:
            _spend(credit, slot)
        else:  # a resource named twice pays twice
            for i in slot.tolist():
                credit[i] = max(float(credit[i]) - 1.0, 0.0)


# CaptureExplore's ledger rows (_SEEN: the chronon a resource was first shown; _TAIL: its tail floor's frequency)
_FREQ, _CREDIT, _SEEN, _TAIL = 0, 1, 2, 3


class CaptureExplore:
    """Capture-optimal frequencies on optimistic rates, with a floor of probes for every watched feed.

    ``capture`` (:func:`capture_frequencies` + :class:`FrequencyStride`) wins
    with known rates but, with learnt ones, commits to its first noisy
    estimates: a feed it gives no probes is never seen again, so its rate is
    never corrected (``docs/discovery-sim.md``). Each chronon, with spare
    budget ``B``:

    1. *explore*: a share ``epsilon`` of ``B`` (a running credit, so
       ``epsilon·B < 1`` still yields a probe every ``1/(epsilon·B)``
       chronons) goes to the stalest watched feeds (never probed first). A
       stalest-first cycle reaches every feed within ``len(resources)``
       explore probes, whatever the models say;
    2. *exploit*: capture frequencies for the rest, ``(1 − epsilon)·B``, on
       optimistic rates ``λ⁺ = λ · q_z / mean``, where ``q_z`` is the upper
       ``z`` quantile of the feed's Gamma posterior (:func:`gamma_upper`):
       a feed seen for few chronons looks faster than its mean, so it keeps
       probes until its estimate tightens (UCB, Auer et al. 2002). Without a
       posterior (rates known) ``λ⁺ = λ``. The frequencies fill feeds by
       ``weight · (λ⁺)^level_exponent``: 1 is capture-optimal when the rates
       are known; below 1 trusts a learnt level less (0: by weight alone,
       the rate still ranking the fill and the cycle still saying when). The
       service uses 1 on rates pooled across feeds, so that a feed's own rate
       counts once its record outweighs the pool's (``proxy.service.loop``'s
       ``LEVEL_EXPONENT`` and ``POOL_STRENGTH``; it used 0 on unpooled rates
       before, ``docs/discovery.md``). Recomputed every ``refresh``
       chronons or when a feed never given a frequency appears (a feed the
       caller left out for a while, in flight or taken by the engine, keeps
       its last one); executed by a :class:`FrequencyStride`;
    3. *fill*: any budget still unused (the stride's frequencies are capped
       at one probe per ``window + 1`` chronons, so they often leave some) goes
       to the greedy index ``weight · P(changed since the last success)``
       (:func:`background_probes`) on ``λ⁺``: the allocation is
       work-conserving.

    With ``revisit`` (:func:`revisit_bound`), a bound comes before all three:
    each chronon the feeds whose wait would otherwise pass ``revisit``
    chronons, earliest deadline first, are probed before anything else (the
    explore step's stalest feeds include them). No watched feed then waits
    longer than ``revisit`` chronons while the budget stays at least
    ``len(resources) / revisit`` a chronon; with less, the stalest still come
    first. It costs the exploit what the unfunded feeds need, and buys the
    tail of the detection delay (issue 45, ``docs/discovery.md``).

    A feed with a :class:`CycleShape` (a seasonal or near-periodic update
    model) is read at the time that matters rather than at its mean: its
    frequency uses the updates expected over the next ``max(window + 1,
    refresh)`` chronons (the ones the strided probes until the next refresh
    can capture), and its fill index the updates expected since its last
    successful probe, both from the shape's cumulative intensity. So an
    office-hours feed gets its probes in office hours and a daily digest just
    after its slot, within the same budget.

    With ``hint`` (``proxy.core.coupdate.CoUpdates.hints``: the chance each
    feed holds an update its last success missed, from its partners' updates),
    the feeds whose hint reaches ``react`` are probed after the due and explore
    steps and before the stride, the largest ``weight × hint`` first (a noisy
    ping), within a running credit of ``react_share`` of the budget, which the
    frequencies then leave (issue 45, item 3: not measured better than that
    share left to the fill without hints, ``docs/discovery.md``, "Co-updates").

    With ``coordination_rounds`` and the waiting rules' ``groups``, the
    frequencies go by :func:`coordinated_weights`: a rule's share on a feed
    counts as much as its other feeds are likely to be caught, so the budget
    funds whole rules rather than one feed of each.

    Deterministic (ties by resource id): no RNG. Stateful (stride credit,
    explore credit, frequencies): one instance per epoch, shown every chronon.
    Does not know which feeds are blocked: the caller leaves them out.
    """

    __slots__ = ("_epsilon", "_explore", "_freq_at", "_kept", "_ledger", "_level_exponent", "_react",
                 "_react_credit", "_react_share", "_refresh", "_reserve", "_rounds", "_skips",
                 "_unfunded", "_z")

    def __init__(
        self, *, z: float = 1.0, epsilon: float = 0.2, refresh: int = 10, level_exponent: float = 1.0,
        coordination_rounds: int = 0, unfunded: float = 0.3, react: float = 0.3, react_share: float = 0.1,
    ) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        if refresh < 1:
            raise ValueError(f"refresh must be >= 1, got {refresh}")
        if not math.isfinite(z):
            raise ValueError(f"z must be finite, got {z}")
        if not 0.0 <= level_exponent <= 1.0:
            raise ValueError(f"level_exponent must be in [0, 1], got {level_exponent}")
        if coordination_rounds < 0:
            raise ValueError(f"coordination_rounds must be >= 0, got {coordination_rounds}")
        if not 0.0 < unfunded <= 1.0:
            raise ValueError(f"unfunded must be in (0, 1], got {unfunded}")
        if not 0.0 < react <= 1.0:
            raise ValueError(f"react must be in (0, 1], got {react}")
        if not 0.0 <= react_share <= 1.0:
            raise ValueError(f"react_share must be in [0, 1], got {react_share}")
        self._react = react
        self._react_share = react_share
        self._react_credit = 0.0
        self._reserve = 0.0  # the budget share the frequencies leave to the react step (with hints)
        self._z = z
        self._rounds = coordination_rounds
        self._unfunded = unfunded
        self._level_exponent = level_exponent
        self._epsilon = epsilon
        self._refresh = refresh
        self._explore = 0.0
        # Per resource id: the last frequencies (row FREQ) and the stride credit (row CREDIT, a FrequencyStride's).
        self._ledger = _Ledger(4)
        self._freq_at: int | None = None
        # The sticky tail floor (TailFloor.sticky): the ids the last floor that took any feed kept, and
        # how many recomputations in a row have kept them since.
        self._kept: _Ints = np.empty(0, dtype=np.int64)
        self._skips = 0

    def frequency(self, resource: int) -> float:
        """Probes per chronon the last recomputation gave ``resource`` (0: none, or not seen yet)."""
        return self._ledger.get(resource, _FREQ, 0.0)

    def optimistic(self, rate: Sequence[float], posterior: Sequence[tuple[float, float]] | None) -> list[float]:
        """``λ⁺``: each rate scaled by its posterior's upper ``z`` quantile over its mean (as is without one)."""
        return self._optimistic(rate, posterior).tolist()  # type: ignore[no-any-return]

    def _optimistic(self, rate: Sequence[float] | _Floats, posterior: Sequence[tuple[float, float]] | None) -> _Floats:
        lam = np.maximum(np.asarray(rate, dtype=np.float64).reshape(len(rate)), 0.0)
        if posterior is None:
            return lam
        if len(posterior) != len(lam):
            raise ValueError("posterior and rate must have the same length")
        ab = np.asarray(posterior, dtype=np.float64).reshape(len(lam), 2)
        a, b = ab[:, 0], ab[:, 1]
        if ((a <= 0) | (b <= 0)).any():
            raise ValueError("shape and rate must be > 0")  # gamma_upper's refusal
        # gamma_upper, vectorised: the same operations in the same order. The cube is Python's
        # (libm's pow): numpy's SIMD power differs from it in the last bit for some values.
        c = np.maximum(1.0 - 1.0 / (9.0 * a) + self._z / (3.0 * np.sqrt(a)), 0.0)
        cube = np.array([x**3 for x in c.tolist()], dtype=np.float64)
        mean = a / b
        return lam * (mean * cube) / mean

    def pick(
        self,
        budget: int,
        now: int,
        resources: Sequence[int] | _Ints,
        last_success: Sequence[int | None] | _Ints | _Floats,
        rate: Sequence[float] | _Floats,
        weight: Sequence[float] | _Floats,
        window: int,
        posterior: Sequence[tuple[float, float]] | None = None,
        shape: Sequence[CycleShape | None] | None = None,
        groups: Callable[[], Iterable[tuple[Sequence[int], float]]] | None = None,
        revisit: int | Sequence[int] | None = None,
        hint: Sequence[float] | _Floats | None = None,
        tail: TailFloor | None = None,
        tail_rate: Sequence[float] | _Floats | None = None,
    ) -> list[int]:
        """At most ``budget`` distinct ``resources`` to probe at ``now``: due, explored, strided, then filled.

        Arguments as :func:`background_probes` (``rate``: the mean rate per
        chronon); ``window``: the watch rules' ``W`` (EIs ``[u, u + W]``);
        ``posterior[i]``: the ``(shape, rate)`` of the Gamma posterior of
        resource ``i``'s rate (updates found + prior, chronons observed +
        prior), or ``None`` when rates are known; ``shape[i]``: when in its
        cycle resource ``i`` changes (``None``: homogeneous, as is every
        resource when ``shape`` is ``None``); ``groups``: the waiting rules'
        split of ``weight`` (:func:`coordinated_weights`), asked for only when
        the frequencies are recomputed and only with ``coordination_rounds``
        set: the frequencies then go by the coordinated weights, the fill by
        ``weight``; ``revisit``: the longest a feed may go unprobed, one for
        all (:func:`revisit_bound`) or one per resource (``None``: no bound),
        the due feeds probed first, earliest deadline first; ``hint[i]``: the chance resource ``i``
        holds an update its rate does not explain (co-updates; ``None``: no hints). ``resources``
        are distinct; sequences or numpy arrays.

        One numpy pass over the feeds (the stride credit and frequencies are
        arrays by resource id); Python work per feed only for the shaped
        feeds' cycles and, with a posterior, the optimism's cube.
        """
        n = len(resources)
        if not n == len(last_success) == len(rate) == len(weight):
            raise ValueError("resources, last_success, rate and weight must have the same length")
        if shape is not None and len(shape) != n:
            raise ValueError("shape and resources must have the same length")
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        bound = None if revisit is None else np.broadcast_to(np.asarray(revisit, dtype=np.int64), (n,))
        if bound is not None and n and int(bound.min()) < 1:
            raise ValueError(f"revisit must be >= 1, got {int(bound.min())}")
        res = _ids(resources)
        lam = self._optimistic(rate, posterior)
        w = np.asarray(weight, dtype=np.float64).reshape(n)
        shaped = [] if shape is None else [i for i, cycle in enumerate(shape) if cycle is not None]
        ledger = self._ledger
        slot, known = ledger.find(res)
        if self._freq_at is None or now - self._freq_at >= self._refresh or not known.all():
            self._freq_at = now
            self._reserve = 0.0 if hint is None else self._react_share
            floor = np.zeros(n)
            if tail is not None and tail_rate is not None:
                if len(tail_rate) != n:
                    raise ValueError("tail_rate and resources must have the same length")
                # What the capture frequencies gave each feed beyond its floor at the last recomputation
                # (a feed held at its floor alone is not funded: its floor is what it costs).
                funded = np.zeros(n)
                planned = 0.0
                if known.any():
                    had, held = ledger.values[_FREQ, slot], ledger.values[_TAIL, slot]
                    funded = np.where(known & (w > 0) & (had > held + 1e-12), had, 0.0)
                    planned = float(np.where(known & ((w > 0) | (held > 0)), had, 0.0).sum())
                # Without a capture frequency a feed gets what all the frequencies (floors too) leave,
                # spread over the feeds without one (explore, fill), at least once per revisit bound:
                # the adaptive floor's idle pace. Counting the floor's own probes as spare would let it
                # see no tail once it had removed it, and drop itself every other recomputation.
                idle = max(budget - planned, 0.0) / max(int((funded <= 0).sum()), 1)
                if bound is not None:
                    idle = max(idle, 1.0 / float(bound.max()))
                lam_tail = np.asarray(tail_rate, dtype=np.float64)
                floor = _tail_floor(lam_tail, funded, (1.0 - self._epsilon) * budget, tail, idle)
                if (tail.sticky > 0 and tail.target is not None and tail.budget_share > 0
                        and float(np.maximum(lam_tail, 0.0).sum()) > 0):  # the adaptive floor was asked
                    floor = self._sticky(floor, res, tail)
            f = self._frequencies(budget, now, res, lam, w, window, shape, shaped, groups, floor)
            slot = ledger.slots(res)  # new ids first: the arrays may be replaced
            ledger.values[_TAIL, slot] = floor
            # A feed no rule waits for now (weight 0: one only the revisit bound keeps) keeps its last
            # frequency, as a feed the caller left out does, for when a rule waits for it again; unless
            # the tail floor keeps it, at its floor.
            now_given = (w > 0) | ~known | (floor > 0)
            ledger.values[_FREQ, slot[now_given]] = f[now_given]
            ledger.values[_SEEN, slot[~known]] = now
        freq, credit = ledger.values[_FREQ, slot], ledger.values[_CREDIT]
        if budget == 0 or n == 0:
            _stride(credit, slot, res, freq, 0)  # credit still accrues
            return []
        # 1. explore: the stalest first (never probed: stalest of all), then the smaller id.
        self._explore += self._epsilon * budget
        k = min(int(self._explore + 1e-9), budget, n)
        self._explore -= k
        self._explore = min(self._explore, 1.0)  # what n or the budget capped is not banked for later
        never, last = _chronons(last_success, now)
        free = np.ones(n, dtype=bool)
        due = np.empty(0, dtype=np.intp)
        if bound is not None:
            # 0. the revisit bound, earliest deadline first: a feed never probed waits from when it was
            # first shown (not at once: a first sweep over every feed would cost the funded ones a cycle).
            since = np.where(never, ledger.values[_SEEN, slot], last)
            need = min(_due(budget, now, since, bound), budget, n)
            if need > 0:
                due = _best(need, since + bound, res)
                free[due] = False
            k = min(max(k - due.size, 0), budget - due.size)  # a due probe is a stalest-first probe too
        # O(n): only the k stalest are sorted, not every watched feed each chronon.
        rest = np.flatnonzero(free)
        stalest = (rest[_best(k, np.where(never, -np.inf, last)[rest], res[rest])] if k > 0
                   else np.empty(0, dtype=np.intp))
        stalest = np.concatenate((due, stalest))
        free[stalest] = False
        if hint is not None:
            # 1b. react: a partner's update says this feed likely changed (a noisy ping), largest worth
            # first, within a running credit of react_share of the budget (the frequencies leave it).
            self._react_credit = min(self._react_credit + self._react_share * budget, float(budget))
            room = min(int(self._react_credit + 1e-9), budget - stalest.size)
            h = np.asarray(hint, dtype=np.float64).reshape(n)
            hot = np.flatnonzero(free & (w > 0) & (h >= self._react)) if room > 0 else np.empty(0, dtype=np.intp)
            hot = hot[_best(min(hot.size, room), -(w[hot] * h[hot]), res[hot])]
            self._react_credit -= hot.size
            free[hot] = False
            stalest = np.concatenate((stalest, hot))
        k = stalest.size
        _spend(credit, slot[stalest])
        # 2. exploit: the capture frequencies, strided, over the feeds not explored this chronon.
        # A feed no rule waits for now (weight 0: one only the revisit bound keeps) is left out of the
        # stride as if absent: no probe on the frequency it had when it was waited for, its credit kept;
        # unless the tail floor keeps it (then at its floor).
        rest = np.flatnonzero(free & ((w > 0) | (ledger.values[_TAIL, slot] > 0)))
        strided = rest[_stride(credit, slot[rest], res[rest], freq[rest], budget - k)]
        free[strided] = False
        picked = [stalest, strided]
        # 3. fill: work-conserving, by the greedy index on the optimistic rates.
        if k + strided.size < budget:
            rest = np.flatnonzero(free)
            if shape is not None and shaped:
                filled = rest[self._fill_shaped(budget - k - strided.size, now, rest, res, never, last, lam, w,
                                                shape, shaped, free)]
            else:
                filled = rest[_greedy(budget - k - strided.size, now, res[rest], never[rest], last[rest],
                                      lam[rest], w[rest])]
            _spend(credit, slot[filled])
            picked.append(filled)
        return res[np.concatenate(picked)].tolist()  # type: ignore[no-any-return]

    def _sticky(self, floor: _Floats, res: _Ints, tail: TailFloor) -> _Floats:
        """``floor``, or, when it takes no feed, the last floor's feeds at ``1 / tail.period`` (``tail.sticky``)."""
        if floor.any():
            self._kept, self._skips = res[floor > 0].copy(), 0
            return floor
        if self._kept.size == 0 or self._skips >= tail.sticky:
            return floor
        self._skips += 1
        return np.where(np.isin(res, self._kept), 1.0 / tail.period, floor)

    def _frequencies(
        self, budget: int, now: int, res: _Ints, lam: _Floats, weight: _Floats, window: int,
        shape: Sequence[CycleShape | None] | None, shaped: Sequence[int],
        groups: Callable[[], Iterable[tuple[Sequence[int], float]]] | None, floor: _Floats | None = None,
    ) -> _Floats:
        """The capture frequencies of ``res`` for the chronons until the next recomputation, at least ``floor``.

        The capture frequencies get the budget the tail floor leaves: its cost is what the floor adds
        over them, found in two passes (a floored feed the capture funds anyway costs nothing).
        """
        e = self._level_exponent
        if e == 1.0:
            ahead = lam.copy()
        elif e == 0.0:
            ahead = np.where(lam > 0, 1.0, 0.0)  # x ** 0.0 == 1.0
        else:  # Python's pow, as the scalar version (numpy's SIMD power may differ in the last bit)
            ahead = np.array([x**e if x > 0 else 0.0 for x in lam.tolist()], dtype=np.float64)
        if shape is not None and shaped:  # the rate over the chronons these frequencies serve, not the mean
            span = max(window + 1, self._refresh)
            at = np.asarray(shaped, dtype=np.intp)
            mass = cycle_masses(cast("list[CycleShape]", [shape[i] for i in shaped]), now, now + span)
            ahead[at] = ahead[at] * (mass / span)
        spend = max(1.0 - self._epsilon - self._reserve, 0.0) * budget
        fund = weight
        if groups is not None and self._rounds > 0:
            fund = _coordinated(groups(), res, ahead, weight, spend, window, self._rounds, self._unfunded,
                                COORDINATION_DAMPING)
        if floor is None or not floor.any():
            return _capture(ahead, fund, spend, window)
        f = _capture(ahead, fund, max(spend - float(floor.sum()), 0.0), window)
        for _ in range(2):
            f = _capture(ahead, fund, max(spend - float(np.maximum(floor - f, 0.0).sum()), 0.0), window)
        return np.maximum(f, floor)

    @staticmethod
    def _fill_shaped(
        budget: int, now: int, rest: npt.NDArray[np.intp], res: _Ints, never: _Bools, last: _Floats, lam: _Floats,
        weight: _Floats, shape: Sequence[CycleShape | None],
        shaped: Sequence[int], free: _Bools,
    ) -> npt.NDArray[np.intp]:
        """:func:`background_probes` over ``rest``, each shaped feed's updates since its last success read off its cycle."""
        elapsed = np.maximum(now - last, 0.0)
        expected = np.maximum(lam, 0.0) * elapsed
        at = np.asarray(shaped, dtype=np.intp)
        at = at[free[at] & ~never[at]]
        if at.size:
            mass = cycle_masses(cast("list[CycleShape]", [shape[i] for i in at.tolist()]), last[at], now)
            expected[at] = np.maximum(lam[at], 0.0) * mass
        score = np.maximum(weight, 0.0) * -np.expm1(-expected)
        score[never & (weight > 0)] = np.inf
        elapsed[never] = np.inf
        return _rank(budget, res[rest], score[rest], elapsed[rest])
