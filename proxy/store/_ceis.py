"""The CEIs and EIs the rules released, their states and captures (user-scoped reads report other users' objects as missing)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Table,
    and_,
    bindparam,
    func,
    insert,
    select,
    tuple_,
    update,
)
from sqlalchemy import cast as cast_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.errors import (
    ConflictError,
    NotFoundError,
    ProfileNotFoundError,
    ValidationError,
)
from proxy.store._base import (
    SUCCESS_PROBE_OUTCOMES,
    _among,
    _check_state,
    _chunks,
    _ei,
)
from proxy.store._models import (
    CaptureRow,
    CeiRow,
    EiRow,
    NotificationEventRow,
    ProbeRow,
    ProfileRow,
    RuleRow,
)
from proxy.store._profiles import Profiles
from proxy.store._types import (
    MAX_MATCHED_PER_CEI,
    Cei,
    CeiState,
    CeiStateChange,
    Ei,
    MatchedRecord,
    NewEi,
    RuleInput,
)


class Ceis(Profiles):
    """The CEIs and EIs the rules released: added, sealed, captured, resolved and read."""

    async def add_cei(
        self,
        cei_id: str,
        profile_id: int,
        release: int,
        eis: Sequence[NewEi] = (),
        *,
        rule_id: int | None = None,
        sealed: bool = True,
        fired: bool = False,
        matched: Sequence[MatchedRecord] = (),
    ) -> Cei:
        """Store a new pending CEI with its EIs. ``sealed=False`` marks a CEI that may still
        grow (:meth:`add_ei`, then :meth:`seal_cei`); ``matched``: the entries that made it
        fire (a watch rule's with a ``when``). Raises :class:`ConflictError` for a
        duplicate id, :class:`ProfileNotFoundError` / :class:`FeedNotFoundError`, and
        :class:`NotFoundError` for a ``rule_id`` that is not one of the profile's rules."""
        async with self._tx() as conn:
            if (
                await conn.execute(select(ProfileRow.id).where(ProfileRow.id == profile_id))
            ).first() is None:
                raise ProfileNotFoundError(profile_id)
            if (
                rule_id is not None
                and (
                    await conn.execute(
                        select(RuleRow.id).where(
                            RuleRow.id == rule_id, RuleRow.profile_id == profile_id
                        )
                    )
                ).first()
                is None
            ):
                raise NotFoundError("rule", rule_id)
            try:
                await conn.execute(
                    insert(CeiRow).values(
                        id=cei_id,
                        profile_id=profile_id,
                        rule_id=rule_id,
                        release=release,
                        sealed=sealed,
                        fired=fired,
                        state="pending",
                        created_at=self._clock(),
                        matched=_matched_json(matched),
                    )
                )
            except IntegrityError:
                raise ConflictError(f"CEI {cei_id!r} already exists") from None
            await self._insert_eis(conn, cei_id, eis)
            return (await self._load_ceis(conn, CeiRow.id == cei_id))[0]

    async def add_ceis(
        self,
        ceis: Sequence[tuple[str, int, int | None, int, bool, Sequence[NewEi]]],
        *,
        fired: Collection[str] = (),
        matched: Mapping[str, Sequence[MatchedRecord]] | None = None,
    ) -> dict[str, dict[int, int]]:
        """Store many new pending CEIs ``(id, profile_id, rule_id, release, sealed, eis)`` in ONE
        transaction (the service opens thousands per chronon). CEIs whose profile no longer
        exists are skipped; ``fired`` names the CEIs that open fired (a watch rule's), and
        ``matched`` gives, by CEI id, the entries that made them fire; returns the stored EI ids by CEI id and ordinal. Raises
        :class:`ConflictError` for a duplicate CEI id (nothing is stored then)."""
        if not ceis:
            return {}
        now = self._clock()
        out: dict[str, dict[int, int]] = {}
        async with self._tx() as conn:
            profiles = {c[1] for c in ceis}
            alive = set(
                (
                    await conn.execute(select(ProfileRow.id).where(_among(conn, ProfileRow.id, profiles)))
                ).scalars()
            )
            kept = [c for c in ceis if c[1] in alive]
            if not kept:
                return {}
            rules = {c[2] for c in kept if c[2] is not None}
            live_rules = set(
                (await conn.execute(select(RuleRow.id).where(_among(conn, RuleRow.id, rules)))).scalars()
            ) if rules else set()
            try:
                await conn.execute(insert(CeiRow), [
                    {"id": cid, "profile_id": pid, "rule_id": rid if rid in live_rules else None,
                     "release": release, "sealed": sealed, "fired": cid in fired, "state": "pending",
                     "created_at": now, "matched": _matched_json((matched or {}).get(cid, ()))}
                    for cid, pid, rid, release, sealed, _ in kept
                ])
            except IntegrityError:
                raise ConflictError("one of these CEI ids already exists") from None
            rows = [
                {"cei_id": cid, "ordinal": ei.ordinal, "feed_id": ei.feed_id, "start": ei.start,
                 "finish": ei.finish, "reveal": ei.reveal, "state": "pending"}
                for cid, _, _, _, _, eis in kept for ei in eis
            ]
            if rows:
                # The new CEIs' EIs are all new: the INSERT returns their ids (one statement
                # instead of an INSERT and a SELECT per 500 CEIs).
                for row in await conn.execute(
                    insert(EiRow).returning(EiRow.id, EiRow.cei_id, EiRow.ordinal), rows
                ):
                    out.setdefault(row.cei_id, {})[row.ordinal] = row.id
        return out

    async def add_eis(
        self, eis: Sequence[tuple[str, NewEi]], seal: Sequence[str] = (),
        *, fired: Sequence[str] = (),
        matched: Mapping[str, Sequence[MatchedRecord]] | None = None,
    ) -> dict[str, dict[int, int]]:
        """Add EIs to existing CEIs and seal CEIs, in ONE transaction; EIs of CEIs that no
        longer exist are skipped; a CEI that gains an EI has fired (its condition held), and
        so has each of ``fired`` (single-feed alerts, which fire by their seal); ``matched``
        adds, by CEI id, entries that made it fire to those it has.
        Returns the stored EI ids by CEI id and ordinal. Raises
        :class:`ConflictError` if an ordinal is taken (nothing is stored then)."""
        out: dict[str, dict[int, int]] = {}
        cei_ids = list({cid for cid, _ in eis} | set(seal) | set(matched or ()))
        if not cei_ids:
            return out
        async with self._tx() as conn:
            alive: set[str] = set()
            for chunk in _chunks(cei_ids):
                alive.update((await conn.execute(select(CeiRow.id).where(_among(conn, CeiRow.id, chunk)))).scalars())
            rows = [
                {"cei_id": cid, "ordinal": ei.ordinal, "feed_id": ei.feed_id, "start": ei.start,
                 "finish": ei.finish, "reveal": ei.reveal, "state": "pending"}
                for cid, ei in eis if cid in alive
            ]
            if rows:
                try:
                    await conn.execute(insert(EiRow), rows)
                except IntegrityError:
                    raise ConflictError("an EI ordinal is already taken") from None
            grown = sorted({cid for cid, _ in eis if cid in alive} | {c for c in fired if c in alive})
            for chunk in _chunks(grown):
                await conn.execute(update(CeiRow).where(_among(conn, CeiRow.id, chunk)).values(fired=True))
            sealed = [cid for cid in seal if cid in alive]
            for chunk in _chunks(sealed):
                await conn.execute(update(CeiRow).where(_among(conn, CeiRow.id, chunk)).values(sealed=True))
            await self._tell_matched(conn, {c: m for c, m in (matched or {}).items() if c in alive})
            touched = sorted({cid for cid, _ in eis if cid in alive})
            for chunk in _chunks(touched):
                for row in await conn.execute(
                    select(EiRow.id, EiRow.cei_id, EiRow.ordinal).where(_among(conn, EiRow.cei_id, chunk))
                ):
                    out.setdefault(row.cei_id, {})[row.ordinal] = row.id
        return out

    async def add_ei(
        self, cei_id: str, ei: NewEi, *, matched: Sequence[MatchedRecord] = ()
    ) -> Ei:
        """Add one EI to an existing CEI, which has then fired (its rule's condition held);
        ``matched``: entries that made it fire, added to those it has.
        Raises :class:`NotFoundError` / :class:`ConflictError` (ordinal taken)."""
        async with self._tx() as conn:
            if (await conn.execute(select(CeiRow.id).where(CeiRow.id == cei_id))).first() is None:
                raise NotFoundError("CEI", cei_id)
            await self._insert_eis(conn, cei_id, [ei])
            await conn.execute(update(CeiRow).where(CeiRow.id == cei_id).values(fired=True))
            await self._tell_matched(conn, {cei_id: matched})
            row = (
                await conn.execute(
                    select(EiRow).where(EiRow.cei_id == cei_id, EiRow.ordinal == ei.ordinal)
                )
            ).one()
        return _ei(row)

    async def seal_cei(
        self, cei_id: str, *, fired: bool = False, matched: Sequence[MatchedRecord] = ()
    ) -> None:
        """Mark a CEI complete: no more EIs will be added; ``fired``: and its rule fired,
        ``matched`` telling on which entries (added to those it has)."""
        values: dict[str, bool] = {"sealed": True, **({"fired": True} if fired else {})}
        async with self._tx() as conn:
            result = await conn.execute(
                update(CeiRow).where(CeiRow.id == cei_id).values(**values)
            )
            if not result.rowcount:
                raise NotFoundError("CEI", cei_id)
            await self._tell_matched(conn, {cei_id: matched})

    async def _tell_matched(
        self, conn: AsyncConnection, matched: Mapping[str, Sequence[MatchedRecord]]
    ) -> None:
        """Add entries that made CEIs fire to those each has (at most MAX_MATCHED_PER_CEI kept,
        the first told). A read then a write per CEI: only CEIs that fire with entries told."""
        told = {c: m for c, m in matched.items() if m}
        if not told:
            return
        have: dict[str, list[Any]] = {}
        for chunk in _chunks(sorted(told)):
            for row in await conn.execute(
                select(CeiRow.id, CeiRow.matched).where(_among(conn, CeiRow.id, chunk))
            ):
                have[row.id] = list(row.matched or [])
        rows = [
            {"b_id": c, "b_matched": (have[c] + [m.to_json() for m in told[c]])[:MAX_MATCHED_PER_CEI]}
            for c in sorted(told) if c in have and len(have[c]) < MAX_MATCHED_PER_CEI
        ]
        if rows:
            table = cast(Table, CeiRow.__table__)
            await conn.execute(
                update(table).where(table.c.id == bindparam("b_id"))
                .values(matched=bindparam("b_matched")),
                rows,
            )

    async def _insert_eis(self, conn: AsyncConnection, cei_id: str, eis: Sequence[NewEi]) -> None:
        if not eis:
            return
        await self._check_feeds(conn, [RuleInput("eis", None, tuple(ei.feed_id for ei in eis))])
        for ei in eis:
            if ei.finish < ei.start:
                raise ValidationError(f"EI {ei.ordinal} of CEI {cei_id!r}: finish < start")
        try:
            await conn.execute(
                insert(EiRow),
                [
                    {
                        "cei_id": cei_id,
                        "ordinal": ei.ordinal,
                        "feed_id": ei.feed_id,
                        "start": ei.start,
                        "finish": ei.finish,
                        "reveal": ei.reveal,
                        "state": "pending",
                    }
                    for ei in eis
                ],
            )
        except IntegrityError:
            raise ConflictError(
                f"CEI {cei_id!r} already has an EI with one of these ordinals"
            ) from None

    async def set_cei_state(
        self, cei_id: str, state: CeiState, resolved_chronon: int | None = None
    ) -> None:
        """Resolve (or reopen) a CEI. A missed CEI's pending EIs become missed too."""
        async with self._tx() as conn:
            await self._set_cei_state(conn, CeiStateChange(cei_id, state, resolved_chronon))

    async def _set_cei_state(
        self, conn: AsyncConnection, change: CeiStateChange, *, missing_ok: bool = False
    ) -> bool:
        state = _check_state(change.state)
        before = await self._cei_states(conn, [change.cei_id])
        result = await conn.execute(
            update(CeiRow)
            .where(CeiRow.id == change.cei_id)
            .values(state=state, resolved_chronon=change.resolved_chronon)
        )
        if not result.rowcount:
            if missing_ok:
                return False
            raise NotFoundError("CEI", change.cei_id)
        if state == "missed":
            await conn.execute(
                update(EiRow)
                .where(EiRow.cei_id == change.cei_id, EiRow.state == "pending")
                .values(state="missed")
            )
        await self._write_events(conn, [change], before)
        return True

    async def capture_by_probe_of(self, ei_id: int, chronon: int) -> bool:
        """Mark a pending EI captured by the successful probe of its feed at ``chronon`` (an EI
        revealed after that probe: the engine credits it from its history), recording the
        capture against that probe. ``False`` if the EI is gone or not pending. Without such a
        probe the EI is marked captured with no probe (:command:`proxy db check` reports it)."""
        async with self._tx() as conn:
            feed_id = (
                await conn.execute(select(EiRow.feed_id).where(EiRow.id == ei_id))
            ).scalar_one_or_none()
            if feed_id is None:
                return False
            probe_id = (
                await conn.execute(
                    select(ProbeRow.id)
                    .where(ProbeRow.feed_id == feed_id, ProbeRow.chronon == chronon,
                           ProbeRow.outcome.in_(SUCCESS_PROBE_OUTCOMES))
                    .order_by(ProbeRow.id)
                    .limit(1)
                )
            ).scalar_one_or_none()
            return bool(await self._capture(conn, ei_id, chronon, probe_id, feed_id))

    async def set_ei_captured(self, ei_id: int, chronon: int, probe_id: int | None = None) -> bool:
        """Mark an EI captured (and record the capture when ``probe_id`` is given).

        Returns ``False`` if it was not pending (already captured or missed): an
        EI is captured once. Raises :class:`NotFoundError` for an unknown EI or
        probe, :class:`ValidationError` if the probe was of another feed.
        """
        async with self._tx() as conn:
            feed_id = None
            if probe_id is not None:
                feed_id = (
                    await conn.execute(select(ProbeRow.feed_id).where(ProbeRow.id == probe_id))
                ).scalar_one_or_none()
                if feed_id is None:
                    raise NotFoundError("probe", probe_id)
            captured = await self._capture(conn, ei_id, chronon, probe_id, feed_id)
            if captured is None:
                raise NotFoundError("EI", ei_id)
            return captured

    async def _capture(
        self,
        conn: AsyncConnection,
        ei_id: int,
        chronon: int,
        probe_id: int | None,
        feed_id: int | None,
    ) -> bool | None:
        """Capture a pending EI: ``True``; not pending: ``False``; no such EI: ``None``."""
        result = await conn.execute(
            update(EiRow)
            .where(EiRow.id == ei_id, EiRow.state == "pending")
            .values(state="captured", captured_chronon=chronon, captured_probe_id=probe_id)
            .returning(EiRow.feed_id)
        )
        captured_feed = result.scalar_one_or_none()
        if captured_feed is None:
            exists = (await conn.execute(select(EiRow.id).where(EiRow.id == ei_id))).first()
            return None if exists is None else False
        if feed_id is not None and captured_feed != feed_id:
            # A probe of one feed cannot capture an EI on another: the caller mixed them up.
            # Raising rolls the whole transaction back, so the EI stays pending.
            raise ValidationError(
                f"EI {ei_id} is on feed {captured_feed}; a probe of feed {feed_id} cannot capture it"
            )
        if probe_id is not None:
            await conn.execute(
                insert(CaptureRow).values(ei_id=ei_id, probe_id=probe_id, chronon=chronon)
            )
        return True

    async def get_cei(self, user_id: int, cei_id: str) -> Cei:
        """One CEI of the user's profiles. Raises :class:`NotFoundError`."""
        async with self._tx() as conn:
            ceis = await self._load_ceis(
                conn,
                and_(
                    CeiRow.id == cei_id,
                    CeiRow.profile_id.in_(
                        select(ProfileRow.id).where(ProfileRow.user_id == user_id)
                    ),
                ),
            )
        if not ceis:
            raise NotFoundError("CEI", cei_id)
        return ceis[0]

    async def cei_id_high_water(self) -> dict[int, int]:
        """By rule id: one more than the highest ``seq`` of its CEI ids ``r{rule}:{seq}`` (the
        service's ids), 0 for none. The restarted service numbers new CEIs from here."""
        seq_text = func.substr(CeiRow.id, func.strpos(CeiRow.id, ":") + 1)
        async with self._tx() as conn:
            if conn.dialect.name == "sqlite":
                seq_text = func.substr(CeiRow.id, func.instr(CeiRow.id, ":") + 1)
            seq = cast_(seq_text, BigInteger)
            rows = await conn.execute(
                select(CeiRow.rule_id, func.max(seq))
                .where(CeiRow.rule_id.is_not(None), CeiRow.id.like("r%:%"))
                .group_by(CeiRow.rule_id)
            )
            return {int(rule_id): int(top) + 1 for rule_id, top in rows
                    if rule_id is not None and top is not None}

    async def list_ceis(
        self,
        user_id: int,
        profile_id: int,
        state: CeiState | None = None,
        *,
        limit: int = 50,
        offset: int = 0,
        before: tuple[int, str] | None = None,
    ) -> list[Cei]:
        """A profile's CEIs with their EIs, newest release first; ``before``: only those
        after this ``(release, id)`` in that order (keyset pagination on the index
        ``ix_ceis_profile_id_release_id``). Raises :class:`ProfileNotFoundError`."""
        if limit < 1 or offset < 0:
            raise ValidationError("limit must be ≥ 1 and offset ≥ 0")
        where = CeiRow.profile_id == profile_id
        if state is not None:
            where = and_(where, CeiRow.state == _check_state(state))
        if before is not None:
            # A row-value comparison, not an OR of two: both SQLite and PostgreSQL seek the
            # (profile_id, release, id) index with it.
            where = and_(where, tuple_(CeiRow.release, CeiRow.id) < tuple_(*before))
        async with self._tx() as conn:
            await self._owned_profile(conn, user_id, profile_id)
            return await self._load_ceis(conn, where, limit=limit, offset=offset, newest_first=True)

    async def count_ceis(self, user_id: int, profile_id: int, state: CeiState | None = None) -> int:
        """How many CEIs the profile has (in ``state``): one count on an index."""
        where = CeiRow.profile_id == profile_id
        if state is not None:
            where = and_(where, CeiRow.state == _check_state(state))
        async with self._tx() as conn:
            await self._owned_profile(conn, user_id, profile_id)
            return int((await conn.execute(select(func.count()).where(where))).scalar_one())

    async def resolved_ceis(
        self,
        user_id: int,
        profile_id: int,
        *,
        after_event: int = 0,
        since: dt.datetime | None = None,
        state: CeiState | None = None,
        limit: int = 50,
    ) -> list[tuple[int, Cei]]:
        """The profile's resolved CEIs in the order they were resolved, each with its
        resolution's sequence number (the id of its notification event, written in the
        resolution's transaction): those after ``after_event``, resolved at or after
        ``since``. A client that stores the last number reads each resolution once.
        Raises :class:`ProfileNotFoundError`."""
        events = NotificationEventRow
        stmt = (
            select(events.id, events.cei_id)
            .where(events.profile_id == profile_id, events.id > after_event)
            .order_by(events.id)
            .limit(limit)
        )
        if since is not None:
            stmt = stmt.where(events.created_at >= since)
        if state is not None:
            stmt = stmt.where(events.type == _check_state(state))
        async with self._tx() as conn:
            await self._owned_profile(conn, user_id, profile_id)
            seq = [(row.id, row.cei_id) for row in (await conn.execute(stmt)).all()]
            ceis = {c.id: c for c in await self._load_ceis(
                conn, CeiRow.id.in_([cei_id for _, cei_id in seq]))} if seq else {}
        return [(n, ceis[cei_id]) for n, cei_id in seq if cei_id in ceis]

    async def pending_ceis_with_eis(self) -> list[Cei]:
        """Every pending CEI with its EIs, by release then id (to restore the engine on start)."""
        async with self._tx() as conn:
            return await self._load_ceis(conn, CeiRow.state == "pending")

    async def _load_ceis(
        self,
        conn: AsyncConnection,
        where: Any,
        *,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = False,
    ) -> list[Cei]:
        order = (
            (CeiRow.release.desc(), CeiRow.id.desc())
            if newest_first
            else (CeiRow.release, CeiRow.id)
        )
        stmt = select(CeiRow).where(where).order_by(*order).offset(offset)
        if limit is not None:
            stmt = stmt.limit(limit)
        cei_rows = (await conn.execute(stmt)).all()
        eis_by_cei: dict[str, list[Ei]] = defaultdict(list)
        for chunk in _chunks([row.id for row in cei_rows]):
            for row in (
                await conn.execute(
                    select(EiRow)
                    .where(EiRow.cei_id.in_(chunk))
                    .order_by(EiRow.cei_id, EiRow.ordinal)
                )
            ).all():
                eis_by_cei[row.cei_id].append(_ei(row))
        return [
            Cei(
                id=row.id,
                profile_id=row.profile_id,
                rule_id=row.rule_id,
                release=row.release,
                sealed=bool(row.sealed),
                state=row.state,
                resolved_chronon=row.resolved_chronon,
                created_at=row.created_at,
                eis=tuple(eis_by_cei[row.id]),
                fired=bool(row.fired),
                matched=tuple(MatchedRecord.from_json(m) for m in row.matched or ()),
            )
            for row in cei_rows
        ]


def _matched_json(matched: Sequence[MatchedRecord]) -> list[dict[str, Any]] | None:
    """``ceis.matched`` for entries told at a CEI's opening: NULL when none."""
    return [m.to_json() for m in matched[:MAX_MATCHED_PER_CEI]] or None
