"""The fence that ties a context's store transactions to a lease epoch (issue 21); see ``_cluster``.

On PostgreSQL the fence is a transaction-level advisory lock per lease: fenced
transactions take it shared, a takeover (:meth:`Leases.acquire_lease`) takes it
exclusive before it bumps the epoch, so a takeover waits for the fenced writes
in flight and every fenced write after it reads the new epoch. The lease row
itself is read without a row lock: the holder's own renewals (an ``UPDATE`` of
that row every TTL / 3) must never wait for a long write round, or a busy
writer would cost its process the lease (seen after restarts with 1,500
profiles: the first round after a restore outlived the TTL).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.errors import FencedError
from proxy.store._models import LeaseRow

__all__ = ["check_fence", "fence_lock", "fence_writes"]

#: The first key of the fence's advisory locks (the second is the lease name's hash): "PROX".
_LOCK_CLASS = 0x50524F58


@dataclass(frozen=True, slots=True)
class _Fence:
    lease: str
    holder: str
    epoch: int


_FENCE: contextvars.ContextVar[_Fence | None] = contextvars.ContextVar("proxy_fence", default=None)


def fence_writes(lease: str, holder: str, epoch: int) -> None:
    """From now on, in this asyncio context, every store transaction checks the lease first.

    Call it at the start of a task (a task copies its creator's context, so the
    fence stays inside the task that set it).
    """
    _FENCE.set(_Fence(lease, holder, epoch))


def fence_lock(lease: str, *, shared: bool) -> Any:
    """PostgreSQL: the statement that takes lease ``lease``'s fence lock until the transaction
    ends (shared: a fenced write; exclusive: a takeover)."""
    take = func.pg_advisory_xact_lock_shared if shared else func.pg_advisory_xact_lock
    return select(take(literal(_LOCK_CLASS), func.hashtext(lease)))


async def check_fence(conn: AsyncConnection) -> None:
    """Raise :class:`FencedError` if this context is fenced to a lease epoch that is not current."""
    fence = _FENCE.get()
    if fence is None:
        return
    if conn.dialect.name == "postgresql":
        # First the lock, then the read: under READ COMMITTED the read's snapshot is taken
        # after the lock is granted, so it sees a takeover that committed meanwhile.
        await conn.execute(fence_lock(fence.lease, shared=True))
    query = select(LeaseRow.holder, LeaseRow.epoch).where(LeaseRow.name == fence.lease)
    row = (await conn.execute(query)).first()
    if row is None or row.holder != fence.holder or int(row.epoch) != fence.epoch:
        current = "lease not found" if row is None else (
            f"released at epoch {row.epoch}" if row.holder is None
            else f"held by {row.holder} at epoch {row.epoch}")
        raise FencedError(fence.lease, fence.holder, fence.epoch, current)
