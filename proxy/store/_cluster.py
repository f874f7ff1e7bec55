"""The cluster's live processes (heartbeats) and the fence that ties writes to a lease epoch (issue 21).

Heartbeats: every ``proxy serve --role …`` process upserts one row of
``cluster_processes`` (its role, address, whether it leads) every few seconds;
:meth:`Cluster.live_processes` lists the rows seen recently. A process that
stops deletes its row; one killed leaves a row that simply ages out.

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
from proxy.store._models import ClusterProcessRow

__all__ = ["Cluster", "ClusterProcess", "check_fence", "fence_writes"]


@dataclass(frozen=True, slots=True)
class ClusterProcess:
    """One process as its last heartbeat described it."""

    id: str
    role: str
    host: str
    port: int
    leads: bool
    epoch: int | None
    started_at: dt.datetime
    heartbeat_at: dt.datetime


class Cluster(StoreBase):
    """Heartbeat rows of the cluster's processes."""

    async def heartbeat(
        self, process_id: str, *, role: str, host: str, port: int, leads: bool,
        epoch: int | None, now: dt.datetime, started_at: dt.datetime,
    ) -> None:
        """Insert or refresh this process's row."""
        async with self._tx() as conn:
            stmt = self._insert(conn, ClusterProcessRow).values(
                id=process_id, role=role, host=host, port=port, leads=leads, epoch=epoch,
                started_at=started_at, heartbeat_at=now)
            await conn.execute(stmt.on_conflict_do_update(
                index_elements=[ClusterProcessRow.id],
                set_={"role": role, "host": host, "port": port, "leads": leads, "epoch": epoch,
                      "heartbeat_at": now}))

    async def live_processes(self, since: dt.datetime) -> list[ClusterProcess]:
        """Processes whose last heartbeat is at or after ``since``, by role then id."""
        async with self._tx() as conn:
            rows = (await conn.execute(
                select(ClusterProcessRow.__table__)
                .where(ClusterProcessRow.heartbeat_at >= since)
                .order_by(ClusterProcessRow.role, ClusterProcessRow.id)
            )).all()
        return [ClusterProcess(r.id, r.role, r.host, r.port, bool(r.leads), r.epoch,
                               r.started_at, r.heartbeat_at) for r in rows]

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
