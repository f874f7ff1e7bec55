"""The cluster's live processes (heartbeats) and the fence that ties writes to a lease epoch (issue 21).

Heartbeats: every ``proxy serve --role …`` process upserts one row of
``cluster_processes`` (its role, address, the holder id it campaigns under)
every few seconds; :meth:`Cluster.live_processes` lists the rows seen recently.
A process that stops deletes its row; one killed leaves a row that simply ages
out. Who leads is read from the lease row in the same statement, never from a
row's own claim: a killed leader's last heartbeat still claims the lease until
it ages out (three beats), while the lease names its successor at once.

Fencing: :func:`fence_writes` binds a lease (name, holder, epoch) to the
current asyncio context (a task and what it awaits). Every transaction the
store opens in that context first reads the lease row, after taking the lease's
advisory lock shared on PostgreSQL, and raises :class:`~proxy.errors.FencedError`
unless holder and epoch still match, so the check and the write commit atomically: a
takeover (the advisory lock exclusive, then ``UPDATE leases … epoch = epoch + 1``)
waits for a fenced write in flight, and any fenced write after it is refused; the
holder's renewals do not wait for its writes. SQLite serialises writers, so the read
suffices there. The chronon loop's writer task is fenced; reads of the API are
not (they change nothing).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import delete, func, select

from proxy.errors import ValidationError
from proxy.store._base import StoreBase
from proxy.store._fence import check_fence, fence_writes
from proxy.store._lease import Lease
from proxy.store._models import ClusterProcessRow, LeaseRow

__all__ = ["Cluster", "ClusterProcess", "check_fence", "fence_writes", "lead_epoch"]


@dataclass(frozen=True, slots=True)
class ClusterProcess:
    """One process as its last heartbeat described it; ``leads`` and ``epoch`` as the lease says."""

    id: str
    role: str
    host: str
    port: int
    leads: bool
    epoch: int | None
    started_at: dt.datetime
    heartbeat_at: dt.datetime


def lead_epoch(holder: str | None, claimed_epoch: int | None, lease: Lease | None,
               now: dt.datetime) -> int | None:
    """The lease epoch a process with this heartbeat holds at ``now``, ``None`` if it does not lead.

    The lease row decides: the process whose ``holder`` the live lease names leads, at the
    lease's epoch, whatever its last heartbeat claimed; so at most one process leads, and
    a standby that just took over leads before its next beat. A row with no holder id
    (written before migration 0008) leads if it claimed the live lease's epoch: epochs
    are never reused. Does not judge whether the holder still ticks (its heartbeat's
    age and ``/readyz`` say that).
    """
    if lease is None or not lease.live(now):
        return None
    if holder is not None:
        return lease.epoch if holder == lease.holder else None
    return lease.epoch if claimed_epoch == lease.epoch else None


class Cluster(StoreBase):
    """Heartbeat rows of the cluster's processes."""

    async def heartbeat(
        self, process_id: str, *, role: str, host: str, port: int, leads: bool,
        epoch: int | None, now: dt.datetime, started_at: dt.datetime, holder: str | None = None,
    ) -> None:
        """Insert or refresh this process's row.

        ``holder`` is the name the process campaigns under in ``leases``; ``leads`` and
        ``epoch`` are its own claim, kept for readers older than migration 0008 (this
        version's :meth:`live_processes` asks the lease).
        """
        async with self._tx() as conn:
            stmt = self._insert(conn, ClusterProcessRow).values(
                id=process_id, role=role, host=host, port=port, leads=leads, epoch=epoch,
                holder=holder, started_at=started_at, heartbeat_at=now)
            await conn.execute(stmt.on_conflict_do_update(
                index_elements=[ClusterProcessRow.id],
                set_={"role": role, "host": host, "port": port, "leads": leads, "epoch": epoch,
                      "holder": holder, "heartbeat_at": now}))

    async def live_processes(self, since: dt.datetime, *, lease: str,
                             now: dt.datetime) -> list[ClusterProcess]:
        """Processes whose last heartbeat is at or after ``since``, by role then id; the one
        that holds lease ``lease`` live at ``now`` (if any) leads (:func:`lead_epoch`).

        One statement reads the rows and the lease, so they come from one snapshot.
        """
        async with self._tx() as conn:
            rows = (await conn.execute(
                select(ClusterProcessRow.__table__,
                       LeaseRow.name.label("lease_name"), LeaseRow.holder.label("lease_holder"),
                       LeaseRow.epoch.label("lease_epoch"),
                       LeaseRow.acquired_at.label("lease_acquired_at"),
                       LeaseRow.expires_at.label("lease_expires_at"))
                .select_from(ClusterProcessRow)
                .outerjoin(LeaseRow, LeaseRow.name == lease)
                .where(ClusterProcessRow.heartbeat_at >= since)
                .order_by(ClusterProcessRow.role, ClusterProcessRow.id)
            )).all()
        out = []
        for r in rows:
            held = None if r.lease_name is None else Lease(
                r.lease_name, r.lease_holder, int(r.lease_epoch), r.lease_acquired_at,
                r.lease_expires_at)
            epoch = lead_epoch(r.holder, r.epoch if r.leads else None, held, now)
            out.append(ClusterProcess(r.id, r.role, r.host, r.port, epoch is not None, epoch,
                                      r.started_at, r.heartbeat_at))
        return out

    async def forget_process(self, process_id: str, *, older_than: dt.datetime | None = None) -> int:
        """Delete this process's row (clean shutdown), or every row older than ``older_than``."""
        async with self._tx() as conn:
            stmt = delete(ClusterProcessRow).where(ClusterProcessRow.id == process_id)
            if older_than is not None:
                stmt = delete(ClusterProcessRow).where(ClusterProcessRow.heartbeat_at < older_than)
            result = await conn.execute(stmt)
        return int(result.rowcount or 0)

    async def notify(self, channel: str, payload: str) -> None:
        """``pg_notify(channel, payload)``: delivered to listeners when this transaction commits.

        PostgreSQL only (SQLite has no LISTEN/NOTIFY): :class:`ValidationError` there.
        """
        async with self._tx() as conn:
            if conn.dialect.name != "postgresql":
                raise ValidationError("LISTEN/NOTIFY needs PostgreSQL (PROXY_DATABASE_URL)")
            await conn.execute(select(func.pg_notify(channel, payload)))
