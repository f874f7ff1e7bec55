"""Paper 002's predicted EIs in the service: SUP and fbSUP for watched feeds that do not ping.

A rule that waits for a feed's updates (``TriggerEvaluator.update_weights``)
learns of them only by probing when the feed does not ping. Here the pure
:class:`proxy.core.sup.SupPlanner` predicts, from each feed's learnt update
model (:class:`proxy.rules.FeedUpdateModels`, through :class:`ModelPredictor`),
the EI ``[û, û + W]`` of its next expected update ``û``, ``W`` the window the
waiting rules ask (``TriggerEvaluator.update_window``), and plans its probe at
the EI's last chronon (002 §3.1). With fbSUP (002 §5.1) a probe of the feed
that found nothing opens the EI of the update still to come.

What they are and are not (``docs/discovery.md``, "Predicted EIs"):

* **The proxy's own probes, not users' CEIs.** They never enter the engine,
  the database, completeness or the API; only the probes they cause are
  real, counted by ``proxy_predicted_probes_total``.
* **After the known EIs, before the background.** The loop gives them the
  budget the engine's policy leaves (so they never take a probe from an EI a
  user's CEI needs), and the background allocation
  (:class:`proxy.core.discovery.CaptureExplore`) gets what they leave.
* **Only for feeds whose pings are not trusted** (``FeedUpdateModels.trusts_pings``):
  a feed that pings every update needs no prediction. Trust changes only
  when a probe is observed, so it is read again at each probe.

A predicted EI whose probe chronon finds its feed excluded (in flight,
blocked) or the budget spent is dropped, not deferred: after its last chronon
the update it predicts is too old for the rule's window.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Mapping
from enum import StrEnum

from proxy.core.sup import SupPlanner, WatchSpec
from proxy.rules import FeedUpdateModels
from proxy.rules.ports import ChrononMapping

__all__ = ["HORIZON", "ModelPredictor", "Predicted", "PredictedProbes", "predicted_probes"]

HORIZON = 2**62
"""The planner's epoch end: a service runs for ever."""


class Predicted(StrEnum):
    """Which predicted EIs the loop plans (setting ``PROXY_DISCOVERY_PREDICTED``)."""

    OFF = "off"
    SUP = "sup"  # paper 002 §3.1: the chain of expected updates
    FBSUP = "fbsup"  # §5.1: and a probe that found nothing opens the next EI


class ModelPredictor:
    """The update models (seconds) as a :class:`proxy.core.rates.UpdatePredictor` (chronons).

    Chronon ``t`` covers ``[origin + t·length, origin + (t + 1)·length)``; the
    ``count``-th update after chronon ``after`` is chained from the end of
    ``after`` through ``FeedUpdateModels.next_expected_update``.
    """

    def __init__(self, models: FeedUpdateModels, origin: float, length: float) -> None:
        if not (length > 0 and math.isfinite(length)):
            raise ValueError(f"chronon length must be a positive number of seconds, got {length!r}")
        self._models = models
        self._origin = origin
        self._length = length

    def next_expected(self, resource: int, after: int, count: int = 1, *, horizon: int) -> int | None:
        s = self._origin + (after + 1) * self._length
        for _ in range(count):
            s = self._models.next_expected_update(resource, s)
            if not math.isfinite(s):
                return None
        t = max(math.floor((s - self._origin) / self._length), after + 1)
        return t if t < horizon else None


class PredictedProbes:
    """The loop's SUP/fbSUP: which watched feeds to probe this chronon for their predicted EIs.

    Call :meth:`pick` every chronon with the budget the engine left and
    :meth:`on_probe` after every successful probe of any feed. Not thread-safe
    (the loop's order, like the engine).
    """

    def __init__(
        self, models: FeedUpdateModels, origin: float, length: float, *, feedback: bool,
        kinds: Collection[str] | None = None,
    ) -> None:
        self._models = models
        self._kinds = None if kinds is None else frozenset(kinds)
        self._planner = SupPlanner(ModelPredictor(models, origin, length), [], HORIZON, feedback=feedback)
        self._window: int | None = None
        self._watched: set[int] = set()
        self._told: set[int] = set()  # feeds needing no prediction: pings trusted, or a model kind not planned
        self._pending: list[tuple[int, int]] = []  # (probe chronon, resource)
        self.planned = 0  # predicted EIs handed out (fbSUP's included)
        self.dropped = 0  # of them, not probed at their chronon (budget, feed busy, rule done)

    @property
    def feedback(self) -> bool:
        return self._planner.feedback

    @property
    def feedback_eis(self) -> int:
        """Predicted EIs opened by fbSUP's feedback."""
        return self._planner.extra

    def watched(self) -> set[int]:
        """The feeds with a chain of predicted EIs."""
        return set(self._watched)

    def pick(
        self, spare: int, t: int, weights: Mapping[int, float], window: int | None, exclude: set[int]
    ) -> list[int]:
        """At most ``spare`` feeds whose predicted EI is due at ``t``, heaviest first.

        ``weights``: the feeds rules wait for and what each is worth
        (``TriggerEvaluator.update_weights``); ``window``: the shortest window
        they ask (``update_window``; None: no rule waits). The watched set
        follows ``weights`` (a feed that leaves it drops its chain; one that
        joins starts a chain from ``t``). ``exclude``: feeds the loop cannot
        probe now.
        """
        self._sync(weights, window)
        for ei in self._planner.plan(t):
            heapq.heappush(self._pending, (ei.probe_at, ei.resource))
            self.planned += 1
        due: list[int] = []
        pending = self._pending
        while pending and pending[0][0] <= t:
            at, r = heapq.heappop(pending)
            if at == t and r in self._watched and r not in exclude and r not in due:
                due.append(r)
            else:
                self.dropped += 1
        if len(due) > spare:
            due.sort(key=lambda r: -weights.get(r, 0.0))
            self.dropped += len(due) - max(spare, 0)
            due = due[: max(spare, 0)]
        return due

    def on_probe(self, resource: int, t: int, found: bool) -> None:
        """A successful probe of ``resource`` started at chronon ``t`` found new entries or not."""
        if not self._plans_for(resource):
            self._told.add(resource)
            self._unwatch(resource)
            return
        self._told.discard(resource)
        if resource in self._watched:
            self._planner.on_probe(resource, t, 1 if found else 0)

    def _sync(self, weights: Mapping[int, float], window: int | None) -> None:
        if window != self._window:  # every chain was planned for the old window
            for r in list(self._watched):
                self._unwatch(r)
            self._window = window
        if window is None:
            return
        for r in self._watched - weights.keys():
            self._unwatch(r)
        for r in weights.keys() - self._watched - self._told:
            if not self._plans_for(r):
                self._told.add(r)
                continue
            self._watched.add(r)
            self._planner.watch(WatchSpec(r, 1, window))

    def _plans_for(self, resource: int) -> bool:
        """Whether the feed gets predicted EIs: its pings are not trusted and its model's kind is planned.

        Both change only when the model observes a probe (or a document), so they are read at
        each probe of the feed.
        """
        if self._models.trusts_pings(resource):
            return False
        if self._kinds is None:
            return True
        counts = self._models.kind_counts((resource,))  # the last model choice: a dict lookup, no refit
        return any(n and kind in self._kinds for kind, n in counts.items())

    def _unwatch(self, resource: int) -> None:
        if resource in self._watched:
            self._watched.discard(resource)
            self._planner.unwatch(resource)


def predicted_probes(mode: Predicted, models: FeedUpdateModels, clock: ChrononMapping) -> PredictedProbes | None:
    """The loop's planner for ``mode`` on ``clock``'s chronons (None: ``off``)."""
    if mode is Predicted.OFF:
        return None
    return PredictedProbes(models, clock.start_of(0).timestamp(), clock.length, feedback=mode is Predicted.FBSUP)
