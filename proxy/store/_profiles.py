"""Profiles, rules, CEIs and EIs (user-scoped reads report other users' objects as missing)."""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Select,
    Table,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    tuple_,
    union_all,
    update,
)
from sqlalchemy import cast as cast_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.errors import (
    ConflictError,
    FeedNotFoundError,
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
    _json_key,
    _profile_name,
)
from proxy.store._models import (
    CaptureRow,
    CeiRow,
    EiRow,
    FeedRegistrationRow,
    FeedRow,
    NotificationEventRow,
    ProbeRow,
    ProfileRow,
    RuleFeedRow,
    RuleRow,
    UserRow,
)
from proxy.store._outbox import Outbox
from proxy.store._types import (
    MAX_MATCHED_PER_CEI,
    Cei,
    CeiState,
    CeiStateChange,
    Ei,
    MatchedRecord,
    NewEi,
    NewProfile,
    Profile,
    Rule,
    RuleInput,
    TargetInput,
)


class ProfilesAndCeis(Outbox):
    """Profiles with their rules, and the CEIs/EIs the rules released."""

    # --- profiles and rules ---------------------------------------------------------

    async def create_profile(
        self,
        user_id: int,
        name: str,
        rules: Sequence[RuleInput],
        notify: Sequence[TargetInput] | None = None,
        notify_spec: Any = None,
    ) -> Profile:
        """Create a profile with its rules (in order). Raises :class:`ConflictError` for a taken
        name, :class:`FeedNotFoundError` for a rule reading a feed the user has not registered
        (unknown, or only other users') and :class:`NotFoundError` for an unknown user.

        ``notify``: the profile's default notify targets (``notify_spec``: as submitted, JSON);
        targets the user did not have yet are created, and returned once with their secrets
        in :attr:`Profile.new_targets`."""
        new = NewProfile(user_id, name, tuple(rules), None if notify is None else tuple(notify),
                         notify_spec)
        return (await self.create_profiles([new]))[0]

    async def create_profiles(self, new: Sequence[NewProfile]) -> list[Profile]:
        """Create profiles (each as :meth:`create_profile` does) in ONE transaction: all of
        them, or none if one is refused (with one of :meth:`create_profile`'s errors; which
        profile it was is :meth:`create_profile`'s to tell, one by one).

        Issue 24.4: three statements whatever the number of profiles (on SQLite they hold
        the write lock the chronon loop's writer needs): no reload of what was just written,
        no user lookup unless the insert is refused, one INSERT for all the profiles and one
        for all their rules, and the rules' feeds linked from the users' registrations (the
        check that they are the user's and the links at once)."""
        if not new:
            return []
        names = [_profile_name(p.name) for p in new]
        for p in new:
            _check_rule_names(p.rules)
        now = self._clock().astimezone(dt.UTC)
        try:
            async with self._tx() as conn:
                try:
                    ids = list((
                        await conn.execute(
                            insert(ProfileRow).returning(ProfileRow.id, sort_by_parameter_order=True),
                            [{"user_id": p.user_id, "name": name, "created_at": now, "updated_at": now,
                              "notify": p.notify_spec} for p, name in zip(new, names, strict=True)],
                        )
                    ).scalars())
                except IntegrityError:
                    taken = f"you already have a profile named {names[0]!r}" if len(new) == 1 \
                        else "one of the profiles' names is taken"
                    raise ConflictError(taken) from None
                rule_ids = await self._insert_rules(
                    conn, [(profile_id, p.user_id, p.rules, {}) for profile_id, p in zip(ids, new, strict=True)])
                created = [
                    await self._link_targets(conn, p.user_id, profile_id, p.notify,
                                             list(zip(rules, p.rules, strict=True)), fresh=True)
                    for profile_id, p, rules in zip(ids, new, rule_ids, strict=True)
                ]
        except ConflictError:
            # The insert is refused for a taken name and for an unknown user (the foreign key):
            # which one is asked only now, off the path every create takes.
            if len(new) == 1 and not await self._user_exists(new[0].user_id):
                raise NotFoundError("user", new[0].user_id) from None
            raise
        return [
            Profile(
                id=profile_id, user_id=p.user_id, name=name, created_at=now, updated_at=now,
                rules=tuple(
                    Rule(id=rule_id, profile_id=profile_id, name=rule.name, position=position,
                         spec=_as_stored(rule.spec), state=None,
                         feed_ids=tuple(sorted(set(rule.feed_ids))))
                    for position, (rule_id, rule) in enumerate(zip(rules, p.rules, strict=True))
                ),
                notify=_as_stored(p.notify_spec), new_targets=targets,
            )
            for profile_id, p, name, rules, targets in zip(ids, new, names, rule_ids, created, strict=True)
        ]

    async def _user_exists(self, user_id: int) -> bool:
        async with self._tx() as conn:
            return (await conn.execute(select(UserRow.id).where(UserRow.id == user_id))).first() is not None

    async def replace_profile(
        self,
        user_id: int,
        profile_id: int,
        name: str,
        rules: Sequence[RuleInput],
        notify: Sequence[TargetInput] | None = None,
        notify_spec: Any = None,
    ) -> Profile:
        """Replace a profile's name, rules and notify targets. A new rule with the same name
        and spec (its ``notify`` aside) as an old one keeps its runtime state; other rules
        start afresh. CEIs stay (their ``rule_id`` becomes null if their rule went away, and
        they then notify the profile's default targets)."""
        name = _profile_name(name)
        async with self._tx() as conn:
            await self._owned_profile(conn, user_id, profile_id)
            old = (
                await conn.execute(
                    select(RuleRow.name, RuleRow.spec, RuleRow.state).where(
                        RuleRow.profile_id == profile_id
                    )
                )
            ).all()
            kept_state = {(row.name, _state_key(row.spec)): row.state for row in old}
            await conn.execute(delete(RuleRow).where(RuleRow.profile_id == profile_id))
            try:
                await conn.execute(
                    update(ProfileRow)
                    .where(ProfileRow.id == profile_id)
                    .values(name=name, updated_at=self._clock(), notify=notify_spec)
                )
            except IntegrityError:
                raise ConflictError(f"you already have a profile named {name!r}") from None
            (rule_ids,) = await self._insert_rules(conn, [(profile_id, user_id, rules, kept_state)])
            created = await self._link_targets(
                conn, user_id, profile_id, notify, list(zip(rule_ids, rules, strict=True)))
            profile = await self._load_profile(conn, user_id, profile_id)
            return replace(profile, new_targets=created)

    async def delete_profile(self, user_id: int, profile_id: int) -> None:
        """Delete a profile with its rules and CEIs. Raises :class:`ProfileNotFoundError`."""
        async with self._tx() as conn:
            result = await conn.execute(
                delete(ProfileRow).where(ProfileRow.id == profile_id, ProfileRow.user_id == user_id)
            )
            if not result.rowcount:
                raise ProfileNotFoundError(profile_id)

    async def get_profile(self, user_id: int, profile_id: int) -> Profile:
        """Raises :class:`ProfileNotFoundError` (also for another user's profile)."""
        async with self._tx() as conn:
            return await self._load_profile(conn, user_id, profile_id)

    async def list_profiles(
        self, user_id: int, *, limit: int | None = None, after_id: int | None = None
    ) -> list[Profile]:
        """A user's profiles, by id: all of them, or ``limit`` with ids above ``after_id``."""
        where = ProfileRow.user_id == user_id
        if after_id is not None:
            where = and_(where, ProfileRow.id > after_id)
        async with self._tx() as conn:
            return await self._load_profiles(conn, where, limit=limit)

    async def count_profiles(self, user_id: int) -> int:
        """How many profiles ``user_id`` has (one indexed count)."""
        async with self._tx() as conn:
            return int((await conn.execute(
                select(func.count()).where(ProfileRow.user_id == user_id))).scalar_one())

    async def all_profiles(self) -> list[Profile]:
        """Every user's profiles, by id (for the service to rebuild its triggers on start)."""
        async with self._tx() as conn:
            return await self._load_profiles(conn, None)

    async def profile_versions(self) -> dict[int, tuple[int, dt.datetime]]:
        """Every profile's ``(user id, updated_at)`` by id, and nothing else: what a leader
        compares its installed profiles with when it may have missed changes."""
        async with self._tx() as conn:
            rows = await conn.execute(
                select(ProfileRow.id, ProfileRow.user_id, ProfileRow.updated_at))
            return {row.id: (row.user_id, row.updated_at) for row in rows}

    async def save_rule_state(self, rule_id: int, state: Any) -> None:
        """Store a rule's runtime state (JSON-able). Raises :class:`NotFoundError`."""
        async with self._tx() as conn:
            result = await conn.execute(
                update(RuleRow).where(RuleRow.id == rule_id).values(state=state)
            )
            if not result.rowcount:
                raise NotFoundError("rule", rule_id)

    async def save_rule_states(self, states: Sequence[tuple[int, Any]]) -> int:
        """Store many rules' runtime states in ONE transaction (the service's loop writes
        thousands at once). Rules that no longer exist are skipped (their profile was
        deleted meanwhile); returns how many were stored."""
        if not states:
            return 0
        table = cast(Table, RuleRow.__table__)
        async with self._tx() as conn:
            if conn.dialect.name == "sqlite":
                # ONE statement: the states travel as one JSON document and SQLite updates the
                # rows from it. Row by row (executemany), the driver's thread gives the GIL up
                # around each row's step and waits for it back behind the loop's thread: the
                # first tick after a restore of 100,000 profiles writes 50,000 states, which
                # took 7-10 s so (0.8 s on an idle process) while holding SQLite's write lock,
                # and the process lost its lease waiting for it.
                rows = func.json_each(json.dumps([[r, st] for r, st in states])).table_valued(
                    "value").alias("given")
                result = await conn.execute(
                    update(table)
                    .where(table.c.id == func.json_extract(rows.c.value, "$[0]"))
                    .values(state=func.json_extract(rows.c.value, "$[1]"))
                )
                return int(result.rowcount)
            stmt = (
                update(table)
                .where(table.c.id == bindparam("rule_id"))
                .values(state=bindparam("state", type_=table.c.state.type))
            )
            stored = 0
            for chunk in _chunks(list(states)):
                ids = [rule_id for rule_id, _ in chunk]
                existing = set(
                    (await conn.execute(select(RuleRow.id).where(_among(conn, RuleRow.id, ids)))).scalars()
                )
                changes = [{"rule_id": r, "state": st} for r, st in chunk if r in existing]
                if changes:
                    await conn.execute(stmt, changes)
                stored += len(changes)
        return stored

    async def load_rule_states(self) -> dict[int, Any]:
        """Every rule's stored runtime state (``None`` where none was saved), by rule id."""
        async with self._tx() as conn:
            rows = (await conn.execute(select(RuleRow.id, RuleRow.state))).all()
        return {row.id: row.state for row in rows}

    async def _check_feeds(
        self, conn: AsyncConnection, rules: Sequence[RuleInput], user_id: int | None = None
    ) -> None:
        """Every feed the rules read exists and, given ``user_id``, is registered by that user
        (issue 22: a profile may name only its owner's feeds; another user's is "not found")."""
        wanted = {feed_id for rule in rules for feed_id in rule.feed_ids}
        if not wanted:
            return
        query = (
            select(FeedRow.id).where(FeedRow.id.in_(wanted))
            if user_id is None
            else select(FeedRegistrationRow.feed_id).where(
                FeedRegistrationRow.feed_id.in_(wanted), FeedRegistrationRow.user_id == user_id
            )
        )
        found = set((await conn.execute(query)).scalars().all())
        missing = sorted(wanted - found)
        if missing:
            raise FeedNotFoundError(missing[0])

    async def _insert_rules(
        self,
        conn: AsyncConnection,
        profiles: Sequence[tuple[int, int, Sequence[RuleInput], dict[tuple[str, str], Any]]],
    ) -> list[list[int]]:
        """Insert each profile's rules (``(profile id, owner, rules, kept states)``, rules in
        order) and link each rule to the feeds it reads, which must be feeds the owner
        registered: :class:`FeedNotFoundError` names the first other one. The rule ids, per
        profile. One INSERT for all the rules, one for their feeds (per 100 rules)."""
        for _, _, rules, _ in profiles:
            _check_rule_names(rules)
        rows = [{"profile_id": profile_id, "name": rule.name, "position": position, "spec": rule.spec,
                 "state": kept.get((rule.name, _state_key(rule.spec)))}
                for profile_id, _, rules, kept in profiles for position, rule in enumerate(rules)]
        if not rows:
            return [[] for _ in profiles]
        # Their ids come back in the rows' order.
        ids = iter(list((
            await conn.execute(insert(RuleRow).returning(RuleRow.id, sort_by_parameter_order=True), rows)
        ).scalars()))
        out = [[next(ids) for _ in rules] for _, _, rules, _ in profiles]
        # Issue 22: a rule may read only its owner's feeds. The links are copied from the
        # owner's registrations, so a feed the owner did not register is a link missing.
        wanted = [(rule_id, user_id, rule, sorted(set(rule.feed_ids)))
                  for (_, user_id, rules, _), rule_ids in zip(profiles, out, strict=True)
                  for rule_id, rule in zip(rule_ids, rules, strict=True) if rule.feed_ids]
        for chunk in _chunks(wanted, 100):  # SQLite: at most 500 SELECTs in a compound one
            reads = [select(literal(rule_id, BigInteger), FeedRegistrationRow.feed_id).where(
                FeedRegistrationRow.user_id == user_id, _among(conn, FeedRegistrationRow.feed_id, feeds))
                for rule_id, user_id, _, feeds in chunk]
            linked = await conn.execute(insert(RuleFeedRow).from_select(
                ["rule_id", "feed_id"], reads[0] if len(reads) == 1 else union_all(*reads)))
            if linked.rowcount != sum(len(feeds) for *_, feeds in chunk):
                for _, user_id, rule, _ in chunk:
                    await self._check_feeds(conn, [rule], user_id)  # raises, naming the feed
                raise AssertionError("rule feeds: links missing, yet every feed is registered")
        return out

    async def _owned_profile(self, conn: AsyncConnection, user_id: int, profile_id: int) -> None:
        found = (
            await conn.execute(
                select(ProfileRow.id).where(
                    ProfileRow.id == profile_id, ProfileRow.user_id == user_id
                )
            )
        ).first()
        if found is None:
            raise ProfileNotFoundError(profile_id)

    async def _load_profile(self, conn: AsyncConnection, user_id: int, profile_id: int) -> Profile:
        profiles = await self._load_profiles(
            conn, and_(ProfileRow.id == profile_id, ProfileRow.user_id == user_id)
        )
        if not profiles:
            raise ProfileNotFoundError(profile_id)
        return profiles[0]

    async def _load_profiles(
        self, conn: AsyncConnection, where: Any, *, limit: int | None = None
    ) -> list[Profile]:
        stmt: Select[Any] = select(ProfileRow).order_by(ProfileRow.id)
        if where is not None:
            stmt = stmt.where(where)
        if limit is not None:
            stmt = stmt.limit(limit)
        profile_rows = (await conn.execute(stmt)).all()
        if not profile_rows:
            return []
        ids = [row.id for row in profile_rows]
        rules_by_profile: dict[int, list[Rule]] = defaultdict(list)
        for chunk in _chunks(ids):
            rule_rows = (
                await conn.execute(
                    select(RuleRow).where(RuleRow.profile_id.in_(chunk)).order_by(RuleRow.position)
                )
            ).all()
            feeds_by_rule: dict[int, list[int]] = defaultdict(list)
            rule_ids = [row.id for row in rule_rows]
            for rule_chunk in _chunks(rule_ids):
                for link in (
                    await conn.execute(
                        select(RuleFeedRow.rule_id, RuleFeedRow.feed_id)
                        .where(RuleFeedRow.rule_id.in_(rule_chunk))
                        .order_by(RuleFeedRow.feed_id)
                    )
                ).all():
                    feeds_by_rule[link.rule_id].append(link.feed_id)
            for row in rule_rows:
                rules_by_profile[row.profile_id].append(
                    Rule(
                        id=row.id,
                        profile_id=row.profile_id,
                        name=row.name,
                        position=row.position,
                        spec=row.spec,
                        state=row.state,
                        feed_ids=tuple(feeds_by_rule[row.id]),
                    )
                )
        return [
            Profile(
                id=row.id,
                user_id=row.user_id,
                name=row.name,
                created_at=row.created_at,
                updated_at=row.updated_at,
                rules=tuple(rules_by_profile[row.id]),
                notify=row.notify,
            )
            for row in profile_rows
        ]

    # --- CEIs and EIs ---------------------------------------------------------------

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


def _check_rule_names(rules: Sequence[RuleInput]) -> None:
    for position, rule in enumerate(rules):
        if not rule.name.strip() or len(rule.name) > 200:
            raise ValidationError(f"rule {position}: name must be 1 to 200 characters")


def _as_stored(value: Any) -> Any:
    """``value`` as a JSON column gives it back (what a reload of the row would read)."""
    return None if value is None else json.loads(json.dumps(value))


def _state_key(spec: Any) -> str:
    """What must stay equal for a replaced rule to keep its runtime state: the spec without
    ``notify`` (where a rule's notifications go does not change what it decided)."""
    if isinstance(spec, dict):
        spec = {k: v for k, v in spec.items() if k != "notify"}
    return _json_key(spec)
