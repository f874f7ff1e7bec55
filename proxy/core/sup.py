"""SUP and fbSUP (paper 002): predicted EIs for feeds whose updates a rule needs.

A rule that waits for updates of a feed that never pings ("Num Update Watch":
notify on every ``X``-th update, life ``window(Y)`` or ``overwrite``) only
learns of an update by probing. SUP (paper 002 §3.1, Algorithm 1) predicts the
execution intervals from an update model — the ``X``-th update expected at
``û`` gives the EI ``[û, û + Y]`` (``overwrite``: ``[û, û' - 1]``, ``û'`` the
update after) — and probes each at its **last** chronon, once per set of
overlapping EIs of a feed (``UpdateNotificationEIs``). That is the minimum
number of probes that satisfies every predicted EI (Theorem 3.1). fbSUP (§5.1,
Algorithm 2) adds feedback: a probe that finds the rule unsatisfied (fewer
than ``X`` new updates) opens a new predicted EI for the ``X - x`` updates
still to come, unless a probe is already planned inside it.

Two uses, one code:

* :func:`sup_plan` / :func:`sup_probes` — the static schedule of a whole
  epoch, for a known model (what the paper computes offline).
* :class:`SupPlanner` — the same chain built online, one predicted EI per
  rule at a time (so a learnt model can move it), with fbSUP's feedback when
  ``feedback=True``. Its predicted EIs are handed to the engine as rank-1
  CEIs (:meth:`PredictedEi.probe_window`), where they compete for the budget
  with the EIs the proxy knows; the simulator's pull-only runner does this.

Pure: the predictor (:mod:`proxy.core.rates`) is passed in; no clock, no RNG.
It does not decide what a probe found (the caller says how many updates).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from proxy.core.rates import UpdatePredictor

__all__ = [
    "Life",
    "PredictedEi",
    "SupPlanner",
    "WatchSpec",
    "predicted_ei",
    "sup_plan",
    "sup_probes",
]


class Life(StrEnum):
    """How long an update can be captured (paper 002 §2.1: overwrite, window(Y))."""

    WINDOW = "window"
    OVERWRITE = "overwrite"


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """A rule that needs update knowledge of one feed: every ``every``-th update, within its life."""

    resource: int
    every: int = 1
    window: int = 0
    life: Life = Life.WINDOW

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"every must be >= 1, got {self.every}")
        if self.window < 0:
            raise ValueError(f"window must be >= 0, got {self.window}")


@dataclass(frozen=True, slots=True)
class PredictedEi:
    """The EI of an update expected at ``start``, capturable until ``finish``."""

    resource: int
    start: int
    finish: int

    @property
    def probe_at(self) -> int:
        """Paper 002 §3.1: SUP probes at the last chronon where the utility is still 1."""
        return self.finish

    def probe_window(self) -> tuple[int, int, int]:
        """The EI the engine gets, ``(resource, probe_at, probe_at)``: the probe SUP plans."""
        return (self.resource, self.finish, self.finish)


def predicted_ei(
    predictor: UpdatePredictor, spec: WatchSpec, after: int, count: int, horizon: int
) -> PredictedEi | None:
    """The EI of the ``count``-th update expected after ``after`` (``None``: none before ``horizon``)."""
    u = predictor.next_expected(spec.resource, after, count, horizon=horizon)
    if u is None:
        return None
    if spec.life is Life.WINDOW:
        return PredictedEi(spec.resource, u, min(u + spec.window, horizon - 1))
    nxt = predictor.next_expected(spec.resource, u, 1, horizon=horizon)
    return PredictedEi(spec.resource, u, horizon - 1 if nxt is None else nxt - 1)


def sup_plan(predictor: UpdatePredictor, specs: Iterable[WatchSpec], horizon: int) -> list[PredictedEi]:
    """Every predicted EI of the epoch ``0 .. horizon-1`` (lines 3-4 and 12-13 of Algorithm 1).

    Each rule's chain starts at chronon 0 and each next EI is predicted from
    the previous *expected* update: static, no feedback.
    """
    out: list[PredictedEi] = []
    for spec in specs:
        after = -1
        while True:
            ei = predicted_ei(predictor, spec, after, spec.every, horizon)
            if ei is None:
                break
            out.append(ei)
            after = ei.start
    return out


def sup_probes(eis: Iterable[PredictedEi]) -> list[tuple[int, int]]:
    """Algorithm 1's probes ``(chronon, resource)``: each at the last chronon, once per overlap.

    Per resource, the EI that ends first is probed at its finish and every EI
    containing that chronon is satisfied (``UpdateNotificationEIs``): the
    greedy interval stabbing, which is the minimum (Theorem 3.1).
    """
    by_res: dict[int, list[tuple[int, int]]] = {}
    for ei in eis:
        by_res.setdefault(ei.resource, []).append((ei.finish, ei.start))
    probes: list[tuple[int, int]] = []
    for r, spans in by_res.items():
        spans.sort()
        last = -1
        for f, s in spans:
            if s <= last:
                continue  # the probe at `last` lies in [s, f] (last <= f: spans sorted by finish)
            last = f
            probes.append((f, r))
    probes.sort()
    return probes


@dataclass(slots=True)
class _Rule:
    spec: WatchSpec
    chain: PredictedEi | None  # the static chain's current predicted EI
    seen: int = 0  # updates of the feed found so far (the rule's counter)
    started: bool = False  # its chain has been started (by plan)


class SupPlanner:
    """SUP's chain of predicted EIs, built online; fbSUP's feedback when ``feedback``.

    Call :meth:`plan` once per chronon ``t`` (ascending) for the predicted
    EIs that became known at ``t``, and :meth:`on_probe` after every
    successful probe of a watched feed. The chain's next EI is predicted from
    the previous expected update as soon as the previous EI's probe chronon
    has passed (with a learnt model, from the model of that moment); an EI
    that the planned probe of the previous one already lies in is skipped
    (``UpdateNotificationEIs``).

    The rules may change while it runs (the service's watched feeds come and
    go as CEIs fill): :meth:`watch` adds one, whose chain starts at the next
    :meth:`plan` from that chronon; :meth:`unwatch` drops a feed's rules and
    its planned probes. It does not decide which predicted EIs get probed: the
    caller's budget does.
    """

    def __init__(
        self, predictor: UpdatePredictor, specs: Sequence[WatchSpec], horizon: int, *, feedback: bool = False
    ) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self._pred = predictor
        self._horizon = horizon
        self._feedback = feedback
        self._rules: dict[int, _Rule] = {}
        self._by_res: dict[int, list[int]] = {}
        self._next_id = 0
        self._due: list[tuple[int, int]] = []  # (chain EI's probe chronon, rule id); ids of dropped rules skipped
        self._fresh: list[int] = []  # rules whose chain the next plan() starts
        self._planned: dict[int, list[int]] = {}  # probe chronons planned per resource, sorted
        self._span = 1  # how far back a planned probe can still lie in a new EI (the widest window + 1)
        self._now = -1
        self._out: list[PredictedEi] = []
        self.extra = 0  # predicted EIs opened by feedback (fbSUP)
        for spec in specs:
            self.watch(spec)

    @property
    def feedback(self) -> bool:
        return self._feedback

    def watched(self) -> set[int]:
        """The resources some rule of the planner watches."""
        return set(self._by_res)

    def watch(self, spec: WatchSpec) -> None:
        """Add a rule; its chain starts at the next :meth:`plan`, after the chronon before it."""
        i = self._next_id
        self._next_id += 1
        self._rules[i] = _Rule(spec, None)
        self._by_res.setdefault(spec.resource, []).append(i)
        self._fresh.append(i)
        # An overwrite life's EI can start long before it is planned: keep every planned probe then.
        span = spec.window + 1 if spec.life is Life.WINDOW else self._horizon
        self._span = max(self._span, span)

    def unwatch(self, resource: int) -> None:
        """Drop every rule of ``resource`` and the probes planned for it (no rule needs them now)."""
        for i in self._by_res.pop(resource, ()):
            del self._rules[i]
        self._planned.pop(resource, None)
        self._out = [ei for ei in self._out if ei.resource != resource]  # fbSUP's, not yet handed out

    def plan(self, t: int) -> list[PredictedEi]:
        """Predicted EIs that become known at chronon ``t`` (hand them to the engine now)."""
        self._now = t
        fresh, self._fresh = self._fresh, []
        for i in fresh:
            rule = self._rules.get(i)
            if rule is not None and not rule.started:
                rule.started = True
                self._advance(i, rule, t - 1, t)
        due = self._due
        while due and due[0][0] < t:
            _, i = heapq.heappop(due)
            rule = self._rules.get(i)
            if rule is not None and rule.chain is not None:
                self._advance(i, rule, rule.chain.start, t)
        out, self._out = self._out, []
        return out

    def on_probe(self, resource: int, t: int, updates_found: int) -> None:
        """A successful probe of ``resource`` at ``t`` found ``updates_found`` new updates (fbSUP's feedback).

        Paper 002 §5.1: if no ``X``-th update was among them (``R_t(P)`` false),
        a new predicted EI for the ``X - x`` updates still to come is opened
        after ``t``, unless a planned probe of the feed already lies in it.
        """
        for i in self._by_res.get(resource, ()):
            rule = self._rules[i]
            before = rule.seen
            rule.seen += updates_found
            every = rule.spec.every
            satisfied = rule.seen // every > before // every
            if not self._feedback or satisfied:
                continue
            ei = predicted_ei(self._pred, rule.spec, t, every - rule.seen % every, self._horizon)
            if ei is None or ei.probe_at <= t:
                continue
            if self._covered(ei):
                continue
            self._emit(ei)
            self.extra += 1

    def _advance(self, i: int, rule: _Rule, after: int, t: int) -> None:
        """Move rule ``i``'s chain to its next predicted EI that still needs a probe at or after ``t``."""
        spec = rule.spec
        while True:
            ei = predicted_ei(self._pred, spec, after, spec.every, self._horizon)
            if ei is None:
                rule.chain = None
                return
            after = ei.start
            if ei.probe_at < t:
                continue  # already over when it became known (a lagging model)
            if self._covered(ei):
                # UpdateNotificationEIs: a planned probe already satisfies it; the chain moves on
                # from it, checked again when that probe's chronon has passed.
                rule.chain = ei
                heapq.heappush(self._due, (ei.probe_at, i))
                return
            rule.chain = ei
            heapq.heappush(self._due, (ei.probe_at, i))
            self._emit(ei)
            return

    def _covered(self, ei: PredictedEi) -> bool:
        """Whether a probe already planned for the feed lies in ``ei`` (then it needs none of its own)."""
        planned = self._planned.get(ei.resource)
        if not planned:
            return False
        i = bisect_left(planned, ei.start)
        return i < len(planned) and planned[i] <= ei.finish

    def _emit(self, ei: PredictedEi) -> None:
        planned = self._planned.setdefault(ei.resource, [])
        # A long-running planner forgets probes too old to lie in any EI still to come.
        del planned[: bisect_left(planned, self._now - self._span)]
        insort(planned, ei.probe_at)
        self._out.append(ei)
