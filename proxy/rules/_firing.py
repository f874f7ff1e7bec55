"""A trigger rule's CEIs from opening to decision (issue 46: the evaluator split by purpose).

The main paper's trigger (§2.1, Figures 1, 3): a CEI opens unsealed with one EI on the
trigger feed; the first successful probe of that feed inside the window decides it. If
the rule's condition holds on what the probe found new, one EI per query feed joins and
the last seals it; otherwise it is sealed at rank 1. A rule's first probe after its
install sets its baseline (issue 23: "a baseline, not a backlog").

:class:`TriggerFiring` shares the evaluator's structures (the same objects, not copies):
the feeds' keyword automata, the open CEIs and the set of rules whose state changed. It
routes no event: the evaluator (:mod:`proxy.rules.evaluator`) calls it for each trigger
rule an event reaches.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from proxy.rules._compiled import CompiledRule, TriggerRule, selective
from proxy.rules._state import OpenCeis, TriggerState, carry_probe
from proxy.rules._telling import Prepared, told
from proxy.rules.matching import KeywordIndex
from proxy.rules.ports import (
    ChrononMapping,
    EntryLike,
    MatchedEntry,
    Op,
    OpenCei,
    RevealEi,
    SealCei,
)
from proxy.rules.update_models import FeedUpdateModels

__all__ = ["MAX_OVERWRITE", "TriggerFiring"]

MAX_OVERWRITE = 1440
"""The longest ``overwrite`` life in chronons (a day of minute chronons): a feed the model
expects to stay quiet for longer still has its query EI end, so its CEI is decided."""


class TriggerFiring:
    """Opens trigger rules' CEIs and decides them at the probes of their trigger feeds."""

    def __init__(
        self,
        clock: ChrononMapping,
        models: FeedUpdateModels,
        index: dict[int, KeywordIndex[str]],
        open_ceis: OpenCeis,
        dirty: set[str],
    ) -> None:
        self.clock = clock
        self.models = models
        self._index = index  # feed -> its rules' conditions in one automaton (the evaluator's)
        self._open = open_ceis
        self._dirty = dirty

    def index_of(self, rule: CompiledRule, resource: int) -> KeywordIndex[str] | None:
        """The feed's automaton when ``rule`` picks entries by keywords or a regex, else None."""
        cond = rule.condition
        return self._index.get(resource) if cond is not None and selective(cond) else None

    def open(self, rule: TriggerRule, state: TriggerState, t: int, finish: int) -> OpenCei:
        """Open the rule's next CEI, ``[t, finish]`` on its trigger feed, unsealed."""
        cei_id = f"{rule.rule_id}:{state.seq}"
        state.seq += 1
        state.last_open = t
        state.open[cei_id] = (t, finish)
        self._open.hold(cei_id, rule.rule_id, finish)
        self._dirty.add(rule.rule_id)
        # Unsealed: the trigger's outcome decides whether the query EIs join (main paper §2.1).
        return OpenCei(cei_id, rule.profile_id, rule.rule_id, ((rule.resource, t, finish),), sealed=False)

    def decide(
        self,
        rule: TriggerRule,
        state: TriggerState,
        started: int,
        new_entries: Sequence[EntryLike],
        prepared: list[Prepared],
        document: Sequence[EntryLike] | None,
    ) -> list[Op]:
        """A successful probe of the rule's trigger feed, started at ``started``: decide its CEIs.

        The open CEIs whose trigger window contains ``started`` are decided: if the
        condition holds on the new entries (``prepared``, or the baseline's picks of
        ``document`` at the rule's first probe), the query EIs join (``[started,
        started + within]``, or the ``overwrite`` estimate) and the last one seals the
        CEI; else the CEI is sealed at rank 1. ``every_nth`` counts the matching new
        entries of every successful probe, in or out of a window. A temporal rule with
        nothing to decide remembers whether the probe met its condition (the carry).
        """
        rule_id = rule.rule_id
        baseline: list[Prepared] | None = None
        if not state.baselined:
            # Issue 23: this probe sets the rule's baseline; the backlog does not fire it.
            seen = new_entries if document is None else document
            baseline = [Prepared(e) for e in self.after_baseline(rule, state, seen)]
            state.baselined = True
            self._dirty.add(rule_id)
        # An alert's CEI is decided by the probe that finds its update, even late (its
        # engine outcome, captured or missed, is the window's): the user is told what
        # matched either way. A query rule's trigger EI is decided only inside its window.
        alert = not rule.queries
        due = [c for c, (s, f) in state.open.items() if s <= started and (alert or started <= f)]
        counting = rule.condition is not None and rule.condition.every_nth is not None
        if not due and not counting:
            # Nothing to decide. A temporal rule's next check still sees what this probe
            # found new (another rule's probe, or a poll, took it first): remember whether
            # it met the condition, not the entries.
            if (rule.mode != "notify" and (baseline or new_entries)
                    and started not in state.carry
                    and self.holds(rule, state, baseline if baseline is not None else prepared)):
                carry_probe(state, started)
                self._dirty.add(rule_id)
            return []
        entries = baseline if baseline is not None else prepared
        # Probes that started by now and found a match since the last check fire the rule
        # (counting rules carry nothing: they count every probe).
        carried = bisect.bisect_right(state.carry, started)
        if carried:
            del state.carry[:carried]
            self._dirty.add(rule_id)
        fired = carried > 0 or self.holds(rule, state, entries)
        # What matched is told (issue 43): this probe's matching entries. A temporal rule
        # fired only by what earlier probes found (the carry keeps no entries) tells none.
        matched = told(rule_id, self.index_of(rule, rule.resource), rule.resource, entries) if fired and due else ()
        ops: list[Op] = []
        for cei_id in due:
            del state.open[cei_id]
            self._open.release(cei_id)
            self._dirty.add(rule_id)
            if fired:
                ops.extend(self._query_eis(rule, cei_id, started, matched))
            else:
                ops.append(SealCei(cei_id))
        return ops

    def holds(self, rule: TriggerRule, state: TriggerState, entries: list[Prepared]) -> bool:
        """Whether the rule's condition holds on ``entries`` (counting them for ``every_nth``)."""
        cond = rule.condition
        if cond is None:
            return bool(entries)
        index = self._index.get(rule.resource) if selective(cond) else None
        if index is None:
            matching = len(entries)
        elif cond.every_nth is None:  # any match will do: stop at the first
            return any(rule.rule_id in e.matches(index) for e in entries)
        else:
            matching = sum(1 for e in entries if rule.rule_id in e.matches(index))
        if cond.every_nth is None:
            return matching > 0
        before = state.nth_count
        state.nth_count += matching
        if matching:
            self._dirty.add(rule.rule_id)
        # Paper 002 §2.1, "WHEN COUNT(*) % X = 0": some entry of this batch is the X-th, 2X-th, …
        return state.nth_count // cond.every_nth > before // cond.every_nth

    def _query_eis(
        self, rule: TriggerRule, cei_id: str, t: int, matched: tuple[MatchedEntry, ...] = ()
    ) -> list[Op]:
        if not rule.queries:  # a single-feed alert: the trigger's EI alone, fired
            return [SealCei(cei_id, fired=True, matched=matched)]
        ops: list[Op] = []
        last = len(rule.queries) - 1
        for i, q in enumerate(rule.queries):
            finish = t + q.within if q.within is not None else self.overwrite_finish(q.resource, t)
            # The trigger's matching entries ride on the first query EI: told once per CEI.
            ops.append(RevealEi(cei_id, q.resource, t, finish, seal=i == last,
                                matched=matched if i == 0 else ()))
        return ops

    def overwrite_finish(self, resource: int, t: int) -> int:
        """The last chronon of an ``overwrite`` EI starting at ``t``: before the feed's expected next update."""
        at = self.clock.start_of(t).timestamp() - self.models.settings.origin
        expected = self.models.next_expected_update(resource, at)
        if not math.isfinite(expected):
            return t + MAX_OVERWRITE - 1
        chronons = math.ceil((expected - at) / self.clock.length - 1e-9)
        return t + min(max(chronons, 1), MAX_OVERWRITE) - 1

    def after_baseline(
        self, rule: TriggerRule, state: TriggerState, entries: Sequence[EntryLike]
    ) -> list[EntryLike]:
        """The entries of a rule's baseline probe that may fire it.

        Those published in or after the chronon the rule was installed in, and
        the rule's ``backfill`` newest of the others (undated entries count as
        the oldest: nothing says they are recent).
        """
        since = state.since
        if since is None:
            return list(entries)
        fresh: list[EntryLike] = []
        old: list[EntryLike] = []
        for e in entries:
            (fresh if e.published is not None and self.clock.chronon_at(e.published) >= since else old).append(e)
        if rule.backfill and old:
            dated = sorted((e for e in old if e.published is not None), key=lambda e: e.published, reverse=True)  # type: ignore[arg-type,return-value]
            undated = [e for e in old if e.published is None]
            fresh.extend((dated + undated)[: rule.backfill])
        return fresh
