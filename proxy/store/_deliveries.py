"""Reading and settling the outbox: due deliveries for the dispatcher, attempts' outcomes,
dead letters and retries for their owners, targets and their secrets, the event stream."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, exists, func, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.errors import ConflictError, NotFoundError, ValidationError
from proxy.notify.signing import new_secret
from proxy.store._metrics import MetricsAndRetention
from proxy.store._models import (
    DeliveryRow,
    NotificationEventRow,
    NotifyTargetRow,
)
from proxy.store._outbox import _target
from proxy.store._types import (
    AttemptOutcome,
    Delivery,
    DeliveryState,
    DueDelivery,
    NotificationEvent,
    NotifyTarget,
    PurgeResult,
)

_DELIVERY_STATES = ("pending", "delivered", "failed")
#: Deliveries retention may delete: settled ones. A pending row is never purged, however old
#: (it would be a notification lost), and neither is its event.
_SETTLED = ("delivered", "failed")


def _event(row: Any) -> NotificationEvent:
    return NotificationEvent(
        id=row.id, user_id=row.user_id, profile_id=row.profile_id, cei_id=row.cei_id,
        type=row.type, payload=row.payload, created_at=row.created_at,
    )


class Deliveries(MetricsAndRetention):
    """The outbox's reading side (the writing side is :class:`~proxy.store._outbox.Outbox`)."""

    # --- the dispatcher -------------------------------------------------------------

    async def due_deliveries(
        self, now: dt.datetime, *, limit: int = 500, skip: Collection[int] = (),
        skip_targets: Collection[int] = (),
    ) -> list[DueDelivery]:
        """Pending deliveries whose next attempt is due, oldest due first, without those in
        ``skip`` (in flight in this process) and those to ``skip_targets`` (busy)."""
        d = cast(Table, DeliveryRow.__table__)
        t = cast(Table, NotifyTargetRow.__table__)
        e = cast(Table, NotificationEventRow.__table__)
        stmt = (
            select(
                d.c.id, d.c.event_id, d.c.target_id, d.c.msg_id, d.c.attempts, d.c.window_start,
                t.c.kind, t.c.url, t.c.secret, t.c.previous_secret,
                t.c.previous_secret_expires_at, t.c.disabled, t.c.disabled_reason,
                e.c.payload, e.c.created_at,
            )
            .select_from(d.join(t, t.c.id == d.c.target_id).join(e, e.c.id == d.c.event_id))
            .where(d.c.state == "pending", d.c.next_attempt_at <= now)
            .where(d.c.target_id.not_in(list(skip_targets)) if skip_targets else true())
            .order_by(d.c.next_attempt_at, d.c.id)
            .limit(limit + len(skip))
        )
        async with self._tx() as conn:
            rows = (await conn.execute(stmt)).all()
        out = []
        for row in rows:
            if row.id in skip:
                continue
            keys: tuple[str, ...] = ()
            if row.secret is not None:
                keys = (row.secret,)
                expires = row.previous_secret_expires_at
                if row.previous_secret is not None and expires is not None and expires > now:
                    keys += (row.previous_secret,)
            out.append(DueDelivery(
                id=row.id, event_id=row.event_id, target_id=row.target_id, kind=row.kind,
                url=row.url, secrets=keys, msg_id=row.msg_id, payload=row.payload,
                attempts=row.attempts, window_start=row.window_start,
                resolved_at=row.created_at,
                target_disabled=(row.disabled_reason or "disabled") if row.disabled else None,
            ))
            if len(out) == limit:
                break
        return out

    async def next_due_at(self) -> dt.datetime | None:
        """When the earliest pending delivery is due (the dispatcher sleeps until then)."""
        async with self._tx() as conn:
            value = (
                await conn.execute(
                    select(func.min(DeliveryRow.next_attempt_at)).where(
                        DeliveryRow.state == "pending")
                )
            ).scalar()
        return value

    async def record_attempts(self, outcomes: Sequence[AttemptOutcome]) -> None:
        """Store attempts' outcomes in ONE transaction (one statement per kind of change)."""
        if not outcomes:
            return
        d = cast(Table, DeliveryRow.__table__)
        rows = [
            {
                "b_id": o.delivery_id,
                "b_state": o.state,
                "b_next": o.next_attempt_at,
                "b_status": o.status,
                "b_error": o.error,
                "b_at": o.at,
                "b_delivered": o.at if o.state == "delivered" else None,
                "b_inc": 1 if o.attempted else 0,
            }
            for o in outcomes
        ]
        stmt = (
            update(d)
            .where(d.c.id == bindparam("b_id"))
            .values(
                state=bindparam("b_state"),
                next_attempt_at=bindparam("b_next"),
                last_status=bindparam("b_status"),
                last_error=bindparam("b_error"),
                last_attempt_at=bindparam("b_at"),
                delivered_at=bindparam("b_delivered"),
                attempts=d.c.attempts + bindparam("b_inc"),
            )
        )
        gone = {o.target_id: o.disable_target for o in outcomes if o.disable_target}
        async with self._tx() as conn:
            await conn.execute(stmt, rows)
            for target_id, reason in gone.items():
                await conn.execute(
                    update(NotifyTargetRow)
                    .where(NotifyTargetRow.id == target_id)
                    .values(disabled=True, disabled_reason=reason)
                )

    async def outbox_backlog(self) -> int:
        """Pending deliveries (due or waiting for a retry)."""
        async with self._tx() as conn:
            value = (
                await conn.execute(
                    select(func.count()).select_from(DeliveryRow).where(
                        DeliveryRow.state == "pending")
                )
            ).scalar()
        return int(value or 0)

    # --- retention --------------------------------------------------------------------

    async def purge_older_than(
        self, cutoff: dt.datetime, *, batch_size: int = 1_000
    ) -> PurgeResult:
        """Also purge the outbox: deliveries settled (delivered, or dead letters) before
        ``cutoff`` (their last attempt, or their creation if never attempted), then events
        created before ``cutoff`` that no delivery refers to any more. Never a pending
        delivery, nor the event of one (deleting the event would cascade to it)."""
        result = await super().purge_older_than(cutoff, batch_size=batch_size)
        d = cast(Table, DeliveryRow.__table__)
        e = cast(Table, NotificationEventRow.__table__)
        settled_before = (
            d.c.state.in_(_SETTLED)
            & (func.coalesce(d.c.delivered_at, d.c.last_attempt_at, d.c.created_at) < cutoff)
        )
        # Repeated in the DELETE: a dead letter retried meanwhile is pending again, and stays.
        deliveries = await self._purge_batches(d, settled_before, batch_size)
        unreferenced = (e.c.created_at < cutoff) & ~exists().where(d.c.event_id == e.c.id)
        events = await self._purge_batches(e, unreferenced, batch_size)
        return dataclasses.replace(result, deliveries=deliveries, events=events)

    async def _purge_batches(self, table: Table, condition: Any, batch_size: int) -> int:
        """Delete ``table``'s rows matching ``condition``, ``batch_size`` per transaction."""
        total = 0
        while True:
            async with self._tx() as conn:
                ids = list((await conn.execute(
                    select(table.c.id).where(condition).limit(batch_size))).scalars())
                if ids:
                    deleted = await conn.execute(delete(table).where(table.c.id.in_(ids), condition))
                    total += deleted.rowcount
            if len(ids) < batch_size:
                return total

    # --- a user's deliveries --------------------------------------------------------

    def _deliveries_query(self, user_id: int) -> Any:
        d = cast(Table, DeliveryRow.__table__)
        t = cast(Table, NotifyTargetRow.__table__)
        e = cast(Table, NotificationEventRow.__table__)
        return (
            select(
                d.c.id, d.c.event_id, d.c.target_id, t.c.kind, t.c.url, e.c.profile_id,
                e.c.cei_id, e.c.type, d.c.msg_id, d.c.state, d.c.attempts, d.c.next_attempt_at,
                d.c.last_attempt_at, d.c.last_status, d.c.last_error, d.c.delivered_at,
                d.c.created_at,
            )
            .select_from(d.join(t, t.c.id == d.c.target_id).join(e, e.c.id == d.c.event_id))
            .where(t.c.user_id == user_id)
        )

    @staticmethod
    def _delivery(row: Any) -> Delivery:
        return Delivery(
            id=row.id, event_id=row.event_id, target_id=row.target_id, target_kind=row.kind,
            target_url=row.url, profile_id=row.profile_id, cei_id=row.cei_id, type=row.type,
            msg_id=row.msg_id, state=row.state, attempts=row.attempts,
            next_attempt_at=row.next_attempt_at, last_attempt_at=row.last_attempt_at,
            last_status=row.last_status, last_error=row.last_error,
            delivered_at=row.delivered_at, created_at=row.created_at,
        )

    async def list_deliveries(
        self, user_id: int, state: DeliveryState | None = None, *, limit: int = 100,
        offset: int = 0, before_id: int | None = None,
    ) -> list[Delivery]:
        """The user's deliveries (only to their own targets), newest first; ``before_id``:
        only older ones (keyset pagination)."""
        if state is not None and state not in _DELIVERY_STATES:
            raise ValidationError(f"state {state!r} is not one of {', '.join(_DELIVERY_STATES)}")
        stmt = self._deliveries_query(user_id)
        if state is not None:
            stmt = stmt.where(DeliveryRow.__table__.c.state == state)
        if before_id is not None:
            stmt = stmt.where(DeliveryRow.__table__.c.id < before_id)
        stmt = stmt.order_by(DeliveryRow.__table__.c.id.desc()).limit(limit).offset(offset)
        async with self._tx() as conn:
            rows = (await conn.execute(stmt)).all()
        return [self._delivery(row) for row in rows]

    async def get_delivery(self, user_id: int, delivery_id: int) -> Delivery:
        async with self._tx() as conn:
            return await self._owned_delivery(conn, user_id, delivery_id)

    async def _owned_delivery(
        self, conn: AsyncConnection, user_id: int, delivery_id: int
    ) -> Delivery:
        stmt = self._deliveries_query(user_id).where(DeliveryRow.__table__.c.id == delivery_id)
        row = (await conn.execute(stmt)).first()
        if row is None:
            raise NotFoundError("delivery", delivery_id)
        return self._delivery(row)

    async def retry_delivery(self, user_id: int, delivery_id: int) -> Delivery:
        """Send a delivery again now, with a fresh retry window (a dead letter comes back to
        life; a pending one is just hurried). :class:`ConflictError` if delivered already
        or its target is disabled (enable the target first)."""
        now = self._clock()
        async with self._tx() as conn:
            delivery = await self._owned_delivery(conn, user_id, delivery_id)
            if delivery.state == "delivered":
                raise ConflictError(f"delivery {delivery_id} was delivered already")
            disabled = (
                await conn.execute(
                    select(NotifyTargetRow.disabled, NotifyTargetRow.disabled_reason)
                    .where(NotifyTargetRow.id == delivery.target_id)
                )
            ).one()
            if disabled.disabled:
                raise ConflictError(
                    f"target {delivery.target_id} is disabled ({disabled.disabled_reason}); "
                    f"enable it with POST /api/v1/targets/{delivery.target_id}/enable first"
                )
            await conn.execute(
                update(DeliveryRow)
                .where(DeliveryRow.id == delivery_id)
                .values(state="pending", next_attempt_at=now, window_start=now)
            )
            return await self._owned_delivery(conn, user_id, delivery_id)

    # --- targets --------------------------------------------------------------------

    async def list_targets(
        self, user_id: int, *, limit: int | None = None, after_id: int | None = None
    ) -> list[NotifyTarget]:
        """The user's notify targets by id (secrets are never listed): all, or ``limit``
        with ids above ``after_id``."""
        stmt = (
            select(NotifyTargetRow).where(NotifyTargetRow.user_id == user_id)
            .order_by(NotifyTargetRow.id).limit(limit)
        )
        if after_id is not None:
            stmt = stmt.where(NotifyTargetRow.id > after_id)
        async with self._tx() as conn:
            rows = (await conn.execute(stmt)).all()
        return [_target(row) for row in rows]

    async def _owned_target(self, conn: AsyncConnection, user_id: int, target_id: int) -> Any:
        row = (
            await conn.execute(
                select(NotifyTargetRow).where(
                    NotifyTargetRow.id == target_id, NotifyTargetRow.user_id == user_id)
            )
        ).first()
        if row is None:
            raise NotFoundError("target", target_id)
        return row

    async def rotate_target_secret(
        self, user_id: int, target_id: int, overlap: dt.timedelta
    ) -> NotifyTarget:
        """A new secret for a webhook target, returned once; the old one keeps signing (as a
        second signature) for ``overlap``, so receivers can switch without losing a message."""
        if overlap < dt.timedelta(0):
            raise ValidationError("overlap_seconds must be ≥ 0")
        now = self._clock()
        async with self._tx() as conn:
            row = await self._owned_target(conn, user_id, target_id)
            if row.kind != "webhook":
                raise ConflictError(f"target {target_id} is an Apprise URL: it has no secret")
            secret = new_secret()
            await conn.execute(
                update(NotifyTargetRow)
                .where(NotifyTargetRow.id == target_id)
                .values(secret=secret, previous_secret=row.secret,
                        previous_secret_expires_at=now + overlap)
            )
            row = await self._owned_target(conn, user_id, target_id)
        return _target(row, secret)

    async def enable_target(self, user_id: int, target_id: int) -> NotifyTarget:
        """Enable a target disabled by a 410 Gone (its dead letters can then be retried)."""
        async with self._tx() as conn:
            await self._owned_target(conn, user_id, target_id)
            await conn.execute(
                update(NotifyTargetRow)
                .where(NotifyTargetRow.id == target_id)
                .values(disabled=False, disabled_reason=None)
            )
            return _target(await self._owned_target(conn, user_id, target_id))

    # --- the event stream -----------------------------------------------------------

    async def events_after(
        self, user_id: int, after: int, *, limit: int = 500
    ) -> list[NotificationEvent]:
        """The user's events with an id above ``after``, in id order (SSE resumption)."""
        stmt = (
            select(NotificationEventRow)
            .where(NotificationEventRow.user_id == user_id, NotificationEventRow.id > after)
            .order_by(NotificationEventRow.id)
            .limit(limit)
        )
        async with self._tx() as conn:
            rows = (await conn.execute(stmt)).all()
        return [_event(row) for row in rows]

    async def last_event_id(self, user_id: int) -> int:
        """The id of the user's newest event (0 if none): a stream without ``Last-Event-ID``
        starts after it."""
        async with self._tx() as conn:
            value = (
                await conn.execute(
                    select(func.max(NotificationEventRow.id)).where(
                        NotificationEventRow.user_id == user_id)
                )
            ).scalar()
        return int(value or 0)

    async def get_event(self, user_id: int, event_id: int) -> NotificationEvent:
        """Raises :class:`NotFoundError` (also for another user's event)."""
        async with self._tx() as conn:
            row = (
                await conn.execute(
                    select(NotificationEventRow).where(
                        NotificationEventRow.id == event_id,
                        NotificationEventRow.user_id == user_id)
                )
            ).first()
        if row is None:
            raise NotFoundError("event", event_id)
        return _event(row)

    async def list_events(
        self, user_id: int, *, limit: int = 100, before_id: int | None = None
    ) -> list[NotificationEvent]:
        """The user's newest events, newest first; ``before_id``: only older ones."""
        stmt = (
            select(NotificationEventRow)
            .where(NotificationEventRow.user_id == user_id)
            .order_by(NotificationEventRow.id.desc())
            .limit(limit)
        )
        if before_id is not None:
            stmt = stmt.where(NotificationEventRow.id < before_id)
        async with self._tx() as conn:
            rows = (await conn.execute(stmt)).all()
        return [_event(row) for row in rows]
