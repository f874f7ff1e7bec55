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
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from proxy.core.discovery import waiting_share
from proxy.errors import ValidationError
from proxy.rules.durations import parse_duration, to_chronons
from proxy.rules.matching import Condition, KeywordIndex, Match
from proxy.rules.ports import (
    MAX_MATCHED,
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
    first_chronon_from,
)
from proxy.rules.schemas import ProfileSpec, RuleSpec
from proxy.rules.update_models import FeedUpdateModels
from proxy.rules.updates import changes_since, update_chronons

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

__all__ = [
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

STATE_VERSION = 1
MAX_OVERWRITE = 1440
"""The longest ``overwrite`` life in chronons (a day of minute chronons): a feed the model
expects to stay quiet for longer still has its query EI end, so its CEI is decided."""

ALERT_SLACK = "15m"
"""A single-feed alert's default ``slack`` (a trigger without ``query``, issue 43): how long
after the feed's update the probe that finds it still captures the alert. Fifteen minutes,
the poll interval of a typical feed reader; at least one chronon."""


# --------------------------------------------------------------------------- errors


class UnknownFeedError(ValidationError):
    """A rule names a feed id that ``resolve_feed`` does not know; ``loc`` is the field path."""

    def __init__(self, loc: str, feed_id: str) -> None:
        self.loc = loc
        self.feed_id = feed_id
        super().__init__(f"{loc}: unknown feed {feed_id!r}")


class RuleStateError(ValidationError):
    """A stored rule state cannot be restored (unknown rule, wrong kind or version, bad shape)."""


# --------------------------------------------------------------------------- compiled rules


def _selective(condition: Condition) -> bool:
    """Whether ``condition`` picks entries (keywords or a regex), not only counts them."""
    return bool(condition.contains or condition.all or condition.exclude or condition.regex)


class _Prepared:
    """A new entry, matched once per probe against its feed's :class:`KeywordIndex`, however
    many rules read it (issue 43: one automaton per feed, not a loop over rules)."""

    __slots__ = ("_matches", "entry")

    def __init__(self, entry: EntryLike) -> None:
        self.entry = entry
        self._matches: dict[str, Match] | None = None

    def matches(self, index: KeywordIndex[str]) -> dict[str, Match]:
        if self._matches is None:
            self._matches = index.match(self.entry)
        return self._matches


@dataclass(frozen=True, slots=True)
class _Query:
    resource: int
    within: int | None  # None: overwrite life


@dataclass(frozen=True, slots=True)
class _Period:
    first: int | None  # first active chronon
    last: int | None  # last active chronon

    def active(self, t: int) -> bool:
        return (self.first is None or t >= self.first) and (self.last is None or t <= self.last)


@dataclass(frozen=True, slots=True)
class _TriggerRule:
    rule_id: str
    profile_id: str
    resource: int
    mode: Literal["every", "cron", "notify"]
    every: int  # chronons; 0 unless mode == "every"
    slack: int
    cron: CronTrigger | None
    condition: Condition | None
    queries: tuple[_Query, ...]
    period: _Period
    backfill: int  # entries from before the rule its first probe may fire on


@dataclass(frozen=True, slots=True)
class _WatchRule:
    rule_id: str
    profile_id: str
    resources: tuple[int, ...]
    within: int
    period: _Period
    # issue 43: a watched feed's update counts only if one of its new entries matches
    condition: Condition | None = None


@dataclass(slots=True)
class _TriggerState:
    seq: int = 0
    next_fire: int | None = None  # temporal rules: the next fire chronon once anchored
    last_open: int | None = None  # the chronon the last CEI opened (dedupes repeated pings)
    nth_count: int = 0
    open: dict[str, tuple[int, int]] = field(default_factory=dict)  # cei id -> trigger EI window
    since: int | None = None  # the chronon the rule was installed in (None: unknown, no bound)
    baselined: bool = True  # False until the first successful probe of the feed after install
    # Temporal rules: the start chronons (ascending, distinct) of the probes since the rule's last
    # check that found an entry meeting its condition (its baseline's picks, then new entries),
    # for the next check. Persisted with the state; at most CARRY_MAX.
    carry: list[int] = field(default_factory=list)


@dataclass(slots=True)
class _WatchState:
    seq: int = 0
    cei_id: str | None = None  # the CEI being built
    alive: bool = True  # False once the engine missed it: keep building, emit nothing
    covered: dict[int, int] = field(default_factory=dict)  # resource -> EI start in the current CEI
    prev_last_start: int = -1  # the last EI start of the previous CEI
    since: int | None = None  # the chronon the rule was installed in: earlier updates are not its


_Rule = _TriggerRule | _WatchRule

#: What a rule without keywords nor regex makes of any new entry: it counts.
_ANY = Match("any")


def _conditional_watch(rule: _Rule) -> bool:
    """Whether ``rule`` is a watch rule with a ``when``: only matching entries are updates for
    it, so a ping (which holds no entries) cannot advance it; the probe that finds them does."""
    return isinstance(rule, _WatchRule) and rule.condition is not None

CARRY_MAX = 64
"""Probes a temporal trigger rule remembers between two checks (``_TriggerState.carry``). A
check fires on any of those that started by its own start, so only probes that started
after the check's start and ended before it need more than the oldest: when more than
this many are kept, the second oldest goes (the oldest still fires the next check)."""


def _carry(state: _TriggerState, started: int) -> None:
    """Remember that a probe started at ``started`` (not yet remembered) found an entry meeting
    the rule's condition. A check reads those of probes that started by its own probe's start
    (probes may end out of order)."""
    bisect.insort(state.carry, started)
    if len(state.carry) > CARRY_MAX:
        del state.carry[1]

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
        self.probe_grace = probe_grace
        self._profiles: dict[str, list[str]] = {}  # profile id -> rule ids in order
        self._rules: dict[str, _Rule] = {}
        self._trigger_state: dict[str, _TriggerState] = {}
        self._watch_state: dict[str, _WatchState] = {}
        self._by_resource: dict[int, list[str]] = {}  # feed -> rules that trigger/watch it
        # feed -> its trigger rules' conditions in one automaton (issue 43)
        self._index: dict[int, KeywordIndex[str]] = {}
        self._readers: dict[int, int] = {}  # feed -> rules that trigger on, watch or query it
        self._open_index: dict[str, str] = {}  # open CEI id -> rule id
        self._retired_seq: dict[str, int] = {}  # rule id -> seq, so a re-added rule never reuses ids
        self._dirty: set[str] = set()
        self._pinged: dict[str, dict[int, int]] = {}  # rule -> feed -> chronon of its last ping
        self._watchers: dict[int, int] = {}  # feed -> rules that wait for its updates
        self._weights: dict[int, float] = {}  # feed -> what finding its next update in time is worth
        self._weight_of: dict[str, tuple[tuple[int, ...], float]] = {}  # rule -> (feeds, worth each)
        self._wait_windows: dict[int, int] = {}  # window (chronons) -> waiting rules with it
        self._order: dict[str, int] = {}  # rule id -> installation order (the visiting order)
        self._counter = 0
        # Temporal rules wait in a heap by next fire chronon, so a tick costs what is due,
        # not one visit per rule. Entries go stale when a rule is removed or restored;
        # they are checked against the rule's state when popped.
        self._unanchored: dict[str, None] = {}  # temporal rules whose schedule starts at the next tick
        self._fire_heap: list[tuple[int, str]] = []  # (next fire chronon, rule id)
        self._sweep_heap: list[tuple[int, str]] = []  # (trigger finish + probe_grace, cei id)

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
            self._unanchored.pop(rule_id, None)
            del self._order[rule_id]
            for r in (rule.resource,) if isinstance(rule, _TriggerRule) else rule.resources:
                index = self._index.get(r)
                if index is not None and rule_id in index:
                    index.remove(rule_id)
                    if not len(index):
                        del self._index[r]
            if isinstance(rule, _TriggerRule):
                tstate = self._trigger_state.pop(rule_id)
                self._retired_seq[rule_id] = tstate.seq
                for cei_id in tstate.open:
                    self._open_index.pop(cei_id, None)
                    ops.append(SealCei(cei_id))
                feeds: tuple[int, ...] = (rule.resource,)
            else:
                wstate = self._watch_state.pop(rule_id)
                self._retired_seq[rule_id] = wstate.seq
                if wstate.cei_id is not None and wstate.alive:
                    ops.append(SealCei(wstate.cei_id))
                    self._open_index.pop(wstate.cei_id, None)
                feeds = rule.resources
            for r in feeds:
                listed = self._by_resource[r]
                listed.remove(rule_id)
                if not listed:
                    del self._by_resource[r]
            self._count_readers(rule, -1)
            if isinstance(rule, _TriggerRule):
                if rule.mode == "notify":
                    self._wait(feeds, -1)
            else:
                self._wait([r for r in feeds if r not in wstate.covered], -1)
            self._reweigh(rule_id, None)
            if _waits_for_updates(rule):
                w = _update_window(rule)
                left = self._wait_windows[w] - 1
                if left:
                    self._wait_windows[w] = left
                else:
                    del self._wait_windows[w]
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
    ) -> list[_Rule]:
        """Check the rule ids and compile every rule, changing nothing."""
        ids = list(rule_ids) if rule_ids is not None else [f"{profile_id}/{i}" for i in range(len(spec.rules))]
        if len(ids) != len(spec.rules):
            raise ValueError(f"rule_ids has {len(ids)} ids for {len(spec.rules)} rules")
        own = set(self._profiles.get(profile_id, ())) if replacing else set()
        if len(set(ids)) != len(ids) or any(i in self._rules and i not in own for i in ids):
            raise ValueError(f"rule ids must be unique across installed profiles: {ids}")
        lookup = resolve_feed.__getitem__ if isinstance(resolve_feed, Mapping) else resolve_feed
        return [
            self._compile(profile_id, rule_id, rule, lookup, f"rules.{i}")
            for i, (rule_id, rule) in enumerate(zip(ids, spec.rules, strict=True))
        ]

    def _install(self, profile_id: str, compiled: list[_Rule], since: int | None) -> None:
        self._profiles[profile_id] = [rule.rule_id for rule in compiled]
        for rule in compiled:
            self._rules[rule.rule_id] = rule
            self._order[rule.rule_id] = self._counter
            self._counter += 1
            seq = self._retired_seq.pop(rule.rule_id, 0)
            if isinstance(rule, _TriggerRule):
                self._trigger_state[rule.rule_id] = _TriggerState(
                    seq=seq, since=since, baselined=since is None)
                if rule.condition is not None and _selective(rule.condition):
                    self._index.setdefault(rule.resource, KeywordIndex()).add(
                        rule.rule_id, rule.condition)
                if rule.mode != "notify":
                    self._unanchored[rule.rule_id] = None
                feeds: tuple[int, ...] = (rule.resource,)
            else:
                self._watch_state[rule.rule_id] = _WatchState(seq=seq, since=since)
                feeds = rule.resources
                if rule.condition is not None and _selective(rule.condition):
                    for r in feeds:
                        self._index.setdefault(r, KeywordIndex()).add(rule.rule_id, rule.condition)
            for r in feeds:
                self._by_resource.setdefault(r, []).append(rule.rule_id)
            self._count_readers(rule, +1)
            if _waits_for_updates(rule):
                self._wait(feeds, +1)
                w = _update_window(rule)
                self._wait_windows[w] = self._wait_windows.get(w, 0) + 1
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
        for rule_id in self._by_resource.get(resource, ()):
            state = self._trigger_state.get(rule_id)
            if state is not None and not state.baselined:
                return True
        return False

    def reads(self, resource: int) -> bool:
        """Whether some rule triggers on, watches or queries ``resource``: its probes are the rules'.

        The loop leaves the feeds no rule reads to the budget no rule needs
        (``PROXY_UNWATCHED_PROBE_INTERVAL_SECONDS``).
        """
        return resource in self._readers

    def _count_readers(self, rule: _Rule, delta: int) -> None:
        feeds = ((rule.resource, *(q.resource for q in rule.queries)) if isinstance(rule, _TriggerRule)
                 else rule.resources)
        _count(self._readers, feeds, delta)

    def update_watchers(self) -> Mapping[int, int]:
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

    def update_weights(self) -> Mapping[int, float]:
        """What finding each waited-for feed's next update in time is worth: the background's weights.

        The feeds of :meth:`update_watchers`, each rule's worth spread over the
        feeds it still waits for. An ``on: update`` trigger adds 1 to its feed.
        A watch rule's CEI is captured only if every remaining feed's update is
        found within the window, so one of ``m`` remaining finds is worth about
        ``1/m`` of the CEI: a rule waiting for one last feed pulls hard on it,
        one that waits for all three of its feeds pulls a third on each. A watch
        CEI already missed (an update found too late) adds ``DEAD_CEI_WEIGHT``
        spread the same way: its remaining updates only end a CEI that is lost,
        but the next CEI begins after them. Kept up to date incrementally, like
        :meth:`update_watchers`; read-only.
        """
        return self._weights

    def update_groups(self) -> Collection[tuple[tuple[int, ...], float]]:
        """How :meth:`update_weights` is made: ``(feeds, share)`` per waiting rule, read-only.

        ``feeds`` are those the rule still waits for and ``share`` its worth on
        each (``1/m`` of a live watch CEI, ``DEAD_CEI_WEIGHT/m`` of a missed
        one, 1 for an ``on: update`` trigger); a feed's weight is the sum of the
        shares on it. What the background's coordinated frequencies read
        (``proxy.core.discovery.coordinated_weights``): a watch rule needs all
        its feeds caught, so its shares count only as much as its partners are.
        A live view, kept up to date with the weights: copy it to keep it.
        """
        return self._weight_of.values()

    def _reweigh(self, rule_id: str, rule: _Rule | None) -> None:
        """Replace ``rule_id``'s share of :meth:`update_weights` with its current one (none: removed)."""
        old = self._weight_of.pop(rule_id, None)
        if old is not None:
            feeds, worth = old
            for r in feeds:
                left = self._weights.get(r, 0.0) - worth
                if left > 1e-9:
                    self._weights[r] = left
                else:
                    self._weights.pop(r, None)
        if rule is None or not _waits_for_updates(rule):
            return
        if isinstance(rule, _WatchRule):
            state = self._watch_state[rule_id]
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

    def update_window(self) -> int | None:
        """The shortest window (chronons) in which a waiting rule must see an update, or None.

        A watch rule's ``within``, an ``on: update`` trigger's ``slack``: a probe
        later than that after the update finds it too late for that rule.
        """
        return min(self._wait_windows) if self._wait_windows else None

    def _wait(self, resources: Iterable[int], delta: int) -> None:
        _count(self._watchers, resources, delta)

    def rule_ids(self, profile_id: str) -> list[str]:
        return list(self._profiles[profile_id])

    def _compile(
        self,
        profile_id: str,
        rule_id: str,
        rule: RuleSpec,
        lookup: Callable[[str], int],
        loc: str,
    ) -> _Rule:
        def resource(feed_id: str, where: str) -> int:
            try:
                return int(lookup(feed_id))
            except LookupError:
                raise UnknownFeedError(f"{loc}.{where}", feed_id) from None

        def chronons(text: str, *, minimum: int = 0) -> int:
            return to_chronons(parse_duration(text), self.clock.length, minimum=minimum)

        period = _Period(None, None)
        if rule.period is not None:
            period = _Period(
                None if rule.period.start is None else first_chronon_from(self.clock, rule.period.start),
                None if rule.period.end is None else first_chronon_from(self.clock, rule.period.end) - 1,
            )
        if rule.watch is not None:
            return _WatchRule(
                rule_id=rule_id,
                profile_id=profile_id,
                resources=tuple(resource(f, f"watch.feeds.{j}") for j, f in enumerate(rule.watch.feeds)),
                within=chronons(rule.watch.within),
                period=period,
                condition=None if rule.watch.when is None else Condition.from_spec(rule.watch.when),
            )
        trigger = rule.trigger
        assert trigger is not None  # guaranteed by RuleSpec
        condition = None if trigger.when is None else Condition.from_spec(trigger.when)
        cron = None
        if trigger.cron is not None:
            from apscheduler.triggers.cron import CronTrigger

            cron = CronTrigger.from_crontab(trigger.cron, timezone=trigger.timezone)
        mode: Literal["every", "cron", "notify"] = (
            "every" if trigger.every is not None else "cron" if cron is not None else "notify"
        )
        return _TriggerRule(
            rule_id=rule_id,
            profile_id=profile_id,
            resource=resource(trigger.feed, "trigger.feed"),
            mode=mode,
            every=chronons(trigger.every, minimum=1) if trigger.every is not None else 0,
            # The default slack is one chronon: a window the scheduler can actually choose in;
            # a single-feed alert's is ALERT_SLACK (a reader's poll interval), at least that.
            slack=(chronons(trigger.slack) if trigger.slack is not None
                   else 1 if rule.query is not None
                   else max(1, chronons(ALERT_SLACK))),
            cron=cron,
            condition=condition,
            queries=tuple(
                _Query(resource(q.feed, f"query.{j}.feed"), None if q.within is None else chronons(q.within))
                for j, q in enumerate(rule.query or ())
            ),
            period=period,
            backfill=trigger.backfill or 0,
        )

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
        sweep = self._sweep_heap
        while sweep and sweep[0][0] < t:
            _, cei_id = heapq.heappop(sweep)
            rule_id = self._open_index.get(cei_id)
            if rule_id is None or rule_id not in self._trigger_state:
                continue  # decided, missed or removed meanwhile
            # The engine missed these long ago (nobody called on_trigger_missed): seal to free them.
            self._trigger_state[rule_id].open.pop(cei_id, None)
            del self._open_index[cei_id]
            self._dirty.add(rule_id)
            ops.append(SealCei(cei_id))
        due: set[str] = set(self._unanchored)
        self._unanchored.clear()
        heap = self._fire_heap
        while heap and heap[0][0] <= t:
            fire_at, rule_id = heapq.heappop(heap)
            state = self._trigger_state.get(rule_id)
            if state is not None and state.next_fire == fire_at:
                due.add(rule_id)
        for rule_id in sorted(due, key=self._order.__getitem__):
            rule = self._rules[rule_id]
            assert isinstance(rule, _TriggerRule)
            state = self._trigger_state[rule_id]
            fire = self._due_every(rule, state, t) if rule.mode == "every" else self._due_cron(rule, state, t)
            last = rule.period.last
            if state.next_fire is not None and (last is None or state.next_fire <= last):
                heapq.heappush(heap, (state.next_fire, rule_id))  # else: the period is over
            if fire is not None and fire + rule.slack >= t and rule.period.active(fire):
                ops.append(self._open_trigger(rule, state, t, fire + rule.slack))
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
        prepared = [_Prepared(e) for e in new_entries]
        if new_entries and previous_success is not None and previous_success < started_chronon:
            a, b = previous_success, started_chronon
            times: list[int] | None = None
            for rule_id in self._by_resource.get(resource, ()):
                rule = self._rules[rule_id]
                if _conditional_watch(rule):
                    # Only the matching entries are updates for it (issue 43), dated by their own dates.
                    hits = self._matching(rule, resource, prepared)
                    if hits:
                        found = update_chronons((e.entry.published for e in hits), a, b, self.clock)
                        ops.extend(_telling(self._rule_changes(rule_id, resource, found),
                                            self._told(rule, resource, hits)))
                    continue
                pinged = self._pinged.get(rule_id, {}).get(resource)
                if pinged is None or not a < pinged <= b:  # a ping already told this rule
                    if times is None:
                        times = update_chronons((e.published for e in new_entries), a, b, self.clock)
                    ops.extend(self._rule_changes(rule_id, resource, times))
        elif new_entries and previous_success is None:
            ops.extend(self._first_probe_updates(resource, started_chronon, prepared))
        for rule_id in self._by_resource.get(resource, ()):
            rule = self._rules[rule_id]
            if not isinstance(rule, _TriggerRule):
                continue
            state = self._trigger_state[rule_id]
            baseline: list[_Prepared] | None = None
            if not state.baselined:
                # Issue 23: this probe sets the rule's baseline; the backlog does not fire it.
                seen = new_entries if document is None else document
                baseline = [_Prepared(e) for e in self._after_baseline(rule, state, seen)]
                state.baselined = True
                self._dirty.add(rule_id)
            # An alert's CEI is decided by the probe that finds its update, even late (its
            # engine outcome, captured or missed, is the window's): the user is told what
            # matched either way. A query rule's trigger EI is decided only inside its window.
            alert = not rule.queries
            due = [c for c, (s, f) in state.open.items()
                   if s <= started_chronon and (alert or started_chronon <= f)]
            counting = rule.condition is not None and rule.condition.every_nth is not None
            if not due and not counting:
                # Nothing to decide. A temporal rule's next check still sees what this probe
                # found new (another rule's probe, or a poll, took it first): remember whether
                # it met the condition, not the entries.
                if (rule.mode != "notify" and (baseline or new_entries)
                        and started_chronon not in state.carry
                        and self._condition_holds(rule, state, baseline if baseline is not None else prepared)):
                    _carry(state, started_chronon)
                    self._dirty.add(rule_id)
                continue
            entries = baseline if baseline is not None else prepared
            # Probes that started by now and found a match since the last check fire the rule
            # (counting rules carry nothing: they count every probe).
            carried = bisect.bisect_right(state.carry, started_chronon)
            if carried:
                del state.carry[:carried]
                self._dirty.add(rule_id)
            fired = carried > 0 or self._condition_holds(rule, state, entries)
            # What matched is told (issue 43): this probe's matching entries. A temporal rule
            # fired only by what earlier probes found (the carry keeps no entries) tells none.
            told = self._told(rule, rule.resource, entries) if fired and due else ()
            for cei_id in due:
                del state.open[cei_id]
                self._open_index.pop(cei_id, None)
                self._dirty.add(rule_id)
                if fired:
                    ops.extend(self._query_eis(rule, cei_id, started_chronon, told))
                else:
                    ops.append(SealCei(cei_id))
        return ops

    def _first_probe_updates(self, resource: int, started: int, new_entries: list[_Prepared]) -> list[Op]:
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
        for rule_id in self._by_resource.get(resource, ()):
            state = self._trigger_state.get(rule_id) or self._watch_state.get(rule_id)
            if state is None or state.since is None:
                continue
            rule = self._rules[rule_id]
            if _conditional_watch(rule):
                # The matching entries that are changes since the install (not its backlog).
                since = state.since
                hits = [e for e in self._matching(rule, resource, new_entries)
                        if changes_since((e.entry.published,), since, started, self.clock)]
                times = changes_since([e.entry.published for e in hits], since, started, self.clock)
                if times:
                    ops.extend(_telling(self._rule_changes(rule_id, resource, times),
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
        for rule_id in self._by_resource.get(resource, ()):
            rule = self._rules[rule_id]
            if _conditional_watch(rule):
                continue
            if profiles is None or rule.profile_id in profiles:
                if _waits_for_updates(rule):  # a temporal rule reads no update: nothing to confirm
                    self._pinged.setdefault(rule_id, {})[resource] = t
                    self._dirty.add(rule_id)  # stored: the probe that confirms it after a restart adds nothing
                ops.extend(self._rule_update(rule_id, resource, t))
        return ops

    def _rule_update(self, rule_id: str, resource: int, t: int) -> list[Op]:
        """``resource`` changed at chronon ``t`` (pinged, or found by a probe): what ``rule_id`` does."""
        rule = self._rules[rule_id]
        if isinstance(rule, _TriggerRule):
            state = self._trigger_state[rule_id]
            if rule.mode == "notify" and rule.period.active(t) and state.last_open != t:
                return [self._open_trigger(rule, state, t, t + rule.slack)]
            return []
        return self._watch(rule, self._watch_state[rule_id], resource, t)

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
        rule_id = self._open_index.pop(cei_id, None)
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
        if isinstance(rule, _TriggerRule):
            ts = self._trigger_state[rule_id]
            return {
                "version": STATE_VERSION,
                "kind": "trigger",
                "seq": ts.seq,
                "next_fire": ts.next_fire,
                "last_open": ts.last_open,
                "nth_count": ts.nth_count,
                "open": [[cei, s, f] for cei, (s, f) in ts.open.items()],
                "since": ts.since,
                "baselined": ts.baselined,
                "carry": list(ts.carry),
                "pinged": self._pinged_list(rule_id),
            }
        ws = self._watch_state[rule_id]
        return {
            "version": STATE_VERSION,
            "kind": "watch",
            "seq": ws.seq,
            "cei_id": ws.cei_id,
            "alive": ws.alive,
            "covered": [[r, s] for r, s in ws.covered.items()],
            "prev_last_start": ws.prev_last_start,
            "since": ws.since,
            "pinged": self._pinged_list(rule_id),
        }

    def _pinged_list(self, rule_id: str) -> list[list[int]]:
        """The rule's last ping per feed, ``[[feed, chronon], ...]`` by feed."""
        return [[r, t] for r, t in sorted(self._pinged.get(rule_id, {}).items())]

    def restore_state(self, rule_id: str, data: Mapping[str, Any]) -> None:
        """Restore what :meth:`snapshot_state` returned, after :meth:`add_profile` installed the rule."""
        rule = self._rules.get(rule_id)
        if rule is None:
            raise RuleStateError(f"rule {rule_id!r} is not installed")
        kind = "trigger" if isinstance(rule, _TriggerRule) else "watch"
        if data.get("version") != STATE_VERSION or data.get("kind") != kind:
            raise RuleStateError(
                f"rule {rule_id!r}: state has version {data.get('version')!r} kind {data.get('kind')!r}, "
                f"expected version {STATE_VERSION} kind {kind!r}"
            )
        try:
            # States saved before pings were stored have none: a ping just before the restart
            # may then be counted again by the probe that confirms it.
            pinged = {int(r): int(t) for r, t in data.get("pinged", [])}
            if isinstance(rule, _TriggerRule):
                ts = _TriggerState(
                    seq=int(data["seq"]),
                    next_fire=_opt_int(data["next_fire"]),
                    last_open=_opt_int(data["last_open"]),
                    nth_count=int(data["nth_count"]),
                    open={str(c): (int(s), int(f)) for c, s, f in data["open"]},
                    # States saved before issue 23 have neither: no bound, baseline taken.
                    since=_opt_int(data.get("since")),
                    baselined=bool(data.get("baselined", True)),
                    # States saved before the carry was persisted have none.
                    carry=_carry_list(data.get("carry", [])),
                )
                for cei_id in self._trigger_state[rule_id].open:
                    self._open_index.pop(cei_id, None)
                self._trigger_state[rule_id] = ts
                for cei_id, (_, finish) in ts.open.items():
                    self._open_index[cei_id] = rule_id
                    heapq.heappush(self._sweep_heap, (finish + self.probe_grace, cei_id))
                if rule.mode != "notify":
                    if ts.next_fire is None:
                        self._unanchored[rule_id] = None
                    else:
                        self._unanchored.pop(rule_id, None)
                        heapq.heappush(self._fire_heap, (ts.next_fire, rule_id))
            else:
                oldw = self._watch_state[rule_id]
                if oldw.cei_id is not None:
                    self._open_index.pop(oldw.cei_id, None)
                ws = _WatchState(
                    seq=int(data["seq"]),
                    cei_id=None if data["cei_id"] is None else str(data["cei_id"]),
                    alive=bool(data["alive"]),
                    covered={int(r): int(s) for r, s in data["covered"]},
                    prev_last_start=int(data["prev_last_start"]),
                    since=_opt_int(data.get("since")),
                )
                self._wait([r for r in oldw.covered if r not in ws.covered], +1)
                self._wait([r for r in ws.covered if r not in oldw.covered], -1)
                self._watch_state[rule_id] = ws
                self._reweigh(rule_id, rule)
                if ws.cei_id is not None and ws.alive:
                    self._open_index[ws.cei_id] = rule_id
        except (KeyError, TypeError, ValueError) as exc:
            raise RuleStateError(f"rule {rule_id!r}: malformed state ({exc!r})") from None
        if pinged:
            self._pinged[rule_id] = pinged
        else:
            self._pinged.pop(rule_id, None)

    def reserve_ids(self, rule_id: str, next_seq: int) -> None:
        """Number ``rule_id``'s next CEI ``next_seq`` or later: after a restart the store's
        high-water mark wins over a rule state saved before the last CEIs it opened, so an
        id is never handed out twice. Never lowers the sequence; marks the rule dirty."""
        state: _TriggerState | _WatchState | None = (
            self._trigger_state.get(rule_id) or self._watch_state.get(rule_id))
        if state is None:
            self._retired_seq[rule_id] = max(self._retired_seq.get(rule_id, 0), next_seq)
        elif state.seq < next_seq:
            state.seq = next_seq
            self._dirty.add(rule_id)

    def open_cei_ids(self) -> list[str]:
        """CEIs this evaluator may still grow or seal, sorted (the same before and after a restore)."""
        return sorted(self._open_index)

    def holds_open(self, cei_id: str) -> bool:
        """Whether this evaluator may still grow or seal ``cei_id`` (one of :meth:`open_cei_ids`)."""
        return cei_id in self._open_index

    # ------------------------------------------------------------------ internals

    def _before_rule(self, rule_id: str, t: int) -> bool:
        """Whether chronon ``t`` is before ``rule_id`` was installed (when that is known)."""
        state = self._trigger_state.get(rule_id) or self._watch_state.get(rule_id)
        since = None if state is None else state.since
        return since is not None and t < since

    def _after_baseline(
        self, rule: _TriggerRule, state: _TriggerState, entries: Sequence[EntryLike]
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

    def _next_id(self, rule_id: str, seq: int) -> str:
        return f"{rule_id}:{seq}"

    def _open_trigger(self, rule: _TriggerRule, state: _TriggerState, t: int, finish: int) -> OpenCei:
        cei_id = self._next_id(rule.rule_id, state.seq)
        state.seq += 1
        state.last_open = t
        state.open[cei_id] = (t, finish)
        self._open_index[cei_id] = rule.rule_id
        heapq.heappush(self._sweep_heap, (finish + self.probe_grace, cei_id))
        self._dirty.add(rule.rule_id)
        # Unsealed: the trigger's outcome decides whether the query EIs join (main paper §2.1).
        return OpenCei(cei_id, rule.profile_id, rule.rule_id, ((rule.resource, t, finish),), sealed=False)

    def _due_every(self, rule: _TriggerRule, state: _TriggerState, t: int) -> int | None:
        if state.next_fire is None:
            # Anchor the schedule at the period's start, else at the first tick seen.
            anchor = rule.period.first if rule.period.first is not None else t
            state.next_fire = anchor
            self._dirty.add(rule.rule_id)
        if t < state.next_fire:
            return None
        fire = state.next_fire + (t - state.next_fire) // rule.every * rule.every
        state.next_fire = fire + rule.every
        self._dirty.add(rule.rule_id)
        return fire

    def _due_cron(self, rule: _TriggerRule, state: _TriggerState, t: int) -> int | None:
        if state.next_fire is None:
            state.next_fire = self._cron_next(rule, t)
            self._dirty.add(rule.rule_id)
        if state.next_fire is None or t < state.next_fire:
            return None
        fire = state.next_fire
        if fire < t:
            # Ticks were missed: coalesce into the latest fire whose window still reaches t
            # (at most slack + 1 chronons to look at).
            c = self._cron_next(rule, max(fire, t - rule.slack))
            while c is not None and c <= t:
                fire = c
                c = self._cron_next(rule, c + 1)
        # Every fire time inside chronons <= t is coalesced into this one.
        state.next_fire = self._cron_next(rule, t + 1)
        self._dirty.add(rule.rule_id)
        return fire

    def _cron_next(self, rule: _TriggerRule, chronon: int) -> int | None:
        """The chronon of the first cron fire time at or after the beginning of ``chronon``."""
        assert rule.cron is not None
        moment = rule.cron.get_next_fire_time(None, self.clock.start_of(chronon))
        return None if moment is None else max(chronon, self.clock.chronon_at(moment))

    def _condition_holds(self, rule: _TriggerRule, state: _TriggerState, entries: list[_Prepared]) -> bool:
        cond = rule.condition
        if cond is None:
            return bool(entries)
        index = self._index.get(rule.resource) if _selective(cond) else None
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
        self, rule: _TriggerRule, cei_id: str, t: int, told: tuple[MatchedEntry, ...] = ()
    ) -> list[Op]:
        if not rule.queries:  # a single-feed alert: the trigger's EI alone, fired
            return [SealCei(cei_id, fired=True, matched=told)]
        ops: list[Op] = []
        last = len(rule.queries) - 1
        for i, q in enumerate(rule.queries):
            finish = t + q.within if q.within is not None else self._overwrite_finish(q.resource, t)
            # The trigger's matching entries ride on the first query EI: told once per CEI.
            ops.append(RevealEi(cei_id, q.resource, t, finish, seal=i == last,
                                matched=told if i == 0 else ()))
        return ops

    def _matching(self, rule: _Rule, resource: int, entries: list[_Prepared]) -> list[_Prepared]:
        """The entries of ``resource`` that meet ``rule``'s condition (every entry without one)."""
        cond = rule.condition
        index = self._index.get(resource) if cond is not None and _selective(cond) else None
        if index is None:
            return entries
        return [e for e in entries if rule.rule_id in e.matches(index)]

    def _told(self, rule: _Rule, resource: int, entries: list[_Prepared]) -> tuple[MatchedEntry, ...]:
        """The first :data:`MAX_MATCHED` entries meeting ``rule``'s condition, with what matched
        (``kind="any"`` for every entry of a rule without keywords nor regex)."""
        cond = rule.condition
        index = self._index.get(resource) if cond is not None and _selective(cond) else None
        out: list[MatchedEntry] = []
        for e in entries:
            m = _ANY if index is None else e.matches(index).get(rule.rule_id)
            if m is None:
                continue
            entry = e.entry
            # getattr, as matching.entry_text: an entry may lack a field (tests', the simulator's).
            out.append(MatchedEntry(resource, getattr(entry, "title", None), getattr(entry, "link", None),
                                    entry.published, m.kind, m.field, m.text))
            if len(out) == MAX_MATCHED:
                break
        return tuple(out)

    def _overwrite_finish(self, resource: int, t: int) -> int:
        """The last chronon of an ``overwrite`` EI starting at ``t``: before the feed's expected next update."""
        at = self.clock.start_of(t).timestamp() - self.models.settings.origin
        expected = self.models.next_expected_update(resource, at)
        if not math.isfinite(expected):
            return t + MAX_OVERWRITE - 1
        chronons = math.ceil((expected - at) / self.clock.length - 1e-9)
        return t + min(max(chronons, 1), MAX_OVERWRITE) - 1

    def _watch(self, rule: _WatchRule, state: _WatchState, resource: int, t: int) -> list[Op]:
        # AuctionWatch (main paper §4): CEI j+1 takes, for each feed, its first update
        # strictly after the last EI start of CEI j; later updates of a covered feed wait.
        if not rule.period.active(t) or t <= state.prev_last_start or resource in state.covered:
            return []
        ei = (resource, t, t + rule.within)
        complete = len(state.covered) + 1 == len(rule.resources)
        ops: list[Op] = []
        self._dirty.add(rule.rule_id)
        if state.cei_id is None:
            state.cei_id = self._next_id(rule.rule_id, state.seq)
            state.seq += 1
            state.alive = True
            ops.append(OpenCei(state.cei_id, rule.profile_id, rule.rule_id, (ei,), sealed=complete, fired=True))
            if not complete:
                self._open_index[state.cei_id] = rule.rule_id
        elif state.alive:
            ops.append(RevealEi(state.cei_id, *ei, seal=complete))
        state.covered[resource] = t
        self._wait((resource,), -1)  # its later updates wait for the next CEI
        if complete:
            state.prev_last_start = max(state.covered.values())
            self._open_index.pop(state.cei_id, None)
            state.cei_id = None
            state.covered = {}
            self._wait(rule.resources, +1)
        self._reweigh(rule.rule_id, rule)
        return ops


def _telling(ops: list[Op], matched: tuple[MatchedEntry, ...]) -> list[Op]:
    """``ops`` with ``matched`` told by the first one that opens or grows a CEI (a watch rule's
    update: the entries that made it count)."""
    for i, op in enumerate(ops):
        if isinstance(op, OpenCei | RevealEi):
            ops[i] = dataclasses.replace(op, matched=matched)
            break
    return ops


def _count(counts: dict[int, int], keys: Iterable[int], delta: int) -> None:
    """Add ``delta`` to each key's count in ``counts``; a count that reaches 0 leaves the dict."""
    for k in keys:
        n = counts.get(k, 0) + delta
        if n > 0:
            counts[k] = n
        else:
            counts.pop(k, None)


def _waits_for_updates(rule: _Rule) -> bool:
    """Whether ``rule`` learns of its feeds' updates only from pings or probes."""
    return isinstance(rule, _WatchRule) or rule.mode == "notify"


def _update_window(rule: _Rule) -> int:
    """How soon after an update a probe must see it for ``rule`` (a waiting rule)."""
    return rule.within if isinstance(rule, _WatchRule) else rule.slack


def _carry_list(value: Any) -> list[int]:
    """A stored carry: ascending distinct chronons, at most ``CARRY_MAX`` (``ValueError`` otherwise)."""
    if not isinstance(value, list):
        raise ValueError(f"carry must be a list, not {type(value).__name__}")
    carry = [int(t) for t in value]
    if carry != sorted(set(carry)) or len(carry) > CARRY_MAX:
        raise ValueError(f"carry must hold at most {CARRY_MAX} ascending distinct chronons: {value!r}")
    return carry


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


# --------------------------------------------------------------------------- reading a saved state


@dataclass(frozen=True, slots=True)
class RuleProgress:
    """Where one rule stands, read from its saved state (:func:`rule_progress`): what a user
    asks when a rule has not fired ("what is it waiting for?"). Chronons and feed resources,
    as the evaluator counts them; the service names them in wall time and feed ids.

    Trigger rules: ``next_fire`` the chronon of a temporal rule's next check (``None``: not
    anchored yet, it starts at the next tick; always ``None`` for ``on:`` rules), ``open``
    the CEIs fired and not yet decided (id, trigger window), ``baselined`` False until the
    first successful probe of the feed after the rule was made, ``last_open`` the chronon the
    last CEI opened. Watch rules: ``building`` the CEI being assembled (``None`` between
    two), ``alive`` False once the engine missed it (reported missed, still built silently),
    ``covered`` each feed's update in it, ``after`` the chronon only later updates count after
    (the previous CEI's last update; -1 before the first).
    """

    kind: Literal["trigger", "watch"]
    next_fire: int | None = None
    open: tuple[tuple[str, int, int], ...] = ()
    baselined: bool = True
    last_open: int | None = None
    building: str | None = None
    alive: bool = True
    covered: Mapping[int, int] = field(default_factory=dict)
    after: int = -1


def rule_progress(data: Mapping[str, Any]) -> RuleProgress:
    """Read a :meth:`TriggerEvaluator.snapshot_state` (live, or as stored with the rule);
    :class:`RuleStateError` if it is not one this build writes."""
    kind = data.get("kind")
    if data.get("version") != STATE_VERSION or kind not in ("trigger", "watch"):
        raise RuleStateError(
            f"state has version {data.get('version')!r} kind {kind!r}, expected version {STATE_VERSION}")
    try:
        if kind == "trigger":
            return RuleProgress(
                "trigger", next_fire=_opt_int(data["next_fire"]),
                open=tuple(sorted((str(c), int(s), int(f)) for c, s, f in data["open"])),
                baselined=bool(data.get("baselined", True)), last_open=_opt_int(data["last_open"]),
            )
        return RuleProgress(
            "watch",
            building=None if data["cei_id"] is None else str(data["cei_id"]), alive=bool(data["alive"]),
            covered={int(r): int(s) for r, s in data["covered"]}, after=int(data["prev_last_start"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RuleStateError(f"malformed state ({exc!r})") from None
