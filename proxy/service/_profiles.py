"""Users' profiles: checked, stored, installed in the evaluator, announced; and where each rule stands.

A change is checked completely before anything is stored (a 422 loses nothing),
stored (the database is the truth), installed on the loop's thread, then announced
(:class:`~proxy.service._profile_changes.ProfileChanges`) so the API's cached pages
read their own writes at once. Where it is stored depends on what could deadlock with
the writer's rounds (docs/design-notes.md): creates on PostgreSQL by the API's store
without a lock; creates on SQLite, replaces and deletes on the loop's thread under the
writer's lock (SQLite creates queued together are stored together). On an API replica
a change is stored, announced, then forwarded to the leader.

A new operation on profiles goes here; a new kind of rule goes to :mod:`proxy.rules`.

What it does not do: evaluate rules (the evaluator on the loop's thread does), or list
profiles (the API reads the store).
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from proxy.errors import StorageError
from proxy.feeds import SystemResolver
from proxy.notify.targets import check_targets
from proxy.rules import FeedModelEstimate, ProfileSpec, TriggerEvaluator
from proxy.rules.ports import ChrononMapping
from proxy.rules.schemas import NotifySpec
from proxy.service._feeds import FeedTable
from proxy.service._profile_changes import ProfileChanged, ProfileChanges
from proxy.service._replication import forward
from proxy.service._shared import Shared, fetcher_settings, live_estimate
from proxy.service._update_models import UpdateModels
from proxy.service.changes import Change
from proxy.service.rule_status import ProfileStatus, profile_status
from proxy.service.runtime import check_feeds, rule_feed_ids, rule_key
from proxy.store import NewProfile, Profile, RuleInput, TargetInput

log = structlog.get_logger("proxy.service")

#: Rule status reads at most this many of a profile's pending CEIs (the newest).
STATUS_PENDING_CEIS = 1000


class Profiles:
    """Create, replace and delete profiles; read their rules' status (module docstring)."""

    def __init__(self, shared: Shared, models: UpdateModels, changes: ProfileChanges) -> None:
        self._s = shared
        self._models = models
        #: Every change of a user's profiles by this process, announced once stored.
        self.changes = changes
        #: SQLite creates waiting for the writer's lock (:meth:`_create_in_turn`); loop's thread.
        self.queued_creates: list[tuple[NewProfile, asyncio.Future[Profile]]] = []

    async def create(self, user_id: int, spec: ProfileSpec) -> Profile:
        """Validate feed ids (422 naming ``rules.N.….feed``), store, then install in the evaluator."""
        s, changes = self._s, self.changes
        if s.replica:
            await self._check(user_id, spec)
            async with changes.changing(user_id):
                profile = await s.store.create_profile(
                    user_id, spec.name, _rule_inputs(spec), *_profile_notify(spec))
                changes.announce(ProfileChanged(user_id, "created", profile.id, profile))
            await forward(s.store, Change("profile", profile.id, user_id))
            return profile
        s.require_leader()
        await self._check(user_id, spec)
        async with changes.changing(user_id):
            if s.store.engine.dialect.name == "sqlite":
                new = NewProfile(user_id, spec.name, tuple(_rule_inputs(spec)),
                                 *_profile_notify(spec))
                profile = await s.host.run(self._create_in_turn(new))
            else:
                # PostgreSQL: stored first, by the API's own store and with no lock: new rows
                # that no write round touches (its rules have no CEI yet), so creates do not
                # queue behind the loop's writer nor each other (issue 24.4). Then the loop's
                # thread installs it.
                profile = await s.store.create_profile(
                    user_id, spec.name, _rule_inputs(spec), *_profile_notify(spec))
                try:
                    await s.host.call(s.install_newer, profile)
                except Exception:
                    await s.store.delete_profile(user_id, profile.id)
                    raise
            changes.announce(ProfileChanged(user_id, "created", profile.id, profile))
        log.info("profile_created", profile=profile.id, user=user_id, rules=len(profile.rules))
        return profile

    async def replace(self, user_id: int, profile_id: int, spec: ProfileSpec) -> Profile:
        """Replace a profile's name and rules; its open CEIs are sealed at their current rank."""
        s, changes = self._s, self.changes
        if s.replica:
            await s.store.get_profile(user_id, profile_id)
            await self._check(user_id, spec)
            async with changes.changing(user_id):
                profile = await s.store.replace_profile(
                    user_id, profile_id, spec.name, _rule_inputs(spec), *_profile_notify(spec))
                changes.announce(ProfileChanged(user_id, "replaced", profile.id, profile))
            await forward(s.store, Change("profile", profile.id, user_id))
            return profile
        s.require_leader()
        # Another user's profile is 404 before anything about its body (feeds) is said.
        await s.store.get_profile(user_id, profile_id)
        await self._check(user_id, spec)

        async def replace() -> Profile:
            # On the loop's thread, under the writer's lock: the old rules' rows are the ones a
            # round writes states and CEIs for (PostgreSQL would deadlock the two); one replace
            # at a time, so the evaluator ends with the rules the database ends with.
            async with s.lock:
                profile = await s.loop_store.replace_profile(
                    user_id, profile_id, spec.name, _rule_inputs(spec), *_profile_notify(spec))
                s.install(profile)
            return profile

        async with changes.changing(user_id):
            profile = await s.host.run(replace())
            changes.announce(ProfileChanged(user_id, "replaced", profile.id, profile))
        log.info("profile_replaced", profile=profile.id, user=user_id, rules=len(profile.rules))
        return profile

    async def _create_in_turn(self, new: NewProfile) -> Profile:
        """Store and install a profile on the loop's thread, under the writer's lock (SQLite).

        SQLite takes one writer at a time: the others poll for its lock, sleeping longer
        each time they find it taken. Creates on the API's store polled against the loop's
        write rounds and against each other, and each of their statements waited its turn
        on the API's busy event loop while holding the lock (mixed phase: a create's p99
        555 ms, a write round's 542 ms). Here creates and rounds take turns in order, and
        the first create to get the lock stores every create queued by then in one
        transaction of three statements (:meth:`Store.create_profiles`)."""
        mine: asyncio.Future[Profile] = asyncio.get_running_loop().create_future()
        self.queued_creates.append((new, mine))
        try:
            async with self._s.lock:
                if not mine.done():
                    batch, self.queued_creates = self.queued_creates, []
                    await self._create_batch(batch)
        except asyncio.CancelledError:
            self.queued_creates = [(n, f) for n, f in self.queued_creates if f is not mine]
            raise
        return mine.result()

    async def _create_batch(self, batch: list[tuple[NewProfile, asyncio.Future[Profile]]]) -> None:
        """Store the profiles in one transaction, install them, and answer each create; if
        one is refused, each on its own (to tell which). Every create is answered."""
        s = self._s
        try:
            try:
                profiles = await s.loop_store.create_profiles([new for new, _ in batch])
            except Exception as error:
                if len(batch) == 1:
                    batch[0][1].set_exception(error)
                else:
                    for item in batch:
                        await self._create_batch([item])
                return
            for (new, done), profile in zip(batch, profiles, strict=True):
                try:
                    s.install(profile)
                except Exception as error:  # stored, not installed: not created after all
                    done.set_exception(error)
                    try:
                        await s.loop_store.delete_profile(new.user_id, profile.id)
                    except Exception:
                        log.exception("profile_not_removed", profile=profile.id, user=new.user_id)
                else:
                    done.set_result(profile)
        finally:
            for _, done in batch:
                if not done.done():
                    done.set_exception(StorageError("the create was interrupted", unavailable=True))

    async def _check(self, user_id: int, spec: ProfileSpec) -> None:
        """Everything that can refuse a profile, before anything is stored (a 422 loses nothing):
        feed ids (only feeds the user registered: another user's feed is as unknown as a
        missing one), then compiling it in a scratch evaluator (regexes, cron, durations)."""
        s = self._s
        if s.replica:  # no engine here: the feeds as stored, the clock as read at start
            feeds = FeedTable()
            for feed in await s.store.list_feeds():
                feeds.put(feed)
            clock: ChrononMapping = s.clock
        else:
            feeds, clock = s.running.feeds, s.running.clock
        check_feeds(spec, feeds, await s.store.registered_feed_ids(user_id))
        TriggerEvaluator(clock).add_profile("check", spec, feeds.resource_of)
        # Notify targets: the feeds' SSRF guard for webhooks (issue 19), Apprise's parser.
        targets = [(f"notify.{i}.{t.kind}", t.kind, t.url) for i, t in enumerate(spec.notify or ())]
        for r, rule in enumerate(spec.rules):
            targets += [(f"rules.{r}.notify.{i}.{t.kind}", t.kind, t.url)
                        for i, t in enumerate(rule.notify or ())]
        if targets:
            policy = fetcher_settings(s.settings).address_policy
            await check_targets(targets, policy, SystemResolver())

    async def delete(self, user_id: int, profile_id: int) -> None:
        s, changes = self._s, self.changes
        if s.replica:
            async with changes.changing(user_id):
                await s.store.delete_profile(user_id, profile_id)
                changes.announce(ProfileChanged(user_id, "deleted", profile_id))
            await forward(s.store, Change("profile_deleted", profile_id, user_id))
            return
        s.require_leader()

        async def delete() -> None:  # on the loop's thread, under the writer's lock (replace)
            async with s.lock:
                await s.loop_store.delete_profile(user_id, profile_id)
                s.uninstall(profile_id)

        async with changes.changing(user_id):
            await s.host.run(delete())
            changes.announce(ProfileChanged(user_id, "deleted", profile_id))
        log.info("profile_deleted", profile=profile_id, user=user_id)

    async def status_of(self, profile: Profile) -> ProfileStatus:
        """Where each rule of a profile already read (its owner's, so checked) stands and what
        it waits for (docs/api.md, "Rule status"). The loop's holder reads the rules' states and
        the feeds' models on the loop's thread; a process without the loop reads the states as
        last stored (the writer stores each change within a round) and the models the leader
        saved last."""
        s = self._s
        user_id, profile_id = profile.user_id, profile.id
        feeds = {r.feed.id: r for r in await s.store.registered_feeds(
            user_id, {f for rule in profile.rules for f in rule.feed_ids})}
        pending = await s.store.list_ceis(user_id, profile_id, "pending", limit=STATUS_PENDING_CEIS)
        now = s.clock.now()
        after = now.timestamp()
        rt = s.runtime
        if rt is None:
            saved = await self._models.saved()
            models: dict[int, FeedModelEstimate | None] = {
                fid: saved.estimate(reg.feed.resource, after=after) for fid, reg in feeds.items()}
            return profile_status(profile, {r.id: r.state for r in profile.rules}, feeds, models,
                                  s.clock, now, "saved", pending)

        def read() -> tuple[dict[int, Any], dict[int, FeedModelEstimate | None]]:
            states: dict[int, Any] = {}
            for rule in profile.rules:
                try:
                    states[rule.id] = rt.evaluator.snapshot_state(rule_key(rule.id))
                except KeyError:  # not installed (yet, or its profile did not restore)
                    states[rule.id] = None
            return states, {fid: live_estimate(rt, fid, after) for fid in feeds}

        states, models = await s.host.call(read)
        return profile_status(profile, states, feeds, models, s.clock, now, "live", pending)


def _targets(notify: list[NotifySpec] | None) -> tuple[TargetInput, ...] | None:
    if notify is None:
        return None
    return tuple(TargetInput(t.kind, t.url, tuple(t.events)) for t in notify)


def _profile_notify(spec: ProfileSpec) -> tuple[tuple[TargetInput, ...] | None, Any]:
    """The profile's default targets, and as submitted (JSON) for reading it back."""
    as_json = None if spec.notify is None else [
        t.model_dump(mode="json", exclude_none=True) for t in spec.notify]
    return _targets(spec.notify), as_json


def _rule_inputs(spec: ProfileSpec) -> list[RuleInput]:
    return [
        RuleInput(rule.name, rule.model_dump(mode="json", exclude_none=True), rule_feed_ids(spec, i),
                  _targets(rule.notify))
        for i, rule in enumerate(spec.rules)
    ]
