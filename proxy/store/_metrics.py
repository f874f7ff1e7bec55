"""Chronon metrics, the service's state, retention: the store's bookkeeping over time."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from sqlalchemy import (
    delete,
    func,
    select,
)

from proxy.errors import (
    ValidationError,
)
from proxy.store._models import (
    CaptureRow,
    CeiRow,
    ChrononMetricsRow,
    EntryRow,
    ProbeRow,
    ProfileRow,
    ServiceStateRow,
)
from proxy.store._probes import Probes
from proxy.store._types import (
    ChrononFigures,
    MetricsSummary,
    ProfileCompleteness,
    PurgeResult,
)


def _params(rows: list[dict[str, Any]]) -> dict[str, Any] | list[dict[str, Any]]:
    """One row executes as a plain statement, several as "executemany" (cheaper for one)."""
    return rows[0] if len(rows) == 1 else rows


class MetricsAndRetention(Probes):
    """Per-chronon figures and summaries, the service's key-value state, and retention."""

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
                CeiRow.fired,
                func.count(CeiRow.id).label("n"),
            )
            .outerjoin(CeiRow, CeiRow.profile_id == ProfileRow.id)
            .where(ProfileRow.user_id == user_id)
            .group_by(ProfileRow.id, ProfileRow.name, CeiRow.state, CeiRow.fired)
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
                row.id,
                {"name": row.name, "captured": 0, "missed": 0, "pending": 0,
                 "fired": 0, "not_fired": 0, "captured_fired": 0},
            )
            if row.state is not None:
                n = int(row.n)
                item[row.state] += n
                item["fired" if row.fired else "not_fired"] += n
                if row.fired and row.state == "captured":
                    item["captured_fired"] += n
        profiles = tuple(
            ProfileCompleteness(
                profile_id=pid,
                name=item["name"],
                captured=item["captured"],
                missed=item["missed"],
                pending=item["pending"],
                fired=item["fired"],
                not_fired=item["not_fired"],
                captured_fired=item["captured_fired"],
            )
            for pid, item in per.items()
        )
        return MetricsSummary(
            captured=sum(p.captured for p in profiles),
            missed=sum(p.missed for p in profiles),
            pending=sum(p.pending for p in profiles),
            fired=sum(p.fired for p in profiles),
            not_fired=sum(p.not_fired for p in profiles),
            captured_fired=sum(p.captured_fired for p in profiles),
            profiles=profiles,
            chronons=int(budget_row[0]),
            budget_used=int(budget_row[1]),
            budget_total=int(budget_row[2]),
        )

    async def recent_chronons(self, limit: int = 60) -> list[ChrononFigures]:
        """The last ``limit`` recorded chronons, oldest first (the budget is the proxy's,
        shared by every user: these figures name no user's objects)."""
        if limit < 1:
            raise ValidationError("limit must be ≥ 1")
        async with self._tx() as conn:
            rows = (
                await conn.execute(
                    select(ChrononMetricsRow).order_by(ChrononMetricsRow.chronon.desc()).limit(limit)
                )
            ).all()
        return [
            ChrononFigures(chronon=r.chronon, started_at=r.started_at, budget=r.budget, used=r.used,
                           captured_ceis=r.captured_ceis, missed_ceis=r.missed_ceis)
            for r in reversed(rows)
        ]

    async def resolutions(self, user_id: int) -> list[tuple[int, int, int]]:
        """``(chronon, captured, missed)`` per chronon at which the user's CEIs were resolved,
        oldest first: the steps of the user's completeness over time."""
        stmt = (
            select(CeiRow.resolved_chronon, CeiRow.state, func.count(CeiRow.id))
            .join(ProfileRow, ProfileRow.id == CeiRow.profile_id)
            .where(ProfileRow.user_id == user_id, CeiRow.resolved_chronon.is_not(None),
                   CeiRow.state.in_(("captured", "missed")))
            .group_by(CeiRow.resolved_chronon, CeiRow.state)
            .order_by(CeiRow.resolved_chronon)
        )
        async with self._tx() as conn:
            rows = (await conn.execute(stmt)).all()
        steps: dict[int, list[int]] = {}
        for chronon, state, n in rows:
            step = steps.setdefault(int(cast(int, chronon)), [0, 0])
            step[0 if state == "captured" else 1] += int(n)
        return [(c, cap, miss) for c, (cap, miss) in steps.items()]

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
