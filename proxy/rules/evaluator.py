"""The trigger evaluator: clock ticks, probe results and pings in, engine operations out.

It is the bridge between the rule language (:mod:`proxy.rules.schemas`) and the
scheduling engine (``proxy.core.engine``). Like the engine it is an I/O-free
decider (style.md §1): chronons are integers passed in by the caller, cron fire
times go through the :class:`ChrononMapping` the service builds from the chronon
origin and length (its ``ChrononClock``), and nothing here reads a wall clock,
a database or the network. What it returns are small frozen operations (:class:`OpenCei`,
:class:`RevealEi`, :class:`SealCei`) that the service applies to the engine
(:func:`apply_ops`) and persists; its own runtime state is JSON-serialisable
per rule (:meth:`TriggerEvaluator.snapshot_state`).

Semantics, following the main paper's motivating example (§2.1, Figures 1, 3)
and paper 002 §2.1 (a rule is triggered by an event, then executable if its
condition holds):

* A **trigger rule** opens an *unsealed* CEI holding one EI on the trigger feed,
  ``[t, t + slack]``, at each fire chronon ``t`` (``every``/``cron``) or at each
  update ``t`` of the feed (``on``): an update notification (ping), or a probe
  that found new entries, dated by :func:`estimate_update_chronon` (feeds
  that never ping are most feeds). The first successful probe of the trigger feed
  inside that window decides it (:meth:`TriggerEvaluator.on_probe`): if the
  condition holds on the new entries the probe found, one EI per query feed
  joins the CEI (the last one seals it: rank 1 + number of query feeds);
  otherwise the CEI is sealed at rank 1 and is captured exactly when its trigger
  EI is. A probe that finds no new entry does not fire the rule.
* A **watch rule** builds the main paper's AuctionWatch(k) CEIs from the same
  updates: CEI j holds, for every watched feed, the EI ``[u, u + within]``
  of its first update ``u`` strictly after the last EI start of CEI j-1. An
  update found by a probe is captured by that probe when the probe lies inside
  ``[u, u + within]``; found later, its CEI is missed (pull-only monitoring).
* ``overwrite`` life (paper 002 §2.1: capture before the feed's next change)
  needs the time of the next change, which is unknown online; the main paper
  §2.1 lets EIs be predicted from an update model. We ask the feed's update
  model (:class:`proxy.rules.FeedUpdateModels`, the service's, learnt from
  documents, probes and pings) for the expected time of its next update after
  ``t`` and open ``[t, next - 1]`` (at least ``[t, t]``, at most
  :data:`MAX_OVERWRITE` chronons): the simulator's ``overwrite`` EI when the
  next update comes when expected. A seasonal or near-periodic model gives a
  short life just before a busy hour or a digest's slot and a long one after
  it; a Poisson model gives its mean interval. The evaluator reads the model
  and never feeds it: whoever owns it (the service's loop) does.

Not done here: fetching, parsing and deciding which entries are new (the feed
layer), checking that feed ids exist (``resolve_feed`` is the caller's), and
telling users (the service's outbox).

The evaluator holds the events and the bookkeeping that ties them together; the parts
of one purpose live beside it (issue 46): :mod:`proxy.rules._compiled` (a rule spec
compiled to resources and chronons), :mod:`proxy.rules._state` (a rule's runtime state,
its JSON and :func:`rule_progress`), :mod:`proxy.rules._schedule` (when a temporal rule
is due), :mod:`proxy.rules._telling` (entries matched once per probe, what a firing
tells), :mod:`proxy.rules._waiting` (which feeds rules wait on, and their weights),
:mod:`proxy.rules._feeds` (which rules read each feed, and its automaton),
:mod:`proxy.rules._firing` (a trigger CEI from opening to decision, and the baseline) and
:mod:`proxy.rules._auction` (a watch rule's AuctionWatch CEIs).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from typing import Any

from proxy.rules._auction import watch_update
from proxy.rules._compiled import (
    ALERT_SLACK,
    CompiledRule,
    TriggerRule,
    UnknownFeedError,
    compile_rule,
    conditional_watch,
    waits_for_updates,
)
from proxy.rules._feeds import FeedRules
from proxy.rules._firing import MAX_OVERWRITE, TriggerFiring
from proxy.rules._schedule import FireQueue, due_cron, due_every
from proxy.rules._state import (
    CARRY_MAX,
    STATE_VERSION,
    OpenCeis,
    RuleProgress,
    RuleStateError,
    TriggerState,
    WatchState,
    pinged_list,
    restore_rule_state,
    rule_progress,
)
from proxy.rules._telling import Prepared, matching, telling, told
from proxy.rules._waiting import WaitingRules
from proxy.rules.matching import KeywordIndex
from proxy.rules.ports import (
    ChrononGrid,
    ChrononMapping,
    EnginePort,
    EntryLike,
    MatchedEntry,
    Op,
    OpenCei,
    RevealEi,
    SealCei,
    apply_ops,
)
from proxy.rules.schemas import ProfileSpec
from proxy.rules.update_models import FeedUpdateModels
from proxy.rules.updates import changes_since, update_chronons

__all__ = [
    "ALERT_SLACK",
    "CARRY_MAX",
    "MAX_OVERWRITE",
    "STATE_VERSION",
    "ChrononGrid",
    "ChrononMapping",
    "EnginePort",
    "EntryLike",
    "Op",
    "OpenCei",
    "RevealEi",
    "RuleProgress",
    "RuleStateError",
    "SealCei",
    "TriggerEvaluator",
    "UnknownFeedError",
    "apply_ops",
    "rule_progress",
]

# --------------------------------------------------------------------------- the evaluator


class TriggerEvaluator:
    """Holds every profile's compiled rules and runtime state; turns events into engine ops.

    Deterministic: the same calls in the same order give the same operations and
    CEI ids (``"{rule_id}:{seq}"``). Rules are visited in the order their
    profiles were added, then in rule order.

    ``probe_grace``: an open trigger CEI is sealed and forgotten once its
    trigger window ended more than this many chronons ago (the engine has
    missed it by then, unless a probe that started inside the window is still
    in flight; probes never last this long). :meth:`on_trigger_missed` does
    it at once.
    """

    def __init__(
        self,
        clock: ChrononMapping,
        *,
        update_models: FeedUpdateModels | None = None,
        probe_grace: int = 30,
    ) -> None:
        self.clock = clock
        # When each feed changes (the service passes its own; times in POSIX seconds): sizes overwrite lives.
        self.models = update_models if update_models is not None else FeedUpdateModels()
        self._profiles: dict[str, list[str]] = {}  # profile id -> rule ids in order
        self._rules: dict[str, CompiledRule] = {}
        self._trigger_state: dict[str, TriggerState] = {}
        self._watch_state: dict[str, WatchState] = {}
        self._feeds = FeedRules()  # feed -> the rules that trigger on or watch it, and its automaton
        self._index = self._feeds.index  # the same dict: tests and TriggerFiring read it
        self._open = OpenCeis(probe_grace)  # open CEI -> its rule; undecided trigger CEIs swept
        self._retired_seq: dict[str, int] = {}  # rule id -> seq, so a re-added rule never reuses ids
        self._dirty: set[str] = set()
        self._pinged: dict[str, dict[int, int]] = {}  # rule -> feed -> chronon of its last ping
        self._waiting = WaitingRules()  # what the background allocation reads (proxy.rules._waiting)
        self._order: dict[str, int] = {}  # rule id -> installation order (the visiting order)
        self._counter = 0
        self._fires = FireQueue()  # temporal rules by next fire chronon (proxy.rules._schedule)
        # Opening and deciding trigger CEIs (proxy.rules._firing), on the structures above.
        self._firing = TriggerFiring(clock, self.models, self._index, self._open, self._dirty)

    @property
    def probe_grace(self) -> int:
        """Chronons after its window's end an undecided trigger CEI is sealed and forgotten."""
        return self._open.grace

    # ------------------------------------------------------------------ profiles

    def add_profile(
        self,
        profile_id: str,
        spec: ProfileSpec,
        resolve_feed: Callable[[str], int] | Mapping[str, int],
        *,
        rule_ids: Sequence[str] | None = None,
        since: int | None = None,
    ) -> list[str]:
        """Compile and install ``spec``; return its rule ids (default ``"{profile_id}/{index}"``).

        ``resolve_feed`` maps a feed id to the engine resource; a ``LookupError``
        from it becomes :class:`UnknownFeedError` naming the field
        (``rules.0.query.1.feed``). Compilation happens before anything is
        installed, so a failing profile leaves the evaluator unchanged. Rule ids
        must be unique among installed rules and should never be reused for a
        different rule: CEI ids are ``"{rule_id}:{seq}"``.

        ``since`` is the chronon the rules come into existence (issue 23, "a
        baseline, not a backlog"): updates dated before it are not theirs, and
        the first successful probe of a trigger feed after it sets the rule's
        baseline: of the new entries it finds, only those published at or after
        ``since`` (plus the rule's ``backfill`` newest others) may fire the rule.
        ``None`` (the default) sets no baseline: every new entry counts.
        """
        if profile_id in self._profiles:
            raise ValueError(f"profile {profile_id!r} is already installed; use replace_profile")
        compiled = self._prepare(profile_id, spec, resolve_feed, rule_ids)
        self._install(profile_id, compiled, since)
        return [rule.rule_id for rule in compiled]

    def remove_profile(self, profile_id: str) -> list[Op]:
        """Uninstall a profile; seal its open CEIs so the engine resolves them at their current rank.

        Unknown profile ids raise ``KeyError``. The returned ops must be applied:
        an unsealed CEI would otherwise stay pending in the engine for ever.
        A rule id added again later continues its CEI sequence (within this
        process; across restarts the service must not reuse rule ids).
        """
        ids = self._profiles.pop(profile_id)
        ops: list[Op] = []
        for rule_id in ids:
            rule = self._rules.pop(rule_id)
            self._dirty.discard(rule_id)
            self._pinged.pop(rule_id, None)
            self._fires.forget(rule_id)
            del self._order[rule_id]
            if isinstance(rule, TriggerRule):
                tstate = self._trigger_state.pop(rule_id)
                self._retired_seq[rule_id] = tstate.seq
                for cei_id in tstate.open:
                    self._open.release(cei_id)
                    ops.append(SealCei(cei_id))
                feeds: tuple[int, ...] = (rule.resource,)
            else:
                wstate = self._watch_state.pop(rule_id)
                self._retired_seq[rule_id] = wstate.seq
                if wstate.cei_id is not None and wstate.alive:
                    ops.append(SealCei(wstate.cei_id))
                    self._open.release(wstate.cei_id)
                feeds = rule.resources
            self._feeds.remove(rule_id, feeds)
            if isinstance(rule, TriggerRule):
                waiting = feeds if rule.mode == "notify" else ()
            else:
                waiting = tuple(r for r in feeds if r not in wstate.covered)
            self._waiting.uninstall(rule, waiting)
        return ops

    def replace_profile(
        self,
        profile_id: str,
        spec: ProfileSpec,
        resolve_feed: Callable[[str], int] | Mapping[str, int],
        *,
        rule_ids: Sequence[str] | None = None,
        since: int | None = None,
    ) -> tuple[list[str], list[Op]]:
        """Remove then add; a rule id present before and after continues its CEI sequence.

        Runtime state (counters, schedules) starts afresh: the rule may have
        changed, and so does its baseline (``since``, as in :meth:`add_profile`).
        If the new spec fails to compile the old profile stays installed.
        Returns the new rule ids and the ops sealing the old profile's open CEIs.
        """
        compiled = self._prepare(profile_id, spec, resolve_feed, rule_ids, replacing=True)
        ops = self.remove_profile(profile_id) if profile_id in self._profiles else []
        self._install(profile_id, compiled, since)
        return [rule.rule_id for rule in compiled], ops

    def _prepare(
        self,
        profile_id: str,
        spec: ProfileSpec,
        resolve_feed: Callable[[str], int] | Mapping[str, int],
        rule_ids: Sequence[str] | None,
        *,
        replacing: bool = False,
    ) -> list[CompiledRule]:
        """Check the rule ids and compile every rule, changing nothing."""
        ids = list(rule_ids) if rule_ids is not None else [f"{profile_id}/{i}" for i in range(len(spec.rules))]
        if len(ids) != len(spec.rules):
            raise ValueError(f"rule_ids has {len(ids)} ids for {len(spec.rules)} rules")
        own = set(self._profiles.get(profile_id, ())) if replacing else set()
        if len(set(ids)) != len(ids) or any(i in self._rules and i not in own for i in ids):
            raise ValueError(f"rule ids must be unique across installed profiles: {ids}")
        lookup = resolve_feed.__getitem__ if isinstance(resolve_feed, Mapping) else resolve_feed
        return [
            compile_rule(self.clock, profile_id, rule_id, rule, lookup, f"rules.{i}")
            for i, (rule_id, rule) in enumerate(zip(ids, spec.rules, strict=True))
        ]

    def _install(self, profile_id: str, compiled: list[CompiledRule], since: int | None) -> None:
        self._profiles[profile_id] = [rule.rule_id for rule in compiled]
        for rule in compiled:
            self._rules[rule.rule_id] = rule
            self._order[rule.rule_id] = self._counter
            self._counter += 1
            seq = self._retired_seq.pop(rule.rule_id, 0)
            if isinstance(rule, TriggerRule):
                self._trigger_state[rule.rule_id] = TriggerState(
                    seq=seq, since=since, baselined=since is None)
                if rule.mode != "notify":
                    self._fires.at(rule.rule_id, None)
                feeds: tuple[int, ...] = (rule.resource,)
            else:
                self._watch_state[rule.rule_id] = WatchState(seq=seq, since=since)
                feeds = rule.resources
            self._feeds.add(rule, feeds)
            self._waiting.install(rule, feeds)
            self._reweigh(rule.rule_id, rule)
            self._dirty.add(rule.rule_id)

    def profile_ids(self) -> list[str]:
        return list(self._profiles)

    def wants_document(self, resource: int) -> bool:
        """Whether the next probe of ``resource`` should fetch its whole document, not a 304.

        True while a trigger rule on it waits for its baseline: the baseline
        comes from the document (:meth:`on_probe`), and a feed an earlier probe
        saw would answer a conditional request with a 304, which holds no
        entries. A few whole fetches per rule made, none after.
        """
        for rule_id in self._feeds.on(resource):
            state = self._trigger_state.get(rule_id)
            if state is not None and not state.baselined:
                return True
        return False

    def reads(self, resource: int) -> bool:
        """Whether some rule triggers on, watches or queries ``resource``: its probes are the rules'.

        The loop leaves the feeds no rule reads to the budget no rule needs
        (``PROXY_UNWATCHED_PROBE_INTERVAL_SECONDS``).
        """
        return self._waiting.reads(resource)

    def update_watchers(self) -> Mapping[int, int]:
        """Feeds whose next update some rule waits for, and how many rules wait for it
        (:attr:`proxy.rules._waiting.WaitingRules.watchers` says which). Read-only, costs nothing."""
        return self._waiting.watchers

    def update_weights(self) -> Mapping[int, float]:
        """What finding each waited-for feed's next update in time is worth: the background's
        weights (:attr:`proxy.rules._waiting.WaitingRules.weights` says how). Read-only."""
        return self._waiting.weights

    def update_groups(self) -> Collection[tuple[tuple[int, ...], float]]:
        """How :meth:`update_weights` is made: ``(feeds, share)`` per waiting rule, a live view
        (:attr:`proxy.rules._waiting.WaitingRules.groups`); copy it to keep it."""
        return self._waiting.groups

    def _reweigh(self, rule_id: str, rule: CompiledRule | None) -> None:
        """Replace ``rule_id``'s share of :meth:`update_weights` with its current one (none: removed)."""
        self._waiting.reweigh(rule_id, rule, self._watch_state.get(rule_id))

    def update_window(self) -> int | None:
        """The shortest window (chronons) in which a waiting rule must see an update, or None.

        A watch rule's ``within``, an ``on: update`` trigger's ``slack``: a probe
        later than that after the update finds it too late for that rule.
        """
        return self._waiting.window

    def rule_ids(self, profile_id: str) -> list[str]:
        return list(self._profiles[profile_id])

    # ------------------------------------------------------------------ events

    def on_tick(self, t: int) -> list[Op]:
        """Chronon ``t`` begins: open the CEIs of temporal triggers due at or before ``t``.

        Fire chronons missed while the service was down are coalesced into one
        (APScheduler's ``coalesce``): a CEI opens at ``t`` if the latest missed
        fire's window ``[f, f + slack]`` still reaches ``t``, with the EI
        ``[t, f + slack]``. Also seals and forgets trigger CEIs whose window
        ended more than ``probe_grace`` chronons ago (see the class docstring).
        """
        ops: list[Op] = []
        for cei_id, rule_id in self._open.expired(t):  # released as they come
            if rule_id not in self._trigger_state:
                continue  # removed meanwhile
            # The engine missed these long ago (nobody called on_trigger_missed): seal to free them.
            self._trigger_state[rule_id].open.pop(cei_id, None)
            self._open.release(cei_id)
            self._dirty.add(rule_id)
            ops.append(SealCei(cei_id))
        for rule_id in sorted(self._fires.due(t, self._trigger_state), key=self._order.__getitem__):
            rule = self._rules[rule_id]
            assert isinstance(rule, TriggerRule)
            state = self._trigger_state[rule_id]
            fire, changed = (due_every(rule, state, t) if rule.mode == "every"
                             else due_cron(rule, state, t, self.clock))
            if changed:
                self._dirty.add(rule_id)
            last = rule.period.last
            if state.next_fire is not None and (last is None or state.next_fire <= last):
                self._fires.at(rule_id, state.next_fire)  # else: the period is over
            if fire is not None and fire + rule.slack >= t and rule.period.active(fire):
                ops.append(self._firing.open(rule, state, t, fire + rule.slack))
        return ops

    def on_probe(
        self,
        resource: int,
        started_chronon: int,
        success: bool,
        new_entries: Sequence[EntryLike],
        *,
        previous_success: int | None = None,
        document: Sequence[EntryLike] | None = None,
    ) -> list[Op]:
        """A probe of ``resource`` that started at ``started_chronon`` finished.

        Call it BEFORE recording the probe's capture in the engine. A failed
        probe decides nothing (another probe may still succeed in the window).

        1. **An update observation.** New entries after a previous successful
           probe (``previous_success``, the chronon it counted for) mean the
           feed changed in ``(previous_success, started]``: at the chronon
           :func:`estimate_update_chronon` gives, the feed's ``on: update``
           triggers open their CEI, exactly as a ping at that chronon would
           (:meth:`on_notification`). Its watch rules advance at each distinct
           change the entries' dates show (:func:`update_chronons`, in order):
           a rule whose current CEI began inside the interval takes the first
           change after that start, and a change that completes a CEI can
           begin the next. This probe captures the EIs it
           opened when it falls inside them; a change found later than the
           rule's window makes its CEI missed, as it was. A ping received in
           that interval already announced the change: the probe confirms it
           and adds nothing (they count once). Without ``previous_success``
           (the feed's first successful probe) the entries are its backlog,
           not a change, except those dated at or after a rule's install
           (``since``): changes the rule was waiting for
           (:meth:`_first_probe_updates`).
        2. **Decisions.** For each rule triggered by this feed, the open CEIs
           whose trigger window contains ``started_chronon`` are decided: if
           the condition holds on ``new_entries``, the query EIs join
           (``[started, started + within]``, or the ``overwrite`` estimate) and
           the last one seals the CEI; else the CEI is sealed at rank 1.
           ``every_nth`` counts the matching new entries of every successful
           probe of the feed, in or out of a window.

        A temporal (``every``/``cron``) trigger rule's check reads what is new
        since its previous check: what probes in between found new (for
        another rule, or a poll of the feed) counts for it: the probes whose
        new entries met its condition are remembered (``CARRY_MAX``) and
        persisted with its state, with its baseline's picks when the baseline
        probe decided nothing. An ``on: update`` rule decides at
        the probe that found the update, as before.

        ``document``: every entry the probe's document holds (a 200; None for a
        304 or when unknown). A trigger rule's baseline reads it rather than
        ``new_entries``: an earlier probe (another rule's, a poll of the feed
        before the rule was made) may have seen the entries published before
        the rule, which its ``backfill`` may fire on. :meth:`wants_document`
        says when a probe should fetch the document whole.
        """
        if not success:
            return []
        ops: list[Op] = []
        # Matched against the feed's automaton at most once, however many rules read them.
        prepared = [Prepared(e) for e in new_entries]
        if new_entries and previous_success is not None and previous_success < started_chronon:
            a, b = previous_success, started_chronon
            times: list[int] | None = None
            for rule_id in self._feeds.on(resource):
                rule = self._rules[rule_id]
                if conditional_watch(rule):
                    # Only the matching entries are updates for it (issue 43), dated by their own dates.
                    hits = self._matching(rule, resource, prepared)
                    if hits:
                        found = update_chronons((e.entry.published for e in hits), a, b, self.clock)
                        ops.extend(telling(self._rule_changes(rule_id, resource, found),
                                            self._told(rule, resource, hits)))
                    continue
                pinged = self._pinged.get(rule_id, {}).get(resource)
                if pinged is None or not a < pinged <= b:  # a ping already told this rule
                    if times is None:
                        times = update_chronons((e.published for e in new_entries), a, b, self.clock)
                    ops.extend(self._rule_changes(rule_id, resource, times))
        elif new_entries and previous_success is None:
            ops.extend(self._first_probe_updates(resource, started_chronon, prepared))
        for rule_id in self._feeds.on(resource):
            rule = self._rules[rule_id]
            if isinstance(rule, TriggerRule):  # decided by proxy.rules._firing
                ops.extend(self._firing.decide(rule, self._trigger_state[rule_id], started_chronon,
                                               new_entries, prepared, document))
        return ops

    def _first_probe_updates(self, resource: int, started: int, new_entries: list[Prepared]) -> list[Op]:
        """What a feed's first successful probe says to each rule: the changes dated since the rule's install.

        The document is the feed's backlog, but an entry dated at or after the
        chronon a rule was installed in (``since``) is a change the rule waited
        for (:func:`changes_since`): its ``on: update`` triggers open a CEI at
        the first one, and its watch rules advance at each, in order, exactly
        as if an earlier probe had found them. Without ``since`` (unknown),
        or with no entry dated since, the backlog says nothing. A ping since
        the install already told the rule. A watch rule with a ``when`` reads only the
        matching entries.
        """
        ops: list[Op] = []
        published = [e.entry.published for e in new_entries]
        for rule_id in self._feeds.on(resource):
            state = self._trigger_state.get(rule_id) or self._watch_state.get(rule_id)
            if state is None or state.since is None:
                continue
            rule = self._rules[rule_id]
            if conditional_watch(rule):
                # The matching entries that are changes since the install (not its backlog).
                since = state.since
                hits = [e for e in self._matching(rule, resource, new_entries)
                        if changes_since((e.entry.published,), since, started, self.clock)]
                times = changes_since([e.entry.published for e in hits], since, started, self.clock)
                if times:
                    ops.extend(telling(self._rule_changes(rule_id, resource, times),
                                        self._told(rule, resource, hits)))
                continue
            times = changes_since(published, state.since, started, self.clock)
            pinged = self._pinged.get(rule_id, {}).get(resource)
            if times and (pinged is None or not state.since <= pinged <= started):
                ops.extend(self._rule_changes(rule_id, resource, times))
        return ops

    def _rule_changes(self, rule_id: str, resource: int, times: Sequence[int]) -> list[Op]:
        """``resource`` changed at each of ``times`` (ascending), as a probe found: what ``rule_id`` does.

        A watch rule advances at each in turn (AuctionWatch takes the first change
        after the current CEI's start, and one that completes a CEI may begin the
        next); a trigger opens one CEI, at the first. Changes from before the rule
        existed are not the rule's.
        """
        ops: list[Op] = []
        for u in times if rule_id in self._watch_state else times[:1]:
            if not self._before_rule(rule_id, u):
                ops.extend(self._rule_update(rule_id, resource, u))
        return ops

    def on_notification(
        self, resource: int, t: int, profiles: Container[str] | None = None
    ) -> list[Op]:
        """An update notification (ping) for ``resource`` arrived during chronon ``t``.

        Opens a CEI ``[t, t + slack]`` for each ``on: update|ping`` trigger of the
        feed (at most one per rule and chronon: hubs repeat pings), and advances
        watch rules (AuctionWatch: see the module docstring). ``profiles`` limits the rules
        reached to those of these profiles (issue 22: a user's ping token opens
        CEIs for that user's rules only); ``None`` reaches every profile. The
        probe that later finds the announced entries confirms the update for
        the rules the ping reached and does not count it again for them; the
        rules it did not reach learn of it from that probe. A watch rule with a ``when`` is
        not advanced by a ping (it holds no entry to match): the probe that finds the entries
        decides for it.
        """
        ops: list[Op] = []
        for rule_id in self._feeds.on(resource):
            rule = self._rules[rule_id]
            if conditional_watch(rule):
                continue
            if profiles is None or rule.profile_id in profiles:
                if waits_for_updates(rule):  # a temporal rule reads no update: nothing to confirm
                    self._pinged.setdefault(rule_id, {})[resource] = t
                    self._dirty.add(rule_id)  # stored: the probe that confirms it after a restart adds nothing
                ops.extend(self._rule_update(rule_id, resource, t))
        return ops

    def _rule_update(self, rule_id: str, resource: int, t: int) -> list[Op]:
        """``resource`` changed at chronon ``t`` (pinged, or found by a probe): what ``rule_id`` does."""
        rule = self._rules[rule_id]
        if isinstance(rule, TriggerRule):
            state = self._trigger_state[rule_id]
            if rule.mode == "notify" and rule.period.active(t) and state.last_open != t:
                return [self._firing.open(rule, state, t, t + rule.slack)]
            return []
        return watch_update(rule, self._watch_state[rule_id], resource, t, self._open, self._waiting, self._dirty)

    def on_trigger_missed(self, cei_id: str) -> list[Op]:
        """The engine reports ``cei_id`` missed: drop its state; returns ``[SealCei]`` if it was open.

        The engine keeps a missed CEI's slot until it is sealed, so the seal
        lets it go. A missed watch CEI keeps being built silently, so the next
        one starts exactly where AuctionWatch says (after the missed CEI's last
        EI start). Unknown or already-closed ids give no ops.
        """
        return [SealCei(cei_id)] if self._forget_open(cei_id) else []

    on_cei_missed = on_trigger_missed

    def close(self, cei_ids: Iterable[str]) -> None:
        """Forget open CEIs that are already resolved elsewhere (the store, before a restart).

        After a restart the rule states can still list a trigger CEI the engine
        captured before the crash (it stays open here until its sweep): its
        verdict is in the store, the restored engine does not know it, and a
        later ``SealCei`` for it would be an op on an unknown CEI. Closing it
        here emits nothing: the verdict stands. A watch rule's current CEI
        closed this way is dead (it keeps being built silently, as after
        :meth:`on_trigger_missed`). Unknown ids are ignored; closed rules are
        marked dirty so their states are saved.
        """
        for cei_id in cei_ids:
            self._forget_open(cei_id)

    def _forget_open(self, cei_id: str) -> bool:
        """Drop an open CEI from its rule's state (a watch rule's current one dies); False if unknown."""
        rule_id = self._open.release(cei_id)
        if rule_id is None:
            return False
        self._dirty.add(rule_id)
        if rule_id in self._trigger_state:
            self._trigger_state[rule_id].open.pop(cei_id, None)
        elif rule_id in self._watch_state:
            wstate = self._watch_state[rule_id]
            if wstate.cei_id == cei_id:
                wstate.alive = False
                self._reweigh(rule_id, self._rules[rule_id])
        return True

    # ------------------------------------------------------------------ state

    def take_dirty(self) -> list[str]:
        """Rule ids whose state changed since the last call (to persist with ``snapshot_state``)."""
        dirty = sorted(self._dirty, key=self._order.__getitem__)
        self._dirty.clear()
        return dirty

    def snapshot_state(self, rule_id: str) -> dict[str, Any]:
        """The rule's runtime state as JSON-serialisable data (``KeyError`` for unknown rules).

        Not the update models (their owner persists them: ``FeedUpdateModels.snapshot``).
        """
        rule = self._rules[rule_id]
        state = self._trigger_state[rule_id] if isinstance(rule, TriggerRule) else self._watch_state[rule_id]
        return state.snapshot(pinged_list(self._pinged.get(rule_id, {})))

    def restore_state(self, rule_id: str, data: Mapping[str, Any]) -> None:
        """Restore what :meth:`snapshot_state` returned, after :meth:`add_profile` installed the rule."""
        rule = self._rules.get(rule_id)
        if rule is None:
            raise RuleStateError(f"rule {rule_id!r} is not installed")
        state, pinged = restore_rule_state(rule_id, "trigger" if isinstance(rule, TriggerRule) else "watch", data)
        if isinstance(state, TriggerState):
            for cei_id in self._trigger_state[rule_id].open:
                self._open.release(cei_id)
            self._trigger_state[rule_id] = state
            for cei_id, (_, finish) in state.open.items():
                self._open.hold(cei_id, rule_id, finish)
            if isinstance(rule, TriggerRule) and rule.mode != "notify":
                self._fires.at(rule_id, state.next_fire)
        else:
            oldw = self._watch_state[rule_id]
            if oldw.cei_id is not None:
                self._open.release(oldw.cei_id)
            self._waiting.wait([r for r in oldw.covered if r not in state.covered], +1)
            self._waiting.wait([r for r in state.covered if r not in oldw.covered], -1)
            self._watch_state[rule_id] = state
            self._reweigh(rule_id, rule)
            if state.cei_id is not None and state.alive:
                self._open.hold(state.cei_id, rule_id)
        if pinged:
            self._pinged[rule_id] = pinged
        else:
            self._pinged.pop(rule_id, None)

    def reserve_ids(self, rule_id: str, next_seq: int) -> None:
        """Number ``rule_id``'s next CEI ``next_seq`` or later: after a restart the store's
        high-water mark wins over a rule state saved before the last CEIs it opened, so an
        id is never handed out twice. Never lowers the sequence; marks the rule dirty."""
        state: TriggerState | WatchState | None = (
            self._trigger_state.get(rule_id) or self._watch_state.get(rule_id))
        if state is None:
            self._retired_seq[rule_id] = max(self._retired_seq.get(rule_id, 0), next_seq)
        elif state.seq < next_seq:
            state.seq = next_seq
            self._dirty.add(rule_id)

    def open_cei_ids(self) -> list[str]:
        """CEIs this evaluator may still grow or seal, sorted (the same before and after a restore)."""
        return self._open.ids()

    def holds_open(self, cei_id: str) -> bool:
        """Whether this evaluator may still grow or seal ``cei_id`` (one of :meth:`open_cei_ids`)."""
        return cei_id in self._open

    # ------------------------------------------------------------------ internals

    def _before_rule(self, rule_id: str, t: int) -> bool:
        """Whether chronon ``t`` is before ``rule_id`` was installed (when that is known)."""
        state = self._trigger_state.get(rule_id) or self._watch_state.get(rule_id)
        since = None if state is None else state.since
        return since is not None and t < since

    def _index_of(self, rule: CompiledRule, resource: int) -> KeywordIndex[str] | None:
        return self._firing.index_of(rule, resource)

    def _matching(self, rule: CompiledRule, resource: int, entries: list[Prepared]) -> list[Prepared]:
        """The entries of ``resource`` that meet ``rule``'s condition (every entry without one)."""
        return matching(rule.rule_id, self._index_of(rule, resource), entries)

    def _told(self, rule: CompiledRule, resource: int, entries: list[Prepared]) -> tuple[MatchedEntry, ...]:
        """What ``rule`` tells of ``entries`` when it fires (:func:`proxy.rules._telling.told`)."""
        return told(rule.rule_id, self._index_of(rule, resource), resource, entries)
