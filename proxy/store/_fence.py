"""The fence that ties a context's store transactions to a lease epoch (issue 21); see ``_cluster``."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.errors import FencedError
from proxy.store._models import LeaseRow

__all__ = ["check_fence", "fence_writes"]


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


async def check_fence(conn: AsyncConnection) -> None:
    """Raise :class:`FencedError` if this context is fenced to a lease epoch that is not current."""
    fence = _FENCE.get()
    if fence is None:
        return
    query = select(LeaseRow.holder, LeaseRow.epoch).where(LeaseRow.name == fence.lease)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(read=True)
    row = (await conn.execute(query)).first()
    if row is None or row.holder != fence.holder or int(row.epoch) != fence.epoch:
        current = "lease not found" if row is None else (
            f"released at epoch {row.epoch}" if row.holder is None
            else f"held by {row.holder} at epoch {row.epoch}")
        raise FencedError(fence.lease, fence.holder, fence.epoch, current)
