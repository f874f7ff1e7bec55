"""WebSub subscriptions (issue 44): one row per feed and hub, its state and lease.

A subscription goes ``pending`` (asked, not verified) → ``subscribed`` (the hub verified
our intent) → renewed in place; or ``denied`` (the hub said no), ``expired`` (the lease
ran out unrenewed), ``unsubscribing`` (the feed went or its hub changed; the row is
deleted once the hub verified the unsubscription). The service decides the
transitions (:mod:`proxy.service._websub`); this module only stores them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, update

from proxy.store._base import StoreBase, _now
from proxy.store._models import FeedRegistrationRow, FeedRow, WebSubSubscriptionRow

__all__ = ["WEBSUB_STATES", "WebSubStore", "WebSubSubscription"]

WEBSUB_STATES = ("pending", "subscribed", "denied", "expired", "unsubscribing")
_MUTABLE = frozenset({
    "state", "lease_seconds", "lease_expires_at", "requested_at", "next_attempt_at",
    "failures", "reason", "hub", "topic",
})


@dataclass(frozen=True, slots=True)
class WebSubSubscription:
    """One subscription row (``secret`` included: only the service reads it)."""

    id: int
    feed_id: int
    hub: str
    topic: str
    callback_id: str
    secret: str
    state: str
    lease_seconds: int | None
    lease_expires_at: dt.datetime | None
    requested_at: dt.datetime | None
    next_attempt_at: dt.datetime | None
    failures: int
    reason: str | None
    last_notification_at: dt.datetime | None
    notifications: int
    rejected: int
    created_at: dt.datetime


def _sub(row: Any) -> WebSubSubscription:
    return WebSubSubscription(
        id=row.id, feed_id=row.feed_id, hub=row.hub, topic=row.topic,
        callback_id=row.callback_id, secret=row.secret, state=row.state,
        lease_seconds=row.lease_seconds, lease_expires_at=row.lease_expires_at,
        requested_at=row.requested_at, next_attempt_at=row.next_attempt_at,
        failures=row.failures, reason=row.reason, last_notification_at=row.last_notification_at,
        notifications=row.notifications, rejected=row.rejected, created_at=row.created_at)


class WebSubStore(StoreBase):
    """Rows of ``websub_subscriptions``."""

    async def websub_create(
        self, feed_id: int, *, hub: str, topic: str, callback_id: str, secret: str,
        now: dt.datetime | None = None,
    ) -> WebSubSubscription:
        """A new ``pending`` subscription (stored before the hub is asked: its verification
        request may arrive before the hub answers ours)."""
        async with self._tx() as conn:
            row = (await conn.execute(
                insert(WebSubSubscriptionRow).values(
                    feed_id=feed_id, hub=hub, topic=topic, callback_id=callback_id,
                    secret=secret, state="pending", created_at=now or _now())
                .returning(WebSubSubscriptionRow))).one()
        return _sub(row)

    async def websub_by_callback(self, callback_id: str) -> WebSubSubscription | None:
        async with self._tx() as conn:
            row = (await conn.execute(select(WebSubSubscriptionRow).where(
                WebSubSubscriptionRow.callback_id == callback_id))).first()
        return None if row is None else _sub(row)

    async def websub_of_feed(self, feed_id: int) -> WebSubSubscription | None:
        """The feed's current subscription (the newest not being unsubscribed), or ``None``."""
        async with self._tx() as conn:
            row = (await conn.execute(
                select(WebSubSubscriptionRow)
                .where(WebSubSubscriptionRow.feed_id == feed_id,
                       WebSubSubscriptionRow.state != "unsubscribing")
                .order_by(WebSubSubscriptionRow.id.desc()).limit(1))).first()
        return None if row is None else _sub(row)

    async def websub_list(self) -> list[WebSubSubscription]:
        async with self._tx() as conn:
            rows = (await conn.execute(
                select(WebSubSubscriptionRow).order_by(WebSubSubscriptionRow.id))).all()
        return [_sub(r) for r in rows]

    async def websub_update(self, sub_id: int, **values: Any) -> None:
        """Change the named columns (state, lease, attempt bookkeeping)."""
        unknown = set(values) - _MUTABLE
        if unknown:
            raise ValueError(f"websub_update: not changeable: {sorted(unknown)}")
        async with self._tx() as conn:
            await conn.execute(update(WebSubSubscriptionRow)
                               .where(WebSubSubscriptionRow.id == sub_id).values(**values))

    async def websub_delete(self, sub_id: int) -> None:
        async with self._tx() as conn:
            await conn.execute(delete(WebSubSubscriptionRow)
                               .where(WebSubSubscriptionRow.id == sub_id))

    async def websub_notified(self, sub_id: int, *, accepted: bool, at: dt.datetime) -> None:
        """Count one content distribution: accepted (and when), or rejected."""
        row = WebSubSubscriptionRow
        values: dict[str, Any] = (
            {"notifications": row.notifications + 1, "last_notification_at": at}
            if accepted else {"rejected": row.rejected + 1})
        async with self._tx() as conn:
            await conn.execute(update(row).where(row.id == sub_id).values(**values))

    async def websub_counts(self) -> dict[str, int]:
        """Subscriptions by state (every state, 0 included)."""
        row = WebSubSubscriptionRow
        async with self._tx() as conn:
            rows = (await conn.execute(
                select(row.state, func.count()).group_by(row.state))).all()
        counts = dict.fromkeys(WEBSUB_STATES, 0)
        counts.update({state: int(n) for state, n in rows})
        return counts

    async def feed_registrants(self, feed_id: int) -> list[int]:
        """The users who registered the feed (a push speaks for all of them)."""
        async with self._tx() as conn:
            return list((await conn.execute(
                select(FeedRegistrationRow.user_id)
                .where(FeedRegistrationRow.feed_id == feed_id)
                .order_by(FeedRegistrationRow.user_id))).scalars())

    async def feed_ids(self) -> set[int]:
        """Every feed's id."""
        async with self._tx() as conn:
            return set((await conn.execute(select(FeedRow.id))).scalars())
