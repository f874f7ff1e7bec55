"""Named exclusive leases in the ``leases`` table: acquire, renew, release, read.

One row per lease name. A lease is free when its ``holder`` is NULL (released)
or its ``expires_at`` has passed (the holder died without releasing: kill -9,
a lost host). Acquiring a free lease is ONE conditional statement, so two
processes racing for it cannot both win, on either backend:

* ``UPDATE leases SET holder=me, epoch=epoch+1 … WHERE name=… AND (holder IS NULL
  OR expires_at <= now)``; PostgreSQL re-checks the WHERE on the row a
  concurrent winner just committed (READ COMMITTED), SQLite serialises writers;
* if no row exists yet, ``INSERT … ON CONFLICT (name) DO NOTHING`` with epoch 1:
  of two first-comers only one inserts.

``epoch`` only grows (the row is never deleted, a release keeps it), so it can
fence a stale holder's writes later (issue 22's scale-out step). Renewing and
releasing match ``(name, holder, epoch)``: after a takeover the old holder's
renewal changes nothing and reports the lease lost.

Time is the caller's wall clock (``now``, aware UTC): processes sharing a
database must have synchronised clocks (NTP), skew well under the TTL. This
module does not decide when to renew or what to do when a lease is lost
(:mod:`proxy.service.leader` does).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import or_, select, update

from proxy.store._base import StoreBase
from proxy.store._fence import fence_lock
from proxy.store._models import LeaseRow

__all__ = ["Lease", "Leases"]


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease as stored: its holder (``None``: released), epoch and expiry (aware UTC)."""

    name: str
    holder: str | None
    epoch: int
    acquired_at: dt.datetime
    expires_at: dt.datetime

    def live(self, now: dt.datetime) -> bool:
        """Held by someone at ``now`` (not released, not expired)."""
        return self.holder is not None and now < self.expires_at


def _ttl(seconds: float) -> dt.timedelta:
    if seconds <= 0:
        raise ValueError(f"lease TTL must be positive, got {seconds}")
    return dt.timedelta(seconds=seconds)


class Leases(StoreBase):
    """The lease queries of the :class:`~proxy.store.Store`; each is one short transaction."""

    async def acquire_lease(
        self, name: str, holder: str, *, now: dt.datetime, ttl: float
    ) -> Lease | None:
        """Take lease ``name`` for ``holder`` until ``now + ttl`` if it is free; ``None`` if live.

        Returns the new lease with its epoch (1 for the first holder ever, the
        previous epoch + 1 after). A holder asking again for a lease it holds
        live is refused like anyone else: renew it instead.
        """
        expires = now + _ttl(ttl)
        async with self._tx() as conn:
            if conn.dialect.name == "postgresql":
                current = (await conn.execute(
                    select(LeaseRow.holder, LeaseRow.expires_at).where(LeaseRow.name == name))).first()
                if current is not None and current.holder is not None and current.expires_at > now:
                    return None  # live: no need to wait for the holder's writes in flight
                # The fence (_fence.py): wait for the fenced writes in flight, and make every
                # later one read the new epoch.
                await conn.execute(fence_lock(name, shared=False))
            taken = (await conn.execute(
                update(LeaseRow)
                .where(LeaseRow.name == name,
                       or_(LeaseRow.holder.is_(None), LeaseRow.expires_at <= now))
                .values(holder=holder, epoch=LeaseRow.epoch + 1, acquired_at=now,
                        renewed_at=now, expires_at=expires)
                .returning(LeaseRow.epoch)
            )).first()
            if taken is None:
                taken = (await conn.execute(
                    self._insert(conn, LeaseRow)
                    .values(name=name, holder=holder, epoch=1, acquired_at=now, renewed_at=now,
                            expires_at=expires)
                    .on_conflict_do_nothing(index_elements=[LeaseRow.name])
                    .returning(LeaseRow.epoch)
                )).first()
        if taken is None:
            return None
        return Lease(name, holder, int(taken.epoch), now, expires)

    async def renew_lease(self, lease: Lease, *, now: dt.datetime, ttl: float) -> Lease | None:
        """Extend a held lease to ``now + ttl``; ``None`` if it is no longer this holder's epoch.

        A lease that expired but that nobody took meanwhile is renewed (no other
        epoch came between); the caller decides whether it still trusted it.
        """
        expires = now + _ttl(ttl)
        async with self._tx() as conn:
            renewed = (await conn.execute(
                update(LeaseRow)
                .where(LeaseRow.name == lease.name, LeaseRow.holder == lease.holder,
                       LeaseRow.epoch == lease.epoch)
                .values(renewed_at=now, expires_at=expires)
                .returning(LeaseRow.epoch)
            )).first()
        if renewed is None:
            return None
        return Lease(lease.name, lease.holder, lease.epoch, lease.acquired_at, expires)

    async def release_lease(self, lease: Lease, *, now: dt.datetime) -> bool:
        """Give the lease up so another process may take it at once; ``False`` if not ours any more."""
        async with self._tx() as conn:
            released = (await conn.execute(
                update(LeaseRow)
                .where(LeaseRow.name == lease.name, LeaseRow.holder == lease.holder,
                       LeaseRow.epoch == lease.epoch)
                .values(holder=None, expires_at=now)
                .returning(LeaseRow.epoch)
            )).first()
        return released is not None

    async def current_lease(self, name: str) -> Lease | None:
        """The stored row of lease ``name`` (live, expired or released); ``None`` if never taken."""
        async with self._tx() as conn:
            row = (await conn.execute(
                select(LeaseRow.__table__).where(LeaseRow.name == name)
            )).first()
        if row is None:
            return None
        return Lease(row.name, row.holder, int(row.epoch), row.acquired_at, row.expires_at)
