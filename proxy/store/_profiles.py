"""Profiles with their rules and the rules' saved states (user-scoped reads report other users' objects as missing)."""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Sequence
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
    union_all,
    update,
)
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
    _among,
    _chunks,
    _json_key,
    _profile_name,
)
from proxy.store._models import (
    FeedRegistrationRow,
    FeedRow,
    ProfileRow,
    RuleFeedRow,
    RuleRow,
    UserRow,
)
from proxy.store._outbox import Outbox
from proxy.store._types import (
    NewProfile,
    Profile,
    Rule,
    RuleInput,
    TargetInput,
)


class Profiles(Outbox):
    """Profiles with their rules, each user's own; the rules' saved evaluator states."""

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
