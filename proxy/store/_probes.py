"""Probes, entries, chronon metrics, service state and retention."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any, cast

from sqlalchemy import (
    Table,
    and_,
    bindparam,
    case,
    func,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.errors import (
    FeedNotFoundError,
    ValidationError,
)
from proxy.store._base import (
    _ENTRY_COLUMNS,
    SUCCESS_PROBE_OUTCOMES,
    SUMMARY_MAX_CHARS,
    _among,
    _check_state,
    _chunks,
    _entry,
    _identity_key,
    _probe,
)
from proxy.store._ceis import Ceis
from proxy.store._feeds import consecutive_errors_after, feed_health_values
from proxy.store._models import (
    CaptureRow,
    CeiRow,
    ChrononMetricsRow,
    DeliveryRow,
    EiRow,
    EntryRow,
    FeedRow,
    ProbeRow,
)
from proxy.store._types import (
    TARGET_DISABLED_ERROR,
    CapturedEntry,
    CaptureInput,
    CeiStateChange,
    Entry,
    FeedActivity,
    FeedUpdate,
    MetricTotals,
    NewEntry,
    Probe,
    ProbeInput,
    ProbeItem,
    ProbeRecord,
    delivery_outcome_totals,
)


def _params(rows: list[dict[str, Any]]) -> dict[str, Any] | list[dict[str, Any]]:
    """One row executes as a plain statement, several as "executemany" (cheaper for one)."""
    return rows[0] if len(rows) == 1 else rows


class Probes(Ceis):
    """Probes and the entries they found: recorded, captured, read."""

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
        (record,) = await self.record_probes([(probe, entries, captures, cei_changes, feed_update)])
        return record

    async def record_probes(self, probes: Sequence[ProbeItem]) -> list[ProbeRecord]:
        """:meth:`record_probe` for several probes in ONE transaction (the service's writer
        groups the probes that finished meanwhile). Either all are stored or none.

        The result is exactly that of recording them one by one in the given order
        (an entry is new for the first probe of its feed that has it; an EI is captured
        by the first probe that names it while it is pending), but each kind of row is
        written by one statement for the whole batch: on PostgreSQL every statement is
        a round trip, and on both backends SQLAlchemy's per-statement cost dominated.
        """
        if not probes:
            return []
        for _, _, _, changes, _ in probes:
            for change in changes:
                _check_state(change.state)
        try:
            async with self._tx() as conn:
                return await self._record_probes(conn, probes)
        except FeedNotFoundError:
            feed_ids = list(dict.fromkeys(item[0].feed_id for item in probes))
            if len(feed_ids) > 1:  # name the feed that is missing, not just the first one
                async with self._tx() as conn:
                    query = select(FeedRow.id).where(FeedRow.id.in_(feed_ids))
                    existing = set((await conn.execute(query)).scalars())
                missing = [feed_id for feed_id in feed_ids if feed_id not in existing]
                if missing:
                    raise FeedNotFoundError(missing[0]) from None
            raise

    async def _record_probes(
        self, conn: AsyncConnection, items: Sequence[ProbeItem]
    ) -> list[ProbeRecord]:
        feed_ids = list(dict.fromkeys(item[0].feed_id for item in items))
        # Entries: which are new, and for which probe (the first of its feed in the batch).
        wanted: list[dict[str, NewEntry]] = []
        for _, entries, _, _, _ in items:
            by_key: dict[str, NewEntry] = {}
            for entry in entries:
                by_key.setdefault(_identity_key(entry.identity), entry)
            wanted.append(by_key)
        pairs = {
            (item[0].feed_id, key): None
            for item, by_key in zip(items, wanted, strict=True)
            for key in by_key
        }
        claimed = await self._known_pairs(conn, list(pairs))
        fresh: list[list[tuple[str, NewEntry]]] = []
        for item, by_key in zip(items, wanted, strict=True):
            feed_id = item[0].feed_id
            mine = [(key, entry) for key, entry in by_key.items() if (feed_id, key) not in claimed]
            claimed.update((feed_id, key) for key, _ in mine)
            fresh.append(mine)

        probe_rows = []
        for item, mine in zip(items, fresh, strict=True):
            probe = item[0]
            finished = probe.finished_at
            probe_rows.append({
                "feed_id": probe.feed_id,
                "chronon": probe.chronon,
                "started_at": probe.started_at,
                "finished_at": finished,
                "duration_seconds": (
                    (finished - probe.started_at).total_seconds() if finished is not None else None
                ),
                "outcome": probe.outcome[:32],
                "http_status": probe.http_status,
                "error": probe.error,
                "new_entries": len(mine),
                "bytes": probe.bytes,
            })
        probes = cast(Table, ProbeRow.__table__)
        try:
            probe_ids = list(
                (
                    await conn.execute(
                        insert(probes).returning(probes.c.id, sort_by_parameter_order=True),
                        _params(probe_rows),
                    )
                ).scalars()
            )
        except IntegrityError:
            # The only constraint a new probe row can break is its feed's foreign key.
            raise FeedNotFoundError(feed_ids[0]) from None

        new_identities = await self._insert_fresh_entries(conn, items, fresh, probe_ids)
        captured = await self._capture_all(conn, items, probe_ids)
        await self._apply_cei_changes(conn, [c for item in items for c in item[3]])
        await self._apply_feed_updates(conn, items)
        return [
            ProbeRecord(probe_id=pid, new_identities=tuple(new), captured_ei_ids=tuple(cap))
            for pid, new, cap in zip(probe_ids, new_identities, captured, strict=True)
        ]

    async def _known_pairs(
        self, conn: AsyncConnection, pairs: Sequence[tuple[int, str]]
    ) -> set[tuple[int, str]]:
        """Which ``(feed_id, stored identity)`` pairs the entries table already holds: one
        indexed query per 500 pairs, whatever the number of feeds (``feed_id IN (…) AND
        identity IN (…)`` reads a superset, which is filtered here)."""
        known: set[tuple[int, str]] = set()
        entries = cast(Table, EntryRow.__table__)
        for chunk in _chunks(pairs):
            wanted = set(chunk)
            query = select(entries.c.feed_id, entries.c.identity).where(
                _among(conn, entries.c.feed_id, sorted({feed_id for feed_id, _ in chunk})),
                _among(conn, entries.c.identity, sorted({key for _, key in chunk})),
            )
            known.update(
                pair for pair in map(tuple, await conn.execute(query)) if pair in wanted
            )
        return known

    async def _insert_fresh_entries(
        self,
        conn: AsyncConnection,
        items: Sequence[ProbeItem],
        fresh: list[list[tuple[str, NewEntry]]],
        probe_ids: list[int],
    ) -> list[list[str]]:
        """Insert every probe's fresh entries in one statement; the identities each probe
        really stored (a concurrent transaction may have stored some first)."""
        rows = [
            {
                "feed_id": item[0].feed_id,
                "identity": key,
                "title": entry.title,
                "link": entry.link,
                "published": entry.published,
                "summary": None if entry.summary is None else entry.summary[:SUMMARY_MAX_CHARS],
                "first_seen_probe_id": probe_id,
                "first_seen_at": item[0].finished_at or item[0].started_at,
            }
            for item, mine, probe_id in zip(items, fresh, probe_ids, strict=True)
            for key, entry in mine
        ]
        if not rows:
            return [[] for _ in items]
        # ON CONFLICT DO NOTHING: a concurrent probe of the same feed may have stored an
        # entry since we looked; it is then not new for us. Executed "many" so SQLAlchemy
        # caches the statement and batches the VALUES itself (insertmanyvalues).
        table = cast(Table, EntryRow.__table__)
        stmt = (
            self._insert(conn, table)
            .on_conflict_do_nothing(index_elements=["feed_id", "identity"])
            .returning(table.c.feed_id, table.c.identity)
        )
        inserted = {(row.feed_id, row.identity) for row in await conn.execute(stmt, _params(rows))}
        result: list[list[str]] = []
        corrections = []
        for item, mine, probe_id in zip(items, fresh, probe_ids, strict=True):
            feed_id = item[0].feed_id
            stored = [entry.identity for key, entry in mine if (feed_id, key) in inserted]
            if len(stored) != len(mine):
                corrections.append({"b_id": probe_id, "b_new": len(stored)})
            result.append(stored)
        if corrections:
            probes = cast(Table, ProbeRow.__table__)
            await conn.execute(
                update(probes)
                .where(probes.c.id == bindparam("b_id"))
                .values(new_entries=bindparam("b_new")),
                _params(corrections),
            )
        return result

    async def _capture_all(
        self, conn: AsyncConnection, items: Sequence[ProbeItem], probe_ids: list[int]
    ) -> list[list[int]]:
        """Capture the pending EIs the probes name, in order; the EI ids each captured.

        EIs that no longer exist (their profile was deleted while the probe was in
        flight) are skipped: that must not lose the probe. An EI of a CEI that an
        earlier probe of the batch resolved as missed is not pending any more.
        """
        ei_ids = list(dict.fromkeys(c.ei_id for item in items for c in item[2]))
        if not ei_ids:
            return [[] for _ in items]
        eis = cast(Table, EiRow.__table__)
        info: dict[int, tuple[int, str, str]] = {}
        for chunk in _chunks(ei_ids):
            query = select(eis.c.id, eis.c.feed_id, eis.c.cei_id, eis.c.state).where(
                _among(conn, eis.c.id, chunk)
            )
            if conn.dialect.name == "postgresql":
                query = query.with_for_update()
            for row in await conn.execute(query):
                info[row.id] = (row.feed_id, row.cei_id, row.state)
        missed: set[str] = set()
        updates: list[dict[str, Any]] = []
        result: list[list[int]] = []
        for (probe, _, captures, changes, _), probe_id in zip(items, probe_ids, strict=True):
            mine = []
            for capture in captures:
                found = info.get(capture.ei_id)
                if found is None:
                    continue
                feed_id, cei_id, state = found
                if feed_id != probe.feed_id:
                    # A probe of one feed cannot capture an EI on another: the caller mixed
                    # them up. Raising rolls the whole transaction back.
                    raise ValidationError(
                        f"EI {capture.ei_id} is on feed {feed_id}; "
                        f"a probe of feed {probe.feed_id} cannot capture it"
                    )
                if state != "pending" or cei_id in missed:
                    continue
                info[capture.ei_id] = (feed_id, cei_id, "captured")
                updates.append(
                    {"b_id": capture.ei_id, "b_chronon": capture.chronon, "b_probe": probe_id}
                )
                mine.append(capture.ei_id)
            missed.update(c.cei_id for c in changes if c.state == "missed")
            result.append(mine)
        if updates:
            await conn.execute(
                update(eis)
                .where(eis.c.id == bindparam("b_id"), eis.c.state == "pending")
                .values(
                    state="captured",
                    captured_chronon=bindparam("b_chronon"),
                    captured_probe_id=bindparam("b_probe"),
                ),
                _params(updates),
            )
            await conn.execute(
                insert(cast(Table, CaptureRow.__table__)),
                _params([
                    {"ei_id": u["b_id"], "probe_id": u["b_probe"], "chronon": u["b_chronon"]}
                    for u in updates
                ]),
            )
        return result

    async def resolve_ceis(self, changes: Sequence[CeiStateChange]) -> None:
        """Resolve CEIs in order, in ONE transaction; CEIs that no longer exist (their profile
        was deleted) are skipped. A missed CEI's pending EIs become missed too."""
        for change in changes:
            _check_state(change.state)
        if changes:
            async with self._tx() as conn:
                await self._apply_cei_changes(conn, changes)

    async def _apply_cei_changes(
        self, conn: AsyncConnection, changes: Sequence[CeiStateChange]
    ) -> None:
        """CEI state changes in order (CEIs that no longer exist are skipped); the pending
        EIs of a missed CEI become missed."""
        if not changes:
            return
        before = await self._cei_states(conn, [c.cei_id for c in changes])
        ceis = cast(Table, CeiRow.__table__)
        await conn.execute(
            update(ceis)
            .where(ceis.c.id == bindparam("b_id"))
            .values(state=bindparam("b_state"), resolved_chronon=bindparam("b_chronon")),
            _params([
                {"b_id": c.cei_id, "b_state": c.state, "b_chronon": c.resolved_chronon}
                for c in changes
            ]),
        )
        missed = list(dict.fromkeys(c.cei_id for c in changes if c.state == "missed"))
        eis = cast(Table, EiRow.__table__)
        for chunk in _chunks(missed):
            await conn.execute(
                update(eis)
                .where(_among(conn, eis.c.cei_id, chunk), eis.c.state == "pending")
                .values(state="missed")
            )
        # The outbox: the notifications of these resolutions, in this same transaction.
        await self._write_events(conn, changes, before)

    async def _apply_feed_updates(self, conn: AsyncConnection, items: Sequence[ProbeItem]) -> None:
        """The feeds' health updates, as if applied one by one in order.

        Updates are applied in rounds: round r holds the r-th update of each feed, so a
        feed's updates keep their order while a round's updates (one per feed) share a
        statement per shape (the columns come from :func:`feed_health_values`, shared with
        the one-feed path). A redirect takes the one-feed path.
        """
        occurrences: dict[int, int] = {}
        rounds: list[list[tuple[int, FeedUpdate]]] = []
        for probe, _, _, _, change in items:
            if change is None:
                continue
            r = occurrences.get(probe.feed_id, 0)
            occurrences[probe.feed_id] = r + 1
            if r == len(rounds):
                rounds.append([])
            rounds[r].append((probe.feed_id, change))
        feeds = cast(Table, FeedRow.__table__)
        for updates in rounds:
            # One statement per shape: the columns set, and whether the error count grows.
            shapes: dict[tuple[tuple[str, ...], bool], list[dict[str, Any]]] = {}
            for feed_id, change in updates:
                if change.new_url is not None:  # needs its own query for a URL clash
                    await self._apply_feed_update(conn, feed_id, change)
                    continue
                values = feed_health_values(change)
                row = {f"b_{column}": value for column, value in values.items()}
                row["b_id"] = feed_id
                shapes.setdefault((tuple(values), change.error), []).append(row)
            for (columns, error), rows in shapes.items():
                stmt = (
                    update(feeds)
                    .where(feeds.c.id == bindparam("b_id"))
                    .values({column: bindparam(f"b_{column}") for column in columns})
                    .values(consecutive_errors=consecutive_errors_after(error))
                )
                await conn.execute(stmt, _params(rows))

    async def _known_keys(
        self, conn: AsyncConnection, feed_id: int, keys: Sequence[str]
    ) -> set[str]:
        known: set[str] = set()
        for chunk in _chunks(keys):
            known.update(
                (
                    await conn.execute(
                        select(EntryRow.identity).where(
                            EntryRow.feed_id == feed_id, _among(conn, EntryRow.identity, chunk)
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

    async def feed_activity(self, feed_id: int, *, recent: int = 20) -> FeedActivity:
        """A feed's probe and entry counts, its last successful probe and its ``recent``
        newest probes (the index on ``(feed_id, started_at)`` serves each query).

        The probe loop writes meanwhile, and SQLite's statements need not share one
        snapshot: the recent probes are read first, so the counts and the last
        success read after them are never older than what they show.
        """
        if recent < 0:
            raise ValidationError("recent must be ≥ 0")
        successes = SUCCESS_PROBE_OUTCOMES
        async with self._tx() as conn:
            rows = (await conn.execute(
                select(ProbeRow).where(ProbeRow.feed_id == feed_id)
                .order_by(ProbeRow.started_at.desc(), ProbeRow.id.desc()).limit(recent))).all()
            probes = (await conn.execute(
                select(func.count()).select_from(ProbeRow).where(ProbeRow.feed_id == feed_id))).scalar_one()
            entries = (await conn.execute(
                select(func.count()).select_from(EntryRow).where(EntryRow.feed_id == feed_id))).scalar_one()
            last_success = (await conn.execute(
                select(func.max(ProbeRow.started_at))
                .where(ProbeRow.feed_id == feed_id, ProbeRow.outcome.in_(successes)))).scalar()
        shown = tuple(_probe(row) for row in rows)
        return FeedActivity(
            probes=max(int(probes), len(shown)), entries=int(entries), last_success_at=last_success,
            recent=shown,
        )

    async def metric_totals(self) -> MetricTotals:
        """Probes by outcome, the budget sums, CEIs by state and delivery outcomes: four
        aggregate queries."""
        async with self._tx() as conn:
            probes = {str(o): int(n) for o, n in await conn.execute(
                select(ProbeRow.outcome, func.count()).group_by(ProbeRow.outcome))}
            used, offered = (await conn.execute(select(
                func.coalesce(func.sum(ChrononMetricsRow.used), 0),
                func.coalesce(func.sum(ChrononMetricsRow.budget), 0)))).one()
            ceis = {str(s): int(n) for s, n in await conn.execute(
                select(CeiRow.state, func.count()).group_by(CeiRow.state))}
            deliveries = {str(s): (int(n), int(a or 0), int(g or 0), int(d or 0)) for s, n, a, g, d in
                          await conn.execute(select(
                              DeliveryRow.state, func.count(), func.sum(DeliveryRow.attempts),
                              func.sum(case((DeliveryRow.last_status == 410, 1), else_=0)),
                              func.sum(case((DeliveryRow.last_error.startswith(TARGET_DISABLED_ERROR), 1),
                                            else_=0)),
                          ).group_by(DeliveryRow.state))}
        return MetricTotals(probes=probes, budget_used=int(used), budget_offered=int(offered), ceis=ceis,
                            deliveries=delivery_outcome_totals(deliveries))

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
        self,
        user_id: int,
        profile_id: int,
        *,
        limit: int = 50,
        offset: int = 0,
        before: tuple[int, int] | None = None,
        after: tuple[int, int] | None = None,
        since: dt.datetime | None = None,
    ) -> list[CapturedEntry]:
        """Entries first seen by probes that captured EIs of the profile's CEIs, newest
        first by ``(entry id, EI id)`` (entry ids grow in first-seen order), or oldest first
        with ``after`` or ``since``: those after the ``(entry id, EI id)`` position, first
        seen at or after ``since``. ``before`` pages the newest-first order (keyset).

        Raises :class:`ProfileNotFoundError` (also for another user's profile).
        """
        oldest_first = after is not None or since is not None
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
            .order_by(
                *((EntryRow.id, CaptureRow.ei_id) if oldest_first
                  else (EntryRow.id.desc(), CaptureRow.ei_id))
            )
            .limit(limit)
            .offset(offset)
        )
        if before is not None:  # newest entry first, then its EIs in order
            stmt = stmt.where(or_(EntryRow.id < before[0],
                                  and_(EntryRow.id == before[0], CaptureRow.ei_id > before[1])))
        if after is not None:
            stmt = stmt.where(tuple_(EntryRow.id, CaptureRow.ei_id) > tuple_(*after))
        if since is not None:
            stmt = stmt.where(EntryRow.first_seen_at >= since)
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
