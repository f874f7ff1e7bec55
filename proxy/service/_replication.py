"""Scale-out (issue 21, docs/scale.md): changes made by API replicas, sent to and applied by the leader.

An API replica (``campaign=False``, ``proxy serve --role api``) never leads: each room
validates and stores a change, then :func:`forward` sends it on LISTEN/NOTIFY
(:mod:`proxy.service.changes`). On the leader, :class:`Replication` applies each change
as if this process's own API had made it (:meth:`Replication.apply_change`), and makes
what it runs equal to the database whenever notifications may have been missed
(:meth:`Replication.resync`).

A new kind of change a replica can make: a :class:`~proxy.service.changes.Change` kind,
forwarded by the room that makes it, and one branch of :meth:`Replication.apply_change`.

What it does not do: listen (:class:`~proxy.service.changes.ChangeListener` does, started
by the lifecycle), or validate a change (the replica's room did).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from proxy.errors import FeedNotFoundError, ProfileNotFoundError, ValidationError
from proxy.service._shared import Shared
from proxy.service.changes import CHANNEL, Change
from proxy.store import Feed, Store

if TYPE_CHECKING:
    from proxy.service._arrivals import Arrivals

log = structlog.get_logger("proxy.service")


async def forward(store: Store, change: Change) -> None:
    """Tell the leading scheduler (LISTEN/NOTIFY, :mod:`proxy.service.changes`)."""
    await store.notify(CHANNEL, change.encode())
    log.info("change_forwarded", kind=change.kind, id=change.id)


class Replication:
    """The leader's side: replicas' changes applied, missed ones resynchronised."""

    def __init__(self, shared: Shared, arrivals: Arrivals) -> None:
        self._s = shared
        self._arrivals = arrivals

    async def apply_change(self, change: Change) -> None:
        """A replica's change, on the leader: as if this process's own API had made it."""
        s = self._s
        if s.runtime is None:
            return  # stepped down meanwhile: the next leader restores from the database
        if change.kind == "feed":
            await s.host.call(s.put_feeds, [await s.store.get_feed(change.id)])
        elif change.kind == "feed_deleted":
            try:
                await s.store.get_feed(change.id)
            except FeedNotFoundError:
                await s.host.call(s.remove_feed, change.id)
        elif change.kind == "ping":
            await self._arrivals.apply_ping(change.id, list(change.users))
        elif change.kind == "profile" and change.user is not None:
            profile = await s.store.get_profile(change.user, change.id)
            if not await s.host.call(s.install_newer, profile):
                return  # what runs is this version already (a resync got it first)
        elif change.kind == "profile_deleted":
            await s.host.call(s.uninstall, change.id)
        log.info("change_applied", kind=change.kind, id=change.id)

    async def resync(self) -> None:
        """What the leader runs, made equal to the database after notifications may have been
        missed (:mod:`proxy.service.changes`): feeds by id; profiles by ``updated_at``,
        installed when new or changed, removed when gone. Rules whose profile did not change
        keep their state. What this process's own API changes meanwhile is not undone: a
        profile or feed is removed only if it is still absent from a second read (ids are
        never used twice, so one absent after it ran here is gone for good)."""
        s = self._s
        if s.runtime is None:
            return
        feeds = await s.store.list_feeds()
        versions = await s.store.profile_versions()

        def diff() -> tuple[list[Feed], list[int], list[int], list[int]]:
            """(feeds to add, profiles to install, feeds and profiles that may be gone)."""
            rt = s.require_leader()
            held = set(rt.feeds.by_id)
            stored = {feed.id for feed in feeds}
            stale = sorted(pid for pid, (_, at) in versions.items() if rt.versions.get(pid) != at)
            return ([f for f in feeds if f.id not in held], stale, sorted(held - stored),
                    sorted(set(rt.versions) - set(versions)))

        added, stale, feeds_gone, profiles_gone = await s.host.call(diff)
        if added:
            await s.host.call(s.put_feeds, added)
        installed = 0
        for pid in stale:
            user, _ = versions[pid]
            try:
                profile = await s.store.get_profile(user, pid)
                installed += await s.host.call(s.install_newer, profile)
            except ProfileNotFoundError:
                continue  # deleted meanwhile: its own notification follows
            except (ValidationError, ValueError) as exc:
                log.error("profile_not_installed", profile=pid, reason=str(exc))
        if profiles_gone:
            again = await s.store.profile_versions()
            profiles_gone = [pid for pid in profiles_gone if pid not in again]
            for pid in profiles_gone:
                await s.host.call(s.uninstall, pid)
        if feeds_gone:
            again_feeds = {feed.id for feed in await s.store.list_feeds()}
            feeds_gone = [fid for fid in feeds_gone if fid not in again_feeds]
            for fid in feeds_gone:
                await s.host.call(s.remove_feed, fid)
        if added or installed or profiles_gone or feeds_gone:
            log.info("changes_resynced", feeds_added=len(added), feeds_removed=len(feeds_gone),
                     profiles_installed=installed, profiles_removed=len(profiles_gone))
