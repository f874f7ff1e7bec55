"""Leadership of the chronon loop: one lease per database, renewed, given up on shutdown (issue 22).

Two ``proxy serve`` processes on one database must not both run the loop (the
same feed probed twice in a chronon, CEIs written twice). The process that
holds the ``chronon-loop`` lease runs it; any other waits as a standby and
campaigns for the lease, taking over when the holder releases it (shutdown) or
stops renewing it (kill -9, a hung or partitioned host: the lease expires).

Timing (:class:`LeaseTiming`): the holder renews every ``ttl / 3``; if renewals
fail (database away) it keeps its lease until ``ttl`` after the start of the
last successful renewal, then steps down by itself, at or before the moment the
stored lease expires, so two loops never overlap while clocks agree. A holder
that merely stalled past that moment (a long synchronous restore: it did
nothing meanwhile, :meth:`Leader.holds` refused every tick) renews when it
wakes: a takeover bumps the epoch, so a renewal that still matches proves
nobody took the lease, and it goes on leading. That holds too when the stall
began with a renewal on the wire: its timeout, fired as late as the stall
ended, gives the renewal one more TTL (:meth:`Leader._await_renewal`). A standby
that finds the lease live sleeps until it expires (at most ``ttl / 3``), so it
takes over within ``ttl`` of the holder's last renewal plus one attempt.

:class:`Leader` decides nothing about the service: it calls ``on_elected`` with
the new lease (the service restores from the database and starts the loop) and
``on_deposed`` with a reason when the lease is lost (the service stops probing
and writing at once). Storage is the :class:`LeasePort`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from proxy.errors import StorageError
from proxy.store import Lease

log = structlog.get_logger("proxy.service")

#: The lease that says which process runs the chronon loop.
LOOP_LEASE = "chronon-loop"
#: The automatic TTL never goes below this: a database hiccup or a GC pause of a
#: few seconds must not hand the loop over (and back) with short chronons.
MIN_AUTO_TTL_SECONDS = 10.0
#: Auto TTL in chronons: a standby takes over within ttl + ttl/3 ≤ 3 chronons of the
#: holder's death with chronons of 5 s and more (the scale-out issue's target).
AUTO_TTL_CHRONONS = 2.0
#: A standby retries this long after the lease's expiry, so it does not race the clock.
_EXPIRY_SLACK_SECONDS = 0.02


class LeasePort(Protocol):
    """What leadership needs from storage (:class:`~proxy.store.Store` implements it).

    Any method can raise :class:`~proxy.errors.StorageError`; datetimes are
    aware UTC. ``acquire_lease`` takes a free (released or expired) lease
    atomically with epoch + 1, or returns ``None``; ``renew_lease`` and
    ``release_lease`` act only while ``(holder, epoch)`` still match.
    """

    async def acquire_lease(
        self, name: str, holder: str, *, now: dt.datetime, ttl: float
    ) -> Lease | None: ...

    async def renew_lease(self, lease: Lease, *, now: dt.datetime, ttl: float) -> Lease | None: ...

    async def release_lease(self, lease: Lease, *, now: dt.datetime) -> bool: ...

    async def current_lease(self, name: str) -> Lease | None: ...


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """How long a lease lives without renewal, and how often its holder renews it."""

    ttl: float
    renew_every: float

    @classmethod
    def of(cls, chronon_seconds: float, ttl_seconds: float = 0.0) -> LeaseTiming:
        """``ttl_seconds`` if positive, else two chronons but at least 10 s; renewals at ttl / 3."""
        ttl = ttl_seconds if ttl_seconds > 0 else max(
            AUTO_TTL_CHRONONS * chronon_seconds, MIN_AUTO_TTL_SECONDS)
        return cls(ttl=ttl, renew_every=ttl / 3)


def holder_id() -> str:
    """This process's name in the lease table: host, pid and a random suffix (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _utc(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


class Leader:
    """Holds (or campaigns for) one lease: :meth:`acquire` once, then :meth:`run` until cancelled.

    ``on_elected(lease)`` runs when :meth:`run` wins the lease (not for
    :meth:`acquire`: its caller acts on the result itself); if it raises, the
    lease is released and the campaign goes on. ``on_deposed(reason)`` runs when
    a held lease is lost: taken over, or not renewed in time.
    ``wall``/``monotonic`` are injected for tests.
    """

    def __init__(
        self,
        leases: LeasePort,
        holder: str,
        timing: LeaseTiming,
        *,
        on_elected: Callable[[Lease], Awaitable[None]],
        on_deposed: Callable[[str], Awaitable[None]],
        name: str = LOOP_LEASE,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        patient: bool = False,
    ) -> None:
        self.leases = leases
        #: A renewal still waiting at the deadline is waited for, not given up (SQLite: it waits
        #: for this process's own write round, which holds the database's one write lock, so
        #: nobody can take the lease meanwhile; a takeover after it shows as a renewal that
        #: matches nothing). Ticks are refused meanwhile, as past any deadline. Not for a
        #: database across a network, where a renewal that hangs may be a partition.
        self.patient = patient
        self.holder = holder
        self.timing = timing
        self.name = name
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._wall = wall
        self._monotonic = monotonic
        #: The lease while held.
        self.lease: Lease | None = None
        #: The lease as last read while not holding it (who holds it, until when).
        self.seen: Lease | None = None
        self._deadline = 0.0

    async def confirm(self) -> bool:
        """Renew now, whatever the local deadline says; False if the lease is not held after it.

        For the end of a long synchronous stretch that may have outlived the
        deadline (a restore): the loop must not start on a lease that lapsed.
        A patient renewal that waited for its turn keeps the lease but dates it
        from when it was asked for, so it is renewed once more, as :meth:`run`
        does (without that, a restore on SQLite that outlived its TTL kept the
        lease and never started the loop: issue 48, run 20).
        """
        for _ in range(3):
            await self._renew()
            if self.lease is None or self.holds():
                break
        return self.holds()

    def holds(self) -> bool:
        """Whether this process may act as the lease's holder right now (checked before each tick)."""
        return self.lease is not None and self._monotonic() < self._deadline

    async def acquire(self) -> Lease | None:
        """One attempt to take the lease; ``None`` if another holder's lease is live."""
        started = self._monotonic()
        lease = await self.leases.acquire_lease(
            self.name, self.holder, now=_utc(self._wall()), ttl=self.timing.ttl)
        if lease is None:
            self.seen = await self.leases.current_lease(self.name)
            return None
        self.lease, self.seen = lease, None
        self._deadline = started + self.timing.ttl
        log.info("lease_acquired", lease=self.name, holder=self.holder, epoch=lease.epoch,
                 ttl=self.timing.ttl)
        return lease

    async def release(self) -> None:
        """Give the lease up (shutdown): a standby can take it at once instead of after the TTL."""
        lease, self.lease = self.lease, None
        if lease is None:
            return
        try:
            released = await self.leases.release_lease(lease, now=_utc(self._wall()))
        except StorageError as exc:
            log.error("lease_release_failed", lease=self.name, error=str(exc))
            return
        log.info("lease_released", lease=self.name, epoch=lease.epoch, released=released)

    async def run(self) -> None:
        """Renew while holding, campaign while not; for ever (cancel to stop)."""
        while True:
            delay = await (self._campaign() if self.lease is None else self._renew())
            await asyncio.sleep(delay)

    async def _campaign(self) -> float:
        try:
            lease = await self.acquire()
        except StorageError as exc:
            log.warning("lease_campaign_failed", lease=self.name, error=str(exc))
            return self.timing.renew_every
        if lease is None:
            seen = self.seen
            if seen is None or seen.holder is None:
                return _EXPIRY_SLACK_SECONDS
            left = (seen.expires_at - _utc(self._wall())).total_seconds()
            return min(self.timing.renew_every, max(left, 0.0) + _EXPIRY_SLACK_SECONDS)
        try:
            await self._on_elected(lease)
        except Exception:  # a failed takeover (database away mid-restore) must not keep the lease
            log.exception("takeover_failed", lease=self.name, epoch=lease.epoch)
            await self.release()
            return self.timing.renew_every
        return self.timing.renew_every

    async def _renew(self) -> float:
        lease = self.lease
        assert lease is not None
        started = self._monotonic()
        left = self._deadline - started
        if left <= 0:
            # This process stalled past its deadline (a long synchronous stretch such as
            # restoring 100,000 profiles; the loop did not tick meanwhile: holds() refused).
            # A takeover bumps the epoch, so a renewal that still matches (holder, epoch)
            # proves nobody took the lease: keep it. Otherwise step down. The renewal gets a
            # whole TTL: holds() already refuses ticks, and right after a stall the event loop
            # has a backlog that can outlast renew_every (the lease was then lost for nothing).
            left = self.timing.ttl
        renewal = asyncio.ensure_future(
            self.leases.renew_lease(lease, now=_utc(self._wall()), ttl=self.timing.ttl))
        waited = False
        try:
            try:
                renewed, waited = await self._await_renewal(renewal, left)
            except TimeoutError:
                if not self.patient:
                    renewal.cancel()
                    raise
                log.warning("lease_renewal_waits", lease=self.name, seconds=round(left, 3))
                renewed, waited = await renewal, True
            except asyncio.CancelledError:
                # The keeper is stopped while the renewal, shielded from its timeout, is on the
                # wire: stop the renewal too and let it end, or it goes on alone, holding a
                # database connection and renewing a lease nobody keeps any more.
                renewal.cancel()
                await asyncio.wait([renewal])
                raise
        except (StorageError, TimeoutError) as exc:
            if self._monotonic() >= self._deadline:
                await self._depose(f"lease not renewed within its TTL ({exc!s})")
                return 0.0
            log.warning("lease_renewal_failed", lease=self.name, error=str(exc) or "timeout")
            return self.timing.renew_every / 3
        if renewed is None:
            await self._depose("lease taken over by another process")
            return 0.0
        self.lease = renewed
        if waited:
            # Nobody took it meanwhile, but it was renewed from when the renewal was asked
            # for, long ago: renew again at once (the writer waits for holds(), so its lock is
            # free now), and go by that renewal's time.
            return 0.0
        self._deadline = started + self.timing.ttl
        return self.timing.renew_every

    async def _await_renewal(
        self, renewal: asyncio.Future[Lease | None], left: float,
    ) -> tuple[Lease | None, bool]:
        """The renewal's result within ``left`` seconds of the event loop's time; whether it was
        waited for past a stall (raises :class:`TimeoutError` otherwise).

        A stall that begins while a renewal is on the wire (a long synchronous stretch, as
        after the deadline in :meth:`_renew`) fires the timeout as late as the stall ends, in
        the same turn of the loop as the answer that arrived meanwhile: the renewal never had
        its time. A timeout more than ``renew_every`` late is such a stall, and the renewal
        then gets one more TTL (ticks are refused meanwhile: :meth:`holds`); a slow database,
        with the loop running, times out as before.

        ``asyncio.timeout``, not ``wait_for``: CPython 3.11's ``wait_for`` returns the result
        instead of raising when a cancel lands in the turn the awaited completes, and the
        keeper then renews for ever after its task was cancelled (a test's cancel without
        :func:`proxy.aio.cancel_and_wait`'s repeats hung there: issue 48, run 18).
        """
        due = self._monotonic() + left
        try:
            async with asyncio.timeout(left):
                return await asyncio.shield(renewal), False
        except TimeoutError:
            late = self._monotonic() - due
            if late <= self.timing.renew_every:
                raise
            log.warning("lease_renewal_stalled", lease=self.name, late_seconds=round(late, 3))
        async with asyncio.timeout(self.timing.ttl):
            return await asyncio.shield(renewal), True

    async def _depose(self, reason: str) -> None:
        lease, self.lease = self.lease, None
        log.error("lease_lost", lease=self.name, epoch=lease.epoch if lease else None, reason=reason)
        try:
            await self._on_deposed(reason)
        except Exception:  # the campaign must go on whatever stopping the loop ran into
            log.exception("step_down_failed", lease=self.name)
