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
        """Feeds whose next update some rule waits for, and how many rules wait for it.

        ``on: update`` triggers wait for every update of their feed; a watch rule
        waits for the feeds its current CEI does not cover yet (AuctionWatch: a
        covered feed's later updates wait for the next CEI), so the slow feed
        that holds a CEI back counts, the fast one already in it does not. Only a
        probe or a ping tells these rules anything; on a feed that never pings,
        background probes must look (``proxy.core.discovery``). Kept up to date
        as profiles come and go and CEIs fill: reading it costs nothing. Read-only.
        """
        return self._watchers

    @property
    def weights(self) -> Mapping[int, float]:
        """What finding each waited-for feed's next update in time is worth: the background's weights.

        The feeds of :attr:`watchers`, each rule's worth spread over the
        feeds it still waits for. An ``on: update`` trigger adds 1 to its feed.
        A watch rule's CEI is captured only if every remaining feed's update is
        found within the window, so one of ``m`` remaining finds is worth about
        ``1/m`` of the CEI: a rule waiting for one last feed pulls hard on it,
        one that waits for all three of its feeds pulls a third on each. A watch
        CEI already missed (an update found too late) adds ``DEAD_CEI_WEIGHT``
        spread the same way: its remaining updates only end a CEI that is lost,
        but the next CEI begins after them. Kept up to date incrementally, like
        :attr:`watchers`; read-only.
        """
        return self._weights

    @property
    def groups(self) -> Collection[tuple[tuple[int, ...], float]]:
        """How :attr:`weights` is made: ``(feeds, share)`` per waiting rule, read-only.

        ``feeds`` are those the rule still waits for and ``share`` its worth on
        each (``1/m`` of a live watch CEI, ``DEAD_CEI_WEIGHT/m`` of a missed
        one, 1 for an ``on: update`` trigger); a feed's weight is the sum of the
        shares on it. What the background's coordinated frequencies read
        (``proxy.core.discovery.coordinated_weights``): a watch rule needs all
        its feeds caught, so its shares count only as much as its partners are.
        A live view, kept up to date with the weights: copy it to keep it.
        """
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
