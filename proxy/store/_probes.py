"""Probes, entries, chronon metrics, service state and retention."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.errors import (
    FeedNotFoundError,
    ValidationError,
)
from proxy.store._base import (
    _ENTRY_COLUMNS,
    SUMMARY_MAX_CHARS,
    _chunks,
    _entry,
    _identity_key,
    _probe,
)
from proxy.store._models import (
    CaptureRow,
    CeiRow,
    ChrononMetricsRow,
    EiRow,
    EntryRow,
    ProbeRow,
    ProfileRow,
    ServiceStateRow,
)
from proxy.store._profiles import ProfilesAndCeis
from proxy.store._types import (
    CapturedEntry,
    CaptureInput,
    CeiStateChange,
    Entry,
    FeedUpdate,
    MetricsSummary,
    NewEntry,
    Probe,
    ProbeInput,
    ProbeRecord,
    ProfileCompleteness,
    PurgeResult,
)


class ProbesAndMetrics(ProfilesAndCeis):
    """Probes and the entries they found, chronon metrics, service state, retention."""

    # --- probes and entries ---------------------------------------------------------

    async def record_probe(
        self,
        probe: ProbeInput,
        entries: Sequence[NewEntry] = (),
        captures: Sequence[CaptureInput] = (),
        cei_changes: Sequence[CeiStateChange] = (),
        feed_update: FeedUpdate | None = None,
    ) -> ProbeRecord:
        """Store everything one probe produced in ONE transaction.

        Inserts the probe, the entries not seen before (by ``(feed_id, identity)``),
        marks the captured EIs (only those still pending) and records their
        captures, applies the CEI state changes and the feed's health update.
        Either all of it is stored or none. EIs/CEIs that no longer exist (their
        profile was deleted meanwhile) are skipped; an EI on another feed is a
        :class:`ValidationError`. Returns the probe id, the identities that were
        new (in input order) and the EIs this probe captured.
        """
        async with self._tx() as conn:
            return await self._record_probe(conn, probe, entries, captures, cei_changes, feed_update)

    async def record_probes(
        self,
        probes: Sequence[
            tuple[
                ProbeInput,
                Sequence[NewEntry],
                Sequence[CaptureInput],
                Sequence[CeiStateChange],
                FeedUpdate | None,
            ]
        ],
    ) -> list[ProbeRecord]:
        """:meth:`record_probe` for several probes in ONE transaction (the service's writer
        groups the probes that finished meanwhile). Either all are stored or none."""
        async with self._tx() as conn:
            return [await self._record_probe(conn, *item) for item in probes]

    async def _record_probe(
        self,
        conn: AsyncConnection,
        probe: ProbeInput,
        entries: Sequence[NewEntry],
        captures: Sequence[CaptureInput],
        cei_changes: Sequence[CeiStateChange],
        feed_update: FeedUpdate | None,
    ) -> ProbeRecord:
        finished = probe.finished_at
        duration = (finished - probe.started_at).total_seconds() if finished is not None else None
        try:
            probe_id = (
                await conn.execute(
                    insert(ProbeRow)
                    .values(
                        feed_id=probe.feed_id,
                        chronon=probe.chronon,
                        started_at=probe.started_at,
                        finished_at=finished,
                        duration_seconds=duration,
                        outcome=probe.outcome[:32],
                        http_status=probe.http_status,
                        error=probe.error,
                        new_entries=0,
                        bytes=probe.bytes,
                    )
                    .returning(ProbeRow.id)
                )
            ).scalar_one()
        except IntegrityError:
            raise FeedNotFoundError(probe.feed_id) from None
        new_identities = await self._insert_new_entries(
            conn, probe.feed_id, probe_id, probe.finished_at or probe.started_at, entries
        )
        if new_identities:
            await conn.execute(
                update(ProbeRow)
                .where(ProbeRow.id == probe_id)
                .values(new_entries=len(new_identities))
            )
        # EIs and CEIs that no longer exist went with their deleted profile while
        # the probe was in flight; that must not lose the probe, so they are skipped.
        captured = [
            capture.ei_id
            for capture in captures
            if await self._capture(
                conn, capture.ei_id, capture.chronon, probe_id, probe.feed_id
            )
        ]
        for change in cei_changes:
            await self._set_cei_state(conn, change, missing_ok=True)
        if feed_update is not None:
            await self._apply_feed_update(conn, probe.feed_id, feed_update)
        return ProbeRecord(
            probe_id=probe_id, new_identities=tuple(new_identities), captured_ei_ids=tuple(captured)
        )

    async def _insert_new_entries(
        self,
        conn: AsyncConnection,
        feed_id: int,
        probe_id: int,
        seen_at: dt.datetime,
        entries: Sequence[NewEntry],
    ) -> list[str]:
        # Deduplicate within the batch first: a feed may repeat an entry.
        by_key: dict[str, NewEntry] = {}
        for entry in entries:
            by_key.setdefault(_identity_key(entry.identity), entry)
        if not by_key:
            return []
        known = await self._known_keys(conn, feed_id, list(by_key))
        fresh = [(key, entry) for key, entry in by_key.items() if key not in known]
        if not fresh:
            return []
        rows = [
            {
                "feed_id": feed_id,
                "identity": key,
                "title": entry.title,
                "link": entry.link,
                "published": entry.published,
                "summary": None if entry.summary is None else entry.summary[:SUMMARY_MAX_CHARS],
                "first_seen_probe_id": probe_id,
                "first_seen_at": seen_at,
            }
            for key, entry in fresh
        ]
        # ON CONFLICT DO NOTHING: a concurrent probe of the same feed may have
        # stored an entry since we looked; it is then not new for us. Executed
        # "many" so SQLAlchemy caches the statement and batches the VALUES
        # itself (insertmanyvalues) instead of compiling a new giant statement.
        stmt = (
            self._insert(conn, EntryRow)
            .on_conflict_do_nothing(index_elements=["feed_id", "identity"])
            .returning(EntryRow.identity)
        )
        inserted = set((await conn.execute(stmt, rows)).scalars().all())
        return [entry.identity for key, entry in fresh if key in inserted]

    async def _known_keys(
        self, conn: AsyncConnection, feed_id: int, keys: Sequence[str]
    ) -> set[str]:
        known: set[str] = set()
        for chunk in _chunks(keys):
            known.update(
                (
                    await conn.execute(
                        select(EntryRow.identity).where(
                            EntryRow.feed_id == feed_id, EntryRow.identity.in_(chunk)
                        )
                    )
                )
                .scalars()
                .all()
            )
        return known

    async def known_identities(self, feed_id: int, identities: Iterable[str]) -> set[str]:
        """Which of ``identities`` the feed has had before (one indexed query per 500)."""
        by_key = {_identity_key(identity): identity for identity in identities}
        async with self._tx() as conn:
            known = await self._known_keys(conn, feed_id, list(by_key))
        return {by_key[key] for key in known}

    async def list_probes(self, feed_id: int, *, limit: int = 50) -> list[Probe]:
        """A feed's most recent probes, newest first."""
        async with self._tx() as conn:
            rows = (
                await conn.execute(
                    select(ProbeRow)
                    .where(ProbeRow.feed_id == feed_id)
                    .order_by(ProbeRow.started_at.desc(), ProbeRow.id.desc())
                    .limit(limit)
                )
            ).all()
        return [_probe(row) for row in rows]

    async def list_entries(self, feed_id: int, *, limit: int = 50, offset: int = 0) -> list[Entry]:
        """A feed's entries, most recently first seen first."""
        async with self._tx() as conn:
            rows = (
                await conn.execute(
                    select(EntryRow)
                    .where(EntryRow.feed_id == feed_id)
                    .order_by(EntryRow.first_seen_at.desc(), EntryRow.id.desc())
                    .limit(limit)
                    .offset(offset)
                )
            ).all()
        return [_entry(row) for row in rows]

    async def captured_entries(
        self, user_id: int, profile_id: int, *, limit: int = 50, offset: int = 0
    ) -> list[CapturedEntry]:
        """Entries first seen by probes that captured EIs of the profile's CEIs, newest first.

        Raises :class:`ProfileNotFoundError` (also for another user's profile).
        """
        stmt = (
            select(
                *_ENTRY_COLUMNS,
                CaptureRow.ei_id.label("capture_ei_id"),
                CaptureRow.chronon.label("capture_chronon"),
                EiRow.cei_id.label("capture_cei_id"),
            )
            .join(CaptureRow, CaptureRow.probe_id == EntryRow.first_seen_probe_id)
            .join(EiRow, EiRow.id == CaptureRow.ei_id)
            .join(CeiRow, CeiRow.id == EiRow.cei_id)
            .where(CeiRow.profile_id == profile_id, EntryRow.feed_id == EiRow.feed_id)
            .order_by(EntryRow.first_seen_at.desc(), EntryRow.id.desc(), CaptureRow.ei_id)
            .limit(limit)
            .offset(offset)
        )
        async with self._tx() as conn:
            await self._owned_profile(conn, user_id, profile_id)
            rows = (await conn.execute(stmt)).all()
        return [
            CapturedEntry(
                entry=_entry(row),
                cei_id=row.capture_cei_id,
                ei_id=row.capture_ei_id,
                chronon=row.capture_chronon,
            )
            for row in rows
        ]

    # --- metrics --------------------------------------------------------------------

    async def record_chronon_metrics(
        self,
        chronon: int,
        *,
        started_at: dt.datetime,
        budget: int,
        used: int,
        captured_ceis: int = 0,
        missed_ceis: int = 0,
        tick_jitter_seconds: float | None = None,
    ) -> None:
        """Store (or overwrite) one chronon's figures."""
        if used < 0 or budget < 0 or used > budget:
            raise ValidationError(f"chronon {chronon}: need 0 ≤ used ({used}) ≤ budget ({budget})")
        values = {
            "started_at": started_at,
            "budget": budget,
            "used": used,
            "captured_ceis": captured_ceis,
            "missed_ceis": missed_ceis,
            "tick_jitter_seconds": tick_jitter_seconds,
        }
        async with self._tx() as conn:
            stmt = self._insert(conn, ChrononMetricsRow).values(chronon=chronon, **values)
            await conn.execute(stmt.on_conflict_do_update(index_elements=["chronon"], set_=values))

    async def last_chronon(self) -> int | None:
        """The newest chronon with recorded figures (the last one the loop ticked), or None."""
        async with self._tx() as conn:
            value = (await conn.execute(select(func.max(ChrononMetricsRow.chronon)))).scalar()
        return None if value is None else int(value)

    async def metrics_summary(self, user_id: int, *, recent_chronons: int = 60) -> MetricsSummary:
        """Completeness of the user's resolved CEIs, overall and per profile, and the budget
        use (sum used / sum budget) over the last ``recent_chronons`` recorded chronons."""
        if recent_chronons < 1:
            raise ValidationError("recent_chronons must be ≥ 1")
        counts = (
            select(
                ProfileRow.id,
                ProfileRow.name,
                CeiRow.state,
                func.count(CeiRow.id).label("n"),
            )
            .outerjoin(CeiRow, CeiRow.profile_id == ProfileRow.id)
            .where(ProfileRow.user_id == user_id)
            .group_by(ProfileRow.id, ProfileRow.name, CeiRow.state)
            .order_by(ProfileRow.id)
        )
        recent = (
            select(ChrononMetricsRow.budget, ChrononMetricsRow.used)
            .order_by(ChrononMetricsRow.chronon.desc())
            .limit(recent_chronons)
            .subquery()
        )
        async with self._tx() as conn:
            rows = (await conn.execute(counts)).all()
            budget_row = (
                await conn.execute(
                    select(
                        func.count(),
                        func.coalesce(func.sum(recent.c.used), 0),
                        func.coalesce(func.sum(recent.c.budget), 0),
                    )
                )
            ).one()
        per: dict[int, dict[str, Any]] = {}
        for row in rows:
            item = per.setdefault(
                row.id, {"name": row.name, "captured": 0, "missed": 0, "pending": 0}
            )
            if row.state is not None:
                item[row.state] = int(row.n)
        profiles = tuple(
            ProfileCompleteness(
                profile_id=pid,
                name=item["name"],
                captured=item["captured"],
                missed=item["missed"],
                pending=item["pending"],
            )
            for pid, item in per.items()
        )
        return MetricsSummary(
            captured=sum(p.captured for p in profiles),
            missed=sum(p.missed for p in profiles),
            pending=sum(p.pending for p in profiles),
            profiles=profiles,
            chronons=int(budget_row[0]),
            budget_used=int(budget_row[1]),
            budget_total=int(budget_row[2]),
        )

    # --- service state --------------------------------------------------------------

    async def get_state(self, key: str, default: Any = None) -> Any:
        """A stored JSON value, or ``default``."""
        async with self._tx() as conn:
            row = (
                await conn.execute(select(ServiceStateRow.value).where(ServiceStateRow.key == key))
            ).first()
        return default if row is None else row.value

    async def set_state(self, key: str, value: Any) -> None:
        """Store a JSON value under ``key`` (overwrites)."""
        now = self._clock()
        async with self._tx() as conn:
            stmt = self._insert(conn, ServiceStateRow).values(key=key, value=value, updated_at=now)
            await conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["key"], set_={"value": value, "updated_at": now}
                )
            )

    # --- retention ------------------------------------------------------------------

    async def purge_older_than(
        self, cutoff: dt.datetime, *, batch_size: int = 1_000
    ) -> PurgeResult:
        """Delete probes started and entries first seen before ``cutoff``, in batches (one
        transaction each, so the service's writes interleave).

        Kept: probes that captured an EI, and the entries those probes first saw
        (a profile's captured entries stay readable). A purged entry that is
        still in its feed would count as new again, so ``cutoff`` should be
        well beyond any feed's window of entries.
        """
        if batch_size < 1:
            raise ValidationError("batch_size must be ≥ 1")
        capturing = select(CaptureRow.probe_id)
        entries_total = 0
        while True:
            async with self._tx() as conn:
                ids = (
                    (
                        await conn.execute(
                            select(EntryRow.id)
                            .where(
                                EntryRow.first_seen_at < cutoff,
                                (EntryRow.first_seen_probe_id.is_(None))
                                | (EntryRow.first_seen_probe_id.not_in(capturing)),
                            )
                            .limit(batch_size)
                        )
                    )
                    .scalars()
                    .all()
                )
                if ids:
                    await conn.execute(delete(EntryRow).where(EntryRow.id.in_(ids)))
            entries_total += len(ids)
            if len(ids) < batch_size:
                break
        probes_total = 0
        while True:
            async with self._tx() as conn:
                ids = (
                    (
                        await conn.execute(
                            select(ProbeRow.id)
                            .where(ProbeRow.started_at < cutoff, ProbeRow.id.not_in(capturing))
                            .limit(batch_size)
                        )
                    )
                    .scalars()
                    .all()
                )
                if ids:
                    await conn.execute(delete(ProbeRow).where(ProbeRow.id.in_(ids)))
            probes_total += len(ids)
            if len(ids) < batch_size:
                break
        return PurgeResult(probes=probes_total, entries=entries_total)
