"""The exact offline optimum of a workload, and its LP upper bound.

Integer program (solved by HiGHS through ``scipy.optimize.milp``):

- ``y_c ∈ {0,1}`` per CEI: ``c`` is captured;
- ``x_{r,t} ∈ {0,1}`` per (resource, chronon) pair that lies inside some
  EI's window (no other probe can capture anything);
- for every EI ``(r, s, f)`` of ``c``: ``y_c <= Σ_{s<=t<=f} x_{r,t}``;
- for every chronon ``t``: ``Σ_r x_{r,t} <= C_t``;
- maximise ``Σ_c y_c``.

The model sees the whole workload at once (offline): release and reveal
chronons are ignored, which is what makes it an upper bound for every online
policy.  Pre-solve reductions, each exact:

- a CEI whose EIs on distinct resources cannot all be probed even alone
  (earliest-deadline-first of unit jobs under ``C_t`` fails, an exact test
  for unit jobs) is dropped with ``y_c = 0``; so is a CEI whose EI lies where
  the budget is 0;
- an EI whose window contains another EI of the same CEI on the same
  resource is implied by it and gets no row;
- probe variables that serve only dropped CEIs are not created.

Deliberately not here: wall-clock timing and file I/O (the simulator times
the solve); the LP rounding heuristic of :func:`lp_bound` is a schedule, not
a claim of optimality.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from heapq import heappop, heappush
from typing import Any

import numpy as np

from proxy.core.model import CEI, Workload

# Refuse models beyond this many probe variables unless asked: HiGHS would
# take hours and the honest answer is "use lp-bound".
DEFAULT_MAX_VARIABLES = 2_000_000


class OptimumStatus(StrEnum):
    """How far the solver got."""

    OPTIMAL = "optimal"  # objective proven equal to the optimum
    TIME_LIMIT = "time-limit"  # best schedule found; the bound brackets the optimum
    LP = "lp-bound"  # LP relaxation only: bound is an upper bound, schedule a rounding


class OptimumTooLargeError(ValueError):
    """The instance has more probe variables than the caller allowed."""


@dataclass(frozen=True, slots=True)
class OptimumResult:
    """Outcome of :func:`optimal` or :func:`lp_bound`.

    ``objective`` counts the CEIs the returned ``schedule`` captures according
    to the model; ``bound`` is a proven upper bound on the optimum, so the
    optimum lies in ``[objective, floor(bound)]``.
    """

    status: OptimumStatus
    objective: int
    bound: float
    schedule: tuple[tuple[int, int], ...]
    captured_ids: frozenset[str]
    variables: int
    constraints: int
    dropped_ceis: int

    @property
    def gap(self) -> float:
        """Relative gap ``(floor(bound) - objective) / floor(bound)``; 0 when proven."""
        top = math.floor(self.bound + 1e-6)
        return 0.0 if top <= 0 else max(0.0, (top - self.objective) / top)

    @property
    def proven(self) -> bool:
        return self.status is OptimumStatus.OPTIMAL


@dataclass(frozen=True, slots=True)
class _Model:
    """The IP in matrix form, with the maps back to CEIs and probes."""

    kept: tuple[int, ...]  # indices into workload.ceis that have a y variable
    pairs: np.ndarray  # (p,) encoded r * K + t of each x variable
    a_rows: np.ndarray
    a_cols: np.ndarray
    a_vals: np.ndarray
    upper: np.ndarray
    dropped: int


def optimal(
    workload: Workload,
    *,
    time_limit: float | None = None,
    max_variables: int = DEFAULT_MAX_VARIABLES,
) -> OptimumResult:
    """Solve the IP exactly (or until ``time_limit`` seconds, then report the bracket)."""
    return _solve(workload, integral=True, time_limit=time_limit, max_variables=max_variables)


def lp_bound(
    workload: Workload,
    *,
    time_limit: float | None = None,
    max_variables: int = DEFAULT_MAX_VARIABLES,
) -> OptimumResult:
    """The LP relaxation's value (an upper bound on the optimum) and a rounded schedule.

    The schedule probes, at each chronon, the ``C_t`` pairs with the largest
    fractional ``x``; it is feasible but carries no guarantee.
    """
    return _solve(workload, integral=False, time_limit=time_limit, max_variables=max_variables)


def _solve(
    workload: Workload, *, integral: bool, time_limit: float | None, max_variables: int
) -> OptimumResult:
    try:
        from scipy.optimize import LinearConstraint, milp
        from scipy.sparse import coo_array
    except ImportError as exc:
        # scipy is in the `sim` extra, not a dependency of the service (pyproject.toml).
        raise ModuleNotFoundError(
            "the exact optimum and lp-bound need scipy (HiGHS), which comes with the 'sim' "
            "extra: pip install 'feed-monitoring-proxy[sim]'", name="scipy") from exc

    k = workload.chronons
    model = _build(workload)
    m, p = len(model.kept), len(model.pairs)
    if p > max_variables:
        raise OptimumTooLargeError(
            f"the optimum needs {p} probe variables, more than the allowed {max_variables}; "
            "use lp-bound or a smaller workload"
        )
    if m == 0:
        return OptimumResult(
            status=OptimumStatus.OPTIMAL if integral else OptimumStatus.LP,
            objective=0, bound=0.0, schedule=(), captured_ids=frozenset(),
            variables=0, constraints=0, dropped_ceis=model.dropped,
        )
    nrows = len(model.upper)
    a = coo_array((model.a_vals, (model.a_rows, model.a_cols)), shape=(nrows, m + p)).tocsr()
    c = np.concatenate([-np.ones(m), np.zeros(p)])
    options: dict[str, Any] = {"disp": False, "mip_rel_gap": 0.0}
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    res: Any = milp(
        c,
        constraints=LinearConstraint(a, -np.inf, model.upper),
        integrality=np.ones(m + p) if integral else np.zeros(m + p),
        bounds=(0, 1),
        options=options,
    )
    if res.x is None:
        if res.status == 1:
            # Time ran out before HiGHS held any solution: the empty schedule is
            # always feasible, the bound is the trivial one.
            return OptimumResult(
                status=OptimumStatus.TIME_LIMIT, objective=0, bound=float(m), schedule=(),
                captured_ids=frozenset(), variables=m + p, constraints=nrows,
                dropped_ceis=model.dropped,
            )
        raise RuntimeError(f"HiGHS failed on a model that is always feasible: {res.message}")
    x = np.asarray(res.x, dtype=float)
    if integral:
        chosen = np.flatnonzero(x[m:] > 0.5)
        schedule = _decode(model.pairs[chosen], k)
        captured = frozenset(workload.ceis[model.kept[i]].id for i in np.flatnonzero(x[:m] > 0.5))
        objective = len(captured)
        dual = getattr(res, "mip_dual_bound", None)
        bound = float(-dual) if dual is not None and np.isfinite(dual) else float(m)
        proven = res.status == 0 or math.floor(bound + 1e-6) <= objective
        status = OptimumStatus.OPTIMAL if proven else OptimumStatus.TIME_LIMIT
        if proven:
            bound = float(objective)
    else:
        schedule = _round(model.pairs, x[m:], workload)
        captured = _captured_by(workload, model.kept, schedule)
        objective = len(captured)
        if res.status == 0:
            bound, status = float(-res.fun), OptimumStatus.LP
        else:
            # An interrupted LP's primal value bounds nothing: fall back to the
            # trivial bound (every CEI the pre-solve kept).
            bound, status = float(m), OptimumStatus.TIME_LIMIT
    return OptimumResult(
        status=status, objective=objective, bound=bound, schedule=schedule,
        captured_ids=captured, variables=m + p, constraints=nrows, dropped_ceis=model.dropped,
    )


def _build(workload: Workload) -> _Model:
    k = workload.chronons
    budget = np.array([workload.budget.at(t) for t in range(k)], dtype=np.int64)
    kept: list[int] = []
    dropped = 0
    ei_rows: list[tuple[int, int, int, int]] = []  # (y index, r, start, finish)
    for ci, cei in enumerate(workload.ceis):
        if not _fits(cei, budget):
            dropped += 1
            continue
        y = len(kept)
        kept.append(ci)
        for r, s, f in _essential_eis(cei):
            ei_rows.append((y, r, s, f))
    if not ei_rows:
        empty = np.zeros(0, dtype=np.int64)
        return _Model(tuple(kept), empty, empty, empty, np.zeros(0), np.zeros(0), dropped)

    rows_arr = np.array(ei_rows, dtype=np.int64)
    lengths = rows_arr[:, 3] - rows_arr[:, 2] + 1
    owner = np.repeat(np.arange(len(ei_rows)), lengths)
    # chronons of each window: start + 0..len-1, vectorised.
    offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    t_all = np.repeat(rows_arr[:, 2], lengths) + offsets
    code_all = np.repeat(rows_arr[:, 1], lengths) * k + t_all
    pairs, x_index = np.unique(code_all, return_inverse=True)
    m = len(kept)
    n_ei = len(ei_rows)
    t_of_pair = pairs % k
    # EI rows: y_c - Σ x <= 0.   Budget rows: Σ_r x_{r,t} <= C_t.
    ei_y_rows = np.arange(n_ei)
    used_t, budget_row = np.unique(t_of_pair, return_inverse=True)
    a_rows = np.concatenate([ei_y_rows, owner, n_ei + budget_row])
    a_cols = np.concatenate([rows_arr[:, 0], m + x_index, m + np.arange(len(pairs))])
    a_vals = np.concatenate([np.ones(n_ei), -np.ones(len(owner)), np.ones(len(pairs))])
    upper = np.concatenate([np.zeros(n_ei), budget[used_t].astype(float)])
    return _Model(tuple(kept), pairs, a_rows, a_cols, a_vals, upper, dropped)


def _essential_eis(cei: CEI) -> list[tuple[int, int, int]]:
    """The CEI's EIs minus those implied by a narrower EI on the same resource."""
    eis = sorted({(ei.resource, ei.start, ei.finish) for ei in cei.eis})
    out: list[tuple[int, int, int]] = []
    for r, s, f in eis:
        if any(r2 == r and s <= s2 and f2 <= f and (s2, f2) != (s, f) for r2, s2, f2 in eis):
            continue
        out.append((r, s, f))
    return out


def _fits(cei: CEI, budget: np.ndarray) -> bool:
    """Whether ``cei`` alone can be captured under the budget.

    Exact for EIs on distinct resources (EDF on unit jobs); with a repeated
    resource one probe may serve several EIs, so only the per-window check applies.
    """
    for ei in cei.eis:
        if not budget[ei.start : ei.finish + 1].any():
            return False
    if len({ei.resource for ei in cei.eis}) < len(cei.eis):
        return True
    jobs = sorted((ei.start, ei.finish) for ei in cei.eis)
    heap: list[int] = []
    i = 0
    t = jobs[0][0]
    while i < len(jobs) or heap:
        if not heap and i < len(jobs) and jobs[i][0] > t:
            t = jobs[i][0]
        while i < len(jobs) and jobs[i][0] <= t:
            heappush(heap, jobs[i][1])
            i += 1
        for _ in range(int(budget[t])):
            if not heap:
                break
            if heappop(heap) < t:
                return False
        if heap and heap[0] <= t:
            return False
        t += 1
    return True


def _decode(codes: np.ndarray, k: int) -> tuple[tuple[int, int], ...]:
    return tuple(sorted((int(c % k), int(c // k)) for c in codes))


def _round(pairs: np.ndarray, x: np.ndarray, workload: Workload) -> tuple[tuple[int, int], ...]:
    """At each chronon keep the ``C_t`` pairs with the largest positive LP value."""
    k = workload.chronons
    ts = pairs % k
    order = np.lexsort((-x, ts))
    out: list[tuple[int, int]] = []
    taken = 0
    prev = -1
    for i in order.tolist():
        t = int(ts[i])
        if t != prev:
            prev, taken = t, 0
        if taken < workload.budget.at(t) and x[i] > 1e-9:
            out.append((t, int(pairs[i] // k)))
            taken += 1
    return tuple(sorted(out))


def _captured_by(
    workload: Workload, kept: Sequence[int], schedule: Sequence[tuple[int, int]]
) -> frozenset[str]:
    probed = set(schedule)
    out: set[str] = set()
    for ci in kept:
        cei = workload.ceis[ci]
        if all(any((t, ei.resource) in probed for t in range(ei.start, ei.finish + 1)) for ei in cei.eis):
            out.add(cei.id)
    return frozenset(out)
