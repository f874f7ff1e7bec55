"""When a temporal (``every``/``cron``) trigger rule is due (issue 46: the evaluator split by
purpose). Pure functions of the compiled rule, its state and the chronon clock; each says
whether it changed the state (the evaluator then saves the rule's state).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from proxy.rules._compiled import TriggerRule
from proxy.rules._state import TriggerState
from proxy.rules.ports import ChrononMapping

__all__ = ["FireQueue", "cron_next", "due_cron", "due_every"]


class FireQueue:
    """Temporal rules waiting for their next fire chronon, so a tick costs what is due, not
    one visit per rule. A rule not anchored yet (no ``next_fire``) is due at the next tick.
    Entries go stale when a rule is removed or restored: :meth:`due` checks each against the
    rule's state."""

    def __init__(self) -> None:
        self._unanchored: dict[str, None] = {}  # temporal rules whose schedule starts at the next tick
        self._heap: list[tuple[int, str]] = []  # (next fire chronon, rule id)

    def at(self, rule_id: str, fire: int | None) -> None:
        """``rule_id`` fires next at ``fire`` (None: not anchored, due at the next tick)."""
        if fire is None:
            self._unanchored[rule_id] = None
        else:
            self._unanchored.pop(rule_id, None)
            heapq.heappush(self._heap, (fire, rule_id))

    def forget(self, rule_id: str) -> None:
        self._unanchored.pop(rule_id, None)

    def due(self, t: int, states: Mapping[str, TriggerState]) -> set[str]:
        """The rules due at or before ``t``, taken off the queue (:meth:`at` puts them back)."""
        due = set(self._unanchored)
        self._unanchored.clear()
        heap = self._heap
        while heap and heap[0][0] <= t:
            fire_at, rule_id = heapq.heappop(heap)
            state = states.get(rule_id)
            if state is not None and state.next_fire == fire_at:
                due.add(rule_id)
        return due


def due_every(rule: TriggerRule, state: TriggerState, t: int) -> tuple[int | None, bool]:
    """The fire chronon of an ``every`` rule due at ``t`` (missed fires coalesced), or None;
    and whether ``state`` changed."""
    changed = False
    if state.next_fire is None:
        # Anchor the schedule at the period's start, else at the first tick seen.
        anchor = rule.period.first if rule.period.first is not None else t
        state.next_fire = anchor
        changed = True
    if t < state.next_fire:
        return None, changed
    fire = state.next_fire + (t - state.next_fire) // rule.every * rule.every
    state.next_fire = fire + rule.every
    return fire, True


def due_cron(
    rule: TriggerRule, state: TriggerState, t: int, clock: ChrononMapping
) -> tuple[int | None, bool]:
    """The fire chronon of a ``cron`` rule due at ``t``, or None; and whether ``state`` changed."""
    changed = False
    if state.next_fire is None:
        state.next_fire = cron_next(rule, t, clock)
        changed = True
    if state.next_fire is None or t < state.next_fire:
        return None, changed
    fire = state.next_fire
    if fire < t:
        # Ticks were missed: coalesce into the latest fire whose window still reaches t
        # (at most slack + 1 chronons to look at).
        c = cron_next(rule, max(fire, t - rule.slack), clock)
        while c is not None and c <= t:
            fire = c
            c = cron_next(rule, c + 1, clock)
    # Every fire time inside chronons <= t is coalesced into this one.
    state.next_fire = cron_next(rule, t + 1, clock)
    return fire, True


def cron_next(rule: TriggerRule, chronon: int, clock: ChrononMapping) -> int | None:
    """The chronon of the first cron fire time at or after the beginning of ``chronon``."""
    assert rule.cron is not None
    moment = rule.cron.get_next_fire_time(None, clock.start_of(chronon))
    return None if moment is None else max(chronon, clock.chronon_at(moment))
