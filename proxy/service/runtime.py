"""The service's decision state: one engine, one trigger evaluator, the feeds, and the ids between them.

Everything here is synchronous and runs on the event loop only (the engine and
the evaluator are not thread-safe). Each mutation returns the
:mod:`~proxy.service._persist` steps that record it; callers hand them to the
writer in the same order. Ids: a feed's engine resource is its store
``resource``; a profile is ``str(profile.id)`` in the engine; a rule is
``"r{rule.id}"`` in the evaluator, so CEI ids are ``"r{rule.id}:{seq}"`` and
unique across the database (store rule ids are never reused).

What it does not do: I/O of any kind (the loop fetches, the writer stores).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections import deque
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from proxy.core.engine import CeiCaptured, EiCaptured, Engine
from proxy.errors import ValidationError
from proxy.rules import (
    FeedUpdateModels,
    OpenCei,
    ProfileSpec,
    RevealEi,
    TriggerEvaluator,
    UnknownFeedError,
)
from proxy.rules.ports import ChrononMapping, MatchedEntry, Op
from proxy.service._feeds import FeedTable
from proxy.service._persist import AddCei, AddEi, Captured, Resolved, RuleStates, Seal, Step
from proxy.store import Cei, MatchedRecord, NewEi, Profile

log = structlog.get_logger("proxy.service")

#: Chronons of successful probes the engine keeps for EIs revealed late (at least the longest EI).
ENGINE_HISTORY = 64

#: Chronons a resolved CEI's verdict stays in the engine (``Engine.state``) once the evaluator no
#: longer holds it open, before :meth:`Runtime.forget_resolved` drops it: long enough for a reader
#: that looks right after a resolution or a restore (tests, diagnostics); nothing decides by it.
RESOLVED_KEPT_CHRONONS = ENGINE_HISTORY


def rule_key(rule_id: int) -> str:
    return f"r{rule_id}"


def rule_db_id(key: str) -> int | None:
    return int(key[1:]) if key.startswith("r") and key[1:].isdigit() else None


def profile_spec(profile: Profile) -> ProfileSpec:
    """The stored profile as the rule language's spec (rules in order)."""
    return ProfileSpec.model_validate(
        {"name": profile.name, "rules": [rule.spec for rule in profile.rules]}
    )


def check_feeds(
    spec: ProfileSpec, feeds: FeedTable, allowed: Container[int] | None = None
) -> list[int]:
    """The store ids of the feeds ``spec`` reads; :class:`UnknownFeedError` names the first
    unknown one. With ``allowed`` (the feeds the profile's owner registered), a feed outside
    it is unknown too, with the same message: ids of other users' feeds must not leak."""
    out: dict[int, None] = {}

    def need(feed: str, loc: str) -> None:
        try:
            feeds.resource_of(feed)
            if allowed is not None and int(feed) not in allowed:
                raise KeyError(feed)
        except KeyError:
            raise UnknownFeedError(loc, feed) from None
        out[int(feed)] = None

    for i, rule in enumerate(spec.rules):
        if rule.watch is not None:
            for j, feed in enumerate(rule.watch.feeds):
                need(feed, f"rules.{i}.watch.feeds.{j}")
            continue
        assert rule.trigger is not None
        need(rule.trigger.feed, f"rules.{i}.trigger.feed")
        for j, q in enumerate(rule.query or ()):
            need(q.feed, f"rules.{i}.query.{j}.feed")
    return list(out)


def rule_feed_ids(spec: ProfileSpec, index: int) -> tuple[int, ...]:
    rule = spec.rules[index]
    if rule.watch is not None:
        return tuple(int(f) for f in rule.watch.feeds)
    assert rule.trigger is not None
    return tuple(dict.fromkeys([int(rule.trigger.feed), *(int(q.feed) for q in rule.query or ())]))


@dataclass
class Tally:
    """CEIs resolved, and evaluator ops the engine refused, since the last chronon row."""

    captured: int = 0
    missed: int = 0
    refused_ops: int = 0  # never expected (Runtime.apply): exported as proxy_ops_refused_total


@dataclass
class Runtime:
    """Engine + evaluator + feeds; every method returns the steps that persist what it did."""

    clock: ChrononMapping
    engine: Engine = field(default_factory=lambda: Engine(0, history=ENGINE_HISTORY))
    feeds: FeedTable = field(default_factory=FeedTable)
    tally: Tally = field(default_factory=Tally)
    evaluator: TriggerEvaluator = field(init=False)
    #: The profiles in the evaluator, by id: their stored ``updated_at`` (what a resync compares).
    versions: dict[int, dt.datetime] = field(default_factory=dict)
    # When each feed changes, learnt from its documents, probes and pings (keyed by resource;
    # times in POSIX seconds): what background probes spend the spare budget by, and how long
    # an overwrite query EI lives.
    models: FeedUpdateModels = field(default_factory=FeedUpdateModels)
    #: CEIs the engine resolved and still remembers, oldest first: (chronon, CEI id).
    resolved: deque[tuple[int, str]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.evaluator = TriggerEvaluator(self.clock, update_models=self.models)  # overwrite lives read the models

    # ------------------------------------------------------------------ profiles

    def install(self, profile: Profile, *, restore_states: bool) -> list[Step]:
        """Install a stored profile in the evaluator (restoring rule states after a restart)."""
        spec = profile_spec(profile)
        keys = [rule_key(rule.id) for rule in profile.rules]
        pid = str(profile.id)
        if profile.id in self.versions:
            _, ops = self.evaluator.replace_profile(
                pid, spec, self.feeds.resource_of, rule_ids=keys, since=self.engine.now)
            steps = self.apply(ops)
        else:
            # New rules take a baseline from now (issue 23); a restart restores theirs below.
            self.evaluator.add_profile(pid, spec, self.feeds.resource_of, rule_ids=keys, since=self.engine.now)
            steps = []
        self.versions[profile.id] = profile.updated_at
        if restore_states:
            for rule in profile.rules:
                if rule.state is not None:
                    self.evaluator.restore_state(rule_key(rule.id), rule.state)
        return steps + self.rule_states()

    def uninstall(self, profile_id: int) -> list[Step]:
        """Remove a profile's rules; its open CEIs are sealed so the engine can resolve them."""
        try:
            ops = self.evaluator.remove_profile(str(profile_id))
        except KeyError:
            return []
        self.versions.pop(profile_id, None)
        return self.apply(ops)

    def rule_states(self) -> list[Step]:
        """The runtime state of every rule changed since the last call, to persist."""
        states = []
        for key in self.evaluator.take_dirty():
            db_id = rule_db_id(key)
            if db_id is None:
                continue
            try:
                states.append((db_id, self.evaluator.snapshot_state(key)))
            except KeyError:
                continue  # removed meanwhile
        return [RuleStates(tuple(states))] if states else []

    # ------------------------------------------------------------------ ops and events

    def apply(self, ops: Iterable[Op]) -> list[Step]:
        """Apply evaluator ops to the engine (the rules engineer's ``apply_ops``, plus the steps)."""
        engine, feeds = self.engine, self.feeds
        steps: list[Step] = []
        for op in ops:
            try:
                if isinstance(op, OpenCei):
                    engine.add_cei(op.cei_id, op.profile_id, op.eis, sealed=op.sealed)
                    eis = tuple(
                        NewEi(i, feeds.by_resource[r].id, s, f) for i, (r, s, f) in enumerate(op.eis)
                    )
                    steps.append(AddCei(op.cei_id, int(op.profile_id), rule_db_id(op.rule_id),
                                        engine.now, eis, op.sealed, op.fired, self._records(op.matched)))
                elif isinstance(op, RevealEi):
                    ordinal = engine.reveal_ei(op.cei_id, op.resource, op.start, op.finish, seal=op.seal)
                    ei = NewEi(ordinal, feeds.by_resource[op.resource].id, op.start, op.finish,
                               reveal=engine.now)
                    steps.append(AddEi(op.cei_id, ei, op.seal, self._records(op.matched)))
                else:
                    engine.seal(op.cei_id)
                    steps.append(Seal(op.cei_id, op.fired, self._records(op.matched)))
            except (KeyError, ValueError) as exc:
                # Cannot happen by construction: CEI ids are never reused (high-water mark on
                # restore) and a restore closes in the evaluator every CEI the engine does not
                # hold. Counted (proxy_ops_refused_total) and logged as an error, not hidden.
                self.tally.refused_ops += 1
                log.error("op_refused", op=type(op).__name__, cei=op.cei_id, reason=repr(exc))
        return steps

    def _records(self, matched: Iterable[MatchedEntry]) -> tuple[MatchedRecord, ...]:
        """What matched, as the store keeps it: feeds by their ids, not engine resources."""
        by_resource = self.feeds.by_resource
        return tuple(
            MatchedRecord(by_resource[m.resource].id, m.title, m.link, m.published, m.kind,
                          m.field, m.text)
            for m in matched
        )

    def drain(self) -> tuple[list[Step], list[Step]]:
        """The engine's pending events as steps, and the follow-up steps.

        Follow-ups are the seals of trigger CEIs the engine missed
        (``on_trigger_missed``) and whatever events those cause; they are
        written after the first list (for a probe: after its own record).
        """
        direct: list[Step] = []
        follow: list[Step] = []
        target = direct
        events = self.engine.drain_events()
        while events:
            missed_ops: list[Op] = []
            for ev in events:
                if isinstance(ev, EiCaptured):
                    target.append(Captured(ev.cei_id, ev.ordinal, ev.chronon))
                elif isinstance(ev, CeiCaptured):
                    self.tally.captured += 1
                    self.resolved.append((self.engine.now, ev.cei_id))
                    target.append(Resolved(ev.cei_id, "captured", ev.chronon))
                    log.info("cei_captured", cei=ev.cei_id, chronon=ev.chronon)
                else:
                    self.tally.missed += 1
                    self.resolved.append((self.engine.now, ev.cei_id))
                    target.append(Resolved(ev.cei_id, "missed", ev.chronon))
                    log.info("cei_missed", cei=ev.cei_id, chronon=ev.chronon)
                    missed_ops.extend(self.evaluator.on_trigger_missed(ev.cei_id))
            follow.extend(self.apply(missed_ops))
            events = self.engine.drain_events()
            target = follow
        return direct, follow

    def drain_all(self) -> list[Step]:
        direct, follow = self.drain()
        return [*direct, *follow]

    def forget_resolved(self, t: int) -> int:
        """Make the engine forget the CEIs resolved at least :data:`RESOLVED_KEPT_CHRONONS` before
        ``t`` that the evaluator no longer holds open; returns how many it forgot.

        The engine remembers every resolved CEI's verdict until it is told to forget it
        (:meth:`Engine.forget`): one dict entry per CEI ever resolved, a heap growing with every
        chronon for as long as the service runs (the soak, docs/operations.md). The store keeps
        the verdicts; the engine needs one only while the evaluator may still name the CEI in an
        op (a captured trigger CEI stays open in its rule until its sweep, and its late seal must
        be a no-op, not a refused op). Such a CEI is looked at again ``RESOLVED_KEPT_CHRONONS``
        later. Called once a chronon; amortised O(1) per resolved CEI.
        """
        queue, engine, evaluator = self.resolved, self.engine, self.evaluator
        horizon = t - RESOLVED_KEPT_CHRONONS
        forgotten = 0
        while queue and queue[0][0] <= horizon:
            _, cei_id = queue.popleft()
            if evaluator.holds_open(cei_id):
                queue.append((t, cei_id))  # after `horizon`: not looked at again in this call
                continue
            with contextlib.suppress(KeyError):  # an engine replaced by a restore never knew it
                engine.forget(cei_id)
                forgotten += 1
        return forgotten

    # ------------------------------------------------------------------ restart

    def restore(self, profiles: Sequence[Profile], pending: Sequence[Cei], now: int,
                high_water: Mapping[int, int] | None = None) -> list[Step]:
        """Rebuild after a restart: profiles → evaluator (with rule states), pending CEIs → engine.

        The engine learns the successful probes that captured EIs of pending CEIs
        (replayed at their chronons, before any CEI exists, so they capture
        nothing yet), then every pending CEI is added at ``now`` with all its EIs
        in ordinal order: captured EIs are recaptured from that history, EIs
        whose window passed while the service was down make their CEI missed.
        Other successful probes are not replayed (EIs revealed later with a start
        before the restart cannot count them).
        """
        engine = self.engine
        for profile in profiles:
            try:
                self.install(profile, restore_states=True)
            except (ValidationError, ValueError) as exc:
                log.error("profile_not_restored", profile=profile.id, reason=str(exc))
        # CEI ids continue after the highest the store holds (by store rule id), whatever
        # the saved rule states say: an id handed out twice would lose a firing.
        for rule_id, next_seq in (high_water or {}).items():
            self.evaluator.reserve_ids(rule_key(rule_id), next_seq)
        # What was just restored is what the store holds: nothing to write back.
        self.evaluator.take_dirty()
        history: dict[int, set[int]] = {}
        for cei in pending:
            for ei in cei.eis:
                if ei.captured_chronon is not None and ei.feed_id in self.feeds.by_id:
                    history.setdefault(ei.captured_chronon, set()).add(
                        self.feeds.by_id[ei.feed_id].resource)
        if history:
            # Keep the replayed probes through the jump to `now` (the engine prunes history
            # older than max(history, longest EI seen), and no EI is known yet).
            self.engine = engine = Engine(
                engine.resources, history=max(ENGINE_HISTORY, now - min(history) + 1))
        for t in sorted(history):
            if t <= now:
                engine.advance(t)
                engine.probe(sorted(history[t]))
        engine.advance(max(now, engine.now))
        for cei in pending:
            try:
                eis = [(self.feeds.by_id[ei.feed_id].resource, ei.start, ei.finish) for ei in cei.eis]
                if not eis and cei.sealed:
                    continue
                engine.add_cei(cei.id, str(cei.profile_id), eis, sealed=cei.sealed)
            except (KeyError, ValueError) as exc:
                log.error("cei_not_restored", cei=cei.id, reason=repr(exc))
        # The rule states may still hold CEIs resolved before the crash (a captured trigger CEI
        # stays open in its rule until its sweep): the store has their verdicts and the engine
        # does not know them. The evaluator forgets them here, so no op it emits from now on
        # names a CEI the engine does not hold.
        stale = [cei_id for cei_id in self.evaluator.open_cei_ids() if not _holds(engine, cei_id)]
        if stale:
            self.evaluator.close(stale)
            log.info("restore_closed_resolved", ceis=len(stale))
        # The CEIs missed while the service was down change their rules' states (the evaluator
        # forgets them): those states go in the same batch as the resolutions, so no crash can
        # store one without the other (a stale open CEI would be sealed later in vain).
        return self.drain_all() + self.rule_states()



def _holds(engine: Engine, cei_id: str) -> bool:
    """Whether the engine knows ``cei_id`` (pending, or resolved since it started)."""
    try:
        engine.state(cei_id)
    except KeyError:
        return False
    return True
