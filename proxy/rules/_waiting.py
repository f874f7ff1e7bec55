"""Which feeds the rules read and wait on, and what finding each feed's next update in time is
worth: what the background allocation (:mod:`proxy.core.discovery`) reads from the evaluator
(issue 46: the evaluator split by purpose).

:class:`WaitingRules` is kept up to date incrementally by the evaluator, as rules are
installed and removed and as watch CEIs fill: reading it costs nothing. It decides nothing
about CEIs; it only counts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from proxy.core.discovery import waiting_share
from proxy.rules._compiled import CompiledRule, TriggerRule, WatchRule, waits_for_updates, window_of
from proxy.rules._state import WatchState

__all__ = ["WaitingRules"]


class WaitingRules:
    """The feeds the installed rules read, wait on, and weigh (see each view's docstring)."""

    def __init__(self) -> None:
        self._readers: dict[int, int] = {}  # feed -> rules that trigger on, watch or query it
        self._watchers: dict[int, int] = {}  # feed -> rules that wait for its updates
        self._weights: dict[int, float] = {}  # feed -> what finding its next update in time is worth
        self._weight_of: dict[str, tuple[tuple[int, ...], float]] = {}  # rule -> (feeds, worth each)
        self._windows: dict[int, int] = {}  # window (chronons) -> waiting rules with it

    # ------------------------------------------------------------------ changes

    def install(self, rule: CompiledRule, feeds: tuple[int, ...]) -> None:
        """A rule on ``feeds`` (its trigger feed, or its watched feeds) was installed; the
        caller then calls :meth:`reweigh` once its state exists."""
        self._count_readers(rule, +1)
        if waits_for_updates(rule):
            self.wait(feeds, +1)
            w = window_of(rule)
            self._windows[w] = self._windows.get(w, 0) + 1

    def uninstall(self, rule: CompiledRule, waiting: Iterable[int]) -> None:
        """A rule was removed; ``waiting``: the feeds it still waited on (an ``on: update``
        trigger's feed, a watch rule's feeds its current CEI did not cover)."""
        self._count_readers(rule, -1)
        self.wait(waiting, -1)
        self.reweigh(rule.rule_id, None, None)
        if waits_for_updates(rule):
            w = window_of(rule)
            left = self._windows[w] - 1
            if left:
                self._windows[w] = left
            else:
                del self._windows[w]

    def wait(self, resources: Iterable[int], delta: int) -> None:
        """``delta`` more (or fewer) rules wait for the next update of each of ``resources``."""
        _count(self._watchers, resources, delta)

    def reweigh(self, rule_id: str, rule: CompiledRule | None, state: WatchState | None) -> None:
        """Replace ``rule_id``'s share of :meth:`weights` with its current one (``rule`` None:
        removed). ``state``: a watch rule's state (which feeds its current CEI covers)."""
        old = self._weight_of.pop(rule_id, None)
        if old is not None:
            feeds, worth = old
            for r in feeds:
                left = self._weights.get(r, 0.0) - worth
                if left > 1e-9:
                    self._weights[r] = left
                else:
                    self._weights.pop(r, None)
        if rule is None or not waits_for_updates(rule):
            return
        if isinstance(rule, WatchRule):
            assert state is not None
            feeds = tuple(r for r in rule.resources if r not in state.covered)
            if not feeds:
                return
            # A CEI not opened yet is not missed yet, whatever became of the previous one.
            alive = state.alive or state.cei_id is None
            worth = waiting_share(len(feeds), alive)
        else:
            feeds, worth = (rule.resource,), 1.0
        self._weight_of[rule_id] = (feeds, worth)
        for r in feeds:
            self._weights[r] = self._weights.get(r, 0.0) + worth

    def _count_readers(self, rule: CompiledRule, delta: int) -> None:
        feeds = ((rule.resource, *(q.resource for q in rule.queries)) if isinstance(rule, TriggerRule)
                 else rule.resources)
        _count(self._readers, feeds, delta)

    # ------------------------------------------------------------------ views

    def reads(self, resource: int) -> bool:
        """Whether some rule triggers on, watches or queries ``resource``."""
        return resource in self._readers

    @property
    def watchers(self) -> Mapping[int, int]:
        """Feeds whose next update some rule waits for, and how many rules wait for it
        (:meth:`proxy.rules.TriggerEvaluator.update_watchers`)."""
        return self._watchers

    @property
    def weights(self) -> Mapping[int, float]:
        """What finding each waited-for feed's next update in time is worth
        (:meth:`proxy.rules.TriggerEvaluator.update_weights`)."""
        return self._weights

    @property
    def groups(self) -> Collection[tuple[tuple[int, ...], float]]:
        """``(feeds, share)`` per waiting rule, a live view
        (:meth:`proxy.rules.TriggerEvaluator.update_groups`)."""
        return self._weight_of.values()

    @property
    def window(self) -> int | None:
        """The shortest window (chronons) in which a waiting rule must see an update, or None."""
        return min(self._windows) if self._windows else None


def _count(counts: dict[int, int], keys: Iterable[int], delta: int) -> None:
    """Add ``delta`` to each key's count in ``counts``; a count that reaches 0 leaves the dict."""
    for k in keys:
        n = counts.get(k, 0) + delta
        if n > 0:
            counts[k] = n
        else:
            counts.pop(k, None)
