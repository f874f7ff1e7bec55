"""The shared feeds, each user's registrations of them, and what probes taught us of each feed."""

from __future__ import annotations

import secrets
from collections.abc import Collection, Sequence
from typing import Any, cast

from sqlalchemy import Table, and_, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.errors import (
    ConflictError,
    FeedNotFoundError,
    NotFoundError,
    StorageError,
    ValidationError,
)

# The feed layer owns URL canonicalisation; dedupe must use the very same function.
from proxy.feeds.ssrf import normalise_url
from proxy.store._accounts import Accounts
from proxy.store._base import (
    _FEED_COLUMNS,
    _REGISTRATION_COLUMNS,
    _chunks,
    _feed,
    _registration,
)
from proxy.store._models import (
    EntryRow,
    FeedRegistrationRow,
    FeedRow,
    ProbeRow,
    ProfileRow,
    RuleFeedRow,
    RuleRow,
    UserRow,
)
from proxy.store._types import (
    Feed,
    FeedHealth,
    FeedUpdate,
    RegisteredFeed,
    Registration,
)


class Feeds(Accounts):
    """Feeds, shared by URL across users; each user's registrations (with ping tokens);
    each feed's probe health, validators and redirects."""

    # --- feeds ----------------------------------------------------------------------

    async def register_feed(self, url: str) -> tuple[Feed, bool]:
        """The shared feed for ``url``, creating it if no feed has the same normalised URL.

        Returns ``(feed, created)``. A new feed gets the next dense ``resource``
        (max + 1; deleted feeds leave holes, resources are never reused so the
        engine never confuses two feeds). Concurrent registrations of the same
        URL return the same feed. Registers it for nobody: users reach feeds
        through :meth:`register_feed_for`. Does not check whether the URL may be
        fetched (the feed layer's SSRF guard does).
        """
        url = url.strip()
        normalised = _normalised(url)
        for attempt in range(2):
            try:
                async with self._tx() as conn:
                    return await self._ensure_feed(conn, url, normalised)
            except StorageError as exc:
                if attempt or not isinstance(exc.__cause__, IntegrityError):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def register_feed_for(self, user_id: int, url: str) -> tuple[RegisteredFeed, bool]:
        """Register ``url`` for ``user_id``: the shared feed (created if new) and the user's own
        registration (URL as given, fresh ping token). Returns ``(feed, created)`` where
        ``created`` says whether *this user's* registration is new: whether another user
        already registered the URL is not revealed. Raises :class:`NotFoundError` for an
        unknown user."""
        url = url.strip()
        normalised = _normalised(url)
        # Two attempts: the second only runs when a concurrent registration of the same URL
        # won the race (or the feed vanished with another user's last registration).
        for attempt in range(2):
            try:
                async with self._tx() as conn:
                    await self._require_user(conn, user_id)
                    return await self._register_in(conn, user_id, url, normalised)
            except StorageError as exc:
                if attempt or not isinstance(exc.__cause__, IntegrityError):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def register_feeds_for(
        self, user_id: int, urls: Sequence[str]
    ) -> list[tuple[RegisteredFeed, bool]]:
        """:meth:`register_feed_for` of many URLs (an OPML import) in ONE transaction with a
        handful of set-wise statements, not a few per URL; results in the order given. A URL
        whose feed came earlier in ``urls`` (same normalised form) is ``created=False``. All
        or nothing, with the same single retry after a concurrent registration."""
        given = [url.strip() for url in urls]
        normals = [_normalised(url) for url in given]
        for attempt in range(2):
            try:
                async with self._tx() as conn:
                    await self._require_user(conn, user_id)
                    feeds = await self._ensure_feeds(conn, given, normals)
                    return await self._register_all(conn, user_id, given, [feeds[n] for n in normals])
            except StorageError as exc:
                if attempt or not isinstance(exc.__cause__, IntegrityError):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _ensure_feeds(
        self, conn: AsyncConnection, given: Sequence[str], normals: Sequence[str]
    ) -> dict[str, Feed]:
        """The feed of every normalised URL, created (with the next dense resources) if new."""
        if conn.dialect.name == "postgresql":
            await conn.exec_driver_sql("LOCK TABLE feeds IN SHARE ROW EXCLUSIVE MODE")  # as _ensure_feed
        first_url = dict(zip(reversed(normals), reversed(given), strict=True))  # first given wins
        wanted = list(dict.fromkeys(normals))

        async def load() -> dict[str, Feed]:
            found: dict[str, Feed] = {}
            for chunk in _chunks(wanted):
                rows = await conn.execute(select(FeedRow).where(FeedRow.url_normalised.in_(chunk)))
                found.update((row.url_normalised, _feed(row)) for row in rows)
            return found

        feeds = await load()
        missing = [n for n in wanted if n not in feeds]
        if missing:
            # A concurrent registration taking the same resource fails the UNIQUE index: retried.
            top = (await conn.execute(select(func.coalesce(func.max(FeedRow.resource), -1)))).scalar_one()
            now = self._clock()
            await conn.execute(insert(FeedRow), [
                {"url": first_url[n], "url_normalised": n, "resource": int(top) + 1 + i,
                 "consecutive_errors": 0, "disabled": False, "created_at": now}
                for i, n in enumerate(missing)])
            feeds = await load()
        return feeds

    async def _register_all(
        self, conn: AsyncConnection, user_id: int, given: Sequence[str], feeds: Sequence[Feed]
    ) -> list[tuple[RegisteredFeed, bool]]:
        ids = list(dict.fromkeys(f.id for f in feeds))

        async def registrations() -> dict[int, Any]:
            found: dict[int, Any] = {}
            for chunk in _chunks(ids):
                rows = await conn.execute(select(FeedRegistrationRow).where(
                    FeedRegistrationRow.user_id == user_id, FeedRegistrationRow.feed_id.in_(chunk)))
                found.update((row.feed_id, row) for row in rows)
            return found

        before = await registrations()
        now = self._clock()
        new: dict[int, str] = {}
        for url, feed in zip(given, feeds, strict=True):
            if feed.id not in before and feed.id not in new:
                new[feed.id] = url
        if new:
            regs = cast(Table, FeedRegistrationRow.__table__)
            await conn.execute(
                self._insert(conn, regs).on_conflict_do_nothing(index_elements=["user_id", "feed_id"]),
                [{"user_id": user_id, "feed_id": fid, "url": url, "ping_token": new_ping_token(),
                  "created_at": now} for fid, url in new.items()])
        after = await registrations()
        out: list[tuple[RegisteredFeed, bool]] = []
        for feed in feeds:
            created = feed.id in new and feed.id not in before
            out.append((RegisteredFeed(_registration(after[feed.id]), feed), created))
            new.pop(feed.id, None)  # a later URL of the same feed is not "created" again
        return out

    async def _require_user(self, conn: AsyncConnection, user_id: int) -> None:
        if (await conn.execute(select(UserRow.id).where(UserRow.id == user_id))).first() is None:
            raise NotFoundError("user", user_id)

    async def _register_in(
        self, conn: AsyncConnection, user_id: int, url: str, normalised: str
    ) -> tuple[RegisteredFeed, bool]:
        feed, _ = await self._ensure_feed(conn, url, normalised)
        regs = cast(Table, FeedRegistrationRow.__table__)
        inserted = (
            await conn.execute(
                self._insert(conn, regs)
                .values(
                    user_id=user_id,
                    feed_id=feed.id,
                    url=url,
                    ping_token=new_ping_token(),
                    created_at=self._clock(),
                )
                .on_conflict_do_nothing(index_elements=["user_id", "feed_id"])
                .returning(*_REGISTRATION_COLUMNS)
            )
        ).first()
        if inserted is not None:
            return RegisteredFeed(_registration(inserted), feed), True
        return await self._registered(conn, user_id, feed.id), False

    async def _ensure_feed(
        self, conn: AsyncConnection, url: str, normalised: str
    ) -> tuple[Feed, bool]:
        if conn.dialect.name == "postgresql":
            # Registrations are rare: serialise them (and the deletion of a feed's last
            # registration) so `max + 1` cannot hand the same resource to two feeds and a
            # feed cannot vanish under a new registration. (SQLite runs the INSERT …
            # SELECT below under its single write lock.)
            await conn.exec_driver_sql("LOCK TABLE feeds IN SHARE ROW EXCLUSIVE MODE")
        existing = (
            await conn.execute(select(FeedRow).where(FeedRow.url_normalised == normalised))
        ).first()
        if existing is not None:
            return _feed(existing), False
        next_resource = select(func.coalesce(func.max(FeedRow.resource), -1) + 1).scalar_subquery()
        row = (
            await conn.execute(
                insert(FeedRow)
                .values(
                    url=url,
                    url_normalised=normalised,
                    resource=next_resource,
                    consecutive_errors=0,
                    disabled=False,
                    created_at=self._clock(),
                )
                .returning(*_FEED_COLUMNS)
            )
        ).one()
        return _feed(row), True

    async def _registered(self, conn: AsyncConnection, user_id: int, feed_id: int) -> RegisteredFeed:
        row = (
            await conn.execute(
                select(FeedRegistrationRow).where(
                    FeedRegistrationRow.user_id == user_id, FeedRegistrationRow.feed_id == feed_id
                )
            )
        ).first()
        if row is None:
            raise FeedNotFoundError(feed_id)
        feed = (await conn.execute(select(FeedRow).where(FeedRow.id == feed_id))).one()
        return RegisteredFeed(_registration(row), _feed(feed))

    async def get_registered_feed(self, user_id: int, feed_id: int) -> RegisteredFeed:
        """The user's registration of a feed with the feed's health. Raises
        :class:`FeedNotFoundError` also when only other users registered it."""
        async with self._tx() as conn:
            return await self._registered(conn, user_id, feed_id)

    async def registered_feeds(self, user_id: int, feed_ids: Collection[int]) -> list[RegisteredFeed]:
        """The user's registrations of ``feed_ids`` with the feeds' health, by feed id, in one
        query (no counts); a feed the user did not register is left out."""
        if not feed_ids:
            return []
        stmt = (
            select(*(c.label(f"r_{c.name}") for c in _REGISTRATION_COLUMNS), FeedRow)
            .join(FeedRow, FeedRow.id == FeedRegistrationRow.feed_id)
            .where(FeedRegistrationRow.user_id == user_id, FeedRegistrationRow.feed_id.in_(sorted(feed_ids)))
            .order_by(FeedRow.id)
        )
        async with self._tx() as conn:
            rows = (await conn.execute(stmt)).all()
        return [RegisteredFeed(_registration(row, "r_"), _feed(row)) for row in rows]

    async def count_registered_feeds(self, user_id: int) -> int:
        """How many feeds ``user_id`` registered (one indexed count)."""
        async with self._tx() as conn:
            return int((await conn.execute(
                select(func.count()).where(FeedRegistrationRow.user_id == user_id)
            )).scalar_one())

    async def list_registered_feeds(
        self, user_id: int, *, limit: int | None = None, after_id: int | None = None
    ) -> list[RegisteredFeed]:
        """The feeds ``user_id`` registered, by feed id, with probe and entry counts (shared)
        and how many of *this user's* profiles read each: all of them, or ``limit`` of them
        with ids above ``after_id`` (keyset pagination; the counts are of that page only)."""
        mine = FeedRegistrationRow.user_id == user_id
        if after_id is not None:
            mine = and_(mine, FeedRegistrationRow.feed_id > after_id)
        page = select(FeedRegistrationRow.feed_id).where(mine).order_by(FeedRegistrationRow.feed_id)
        if limit is not None:
            page = page.limit(limit)
        regs = page.scalar_subquery() if limit is None else select(page.subquery().c.feed_id).scalar_subquery()
        probes = (
            select(ProbeRow.feed_id, func.count().label("n"))
            .where(ProbeRow.feed_id.in_(regs))
            .group_by(ProbeRow.feed_id)
            .subquery()
        )
        entries = (
            select(EntryRow.feed_id, func.count().label("n"))
            .where(EntryRow.feed_id.in_(regs))
            .group_by(EntryRow.feed_id)
            .subquery()
        )
        profiles = (
            select(RuleFeedRow.feed_id, func.count(func.distinct(RuleRow.profile_id)).label("n"))
            .join(RuleRow, RuleRow.id == RuleFeedRow.rule_id)
            .join(ProfileRow, ProfileRow.id == RuleRow.profile_id)
            .where(ProfileRow.user_id == user_id)
            .group_by(RuleFeedRow.feed_id)
            .subquery()
        )
        stmt = (
            select(
                *(c.label(f"r_{c.name}") for c in _REGISTRATION_COLUMNS),
                FeedRow,
                func.coalesce(probes.c.n, 0).label("probe_count"),
                func.coalesce(entries.c.n, 0).label("entry_count"),
                func.coalesce(profiles.c.n, 0).label("profile_count"),
            )
            .join(FeedRow, FeedRow.id == FeedRegistrationRow.feed_id)
            .outerjoin(probes, probes.c.feed_id == FeedRow.id)
            .outerjoin(entries, entries.c.feed_id == FeedRow.id)
            .outerjoin(profiles, profiles.c.feed_id == FeedRow.id)
            .where(FeedRegistrationRow.user_id == user_id, FeedRegistrationRow.feed_id.in_(regs))
            .order_by(FeedRow.id)
        )
        async with self._tx() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            RegisteredFeed(_registration(row, "r_"), _feed(row), probes=int(row.probe_count),
                           entries=int(row.entry_count), profiles=int(row.profile_count))
            for row in rows
        ]

    async def registered_feed_ids(self, user_id: int) -> set[int]:
        """The ids of the feeds ``user_id`` registered (what their rules may name)."""
        async with self._tx() as conn:
            return set(
                (
                    await conn.execute(
                        select(FeedRegistrationRow.feed_id).where(
                            FeedRegistrationRow.user_id == user_id
                        )
                    )
                ).scalars()
            )

    async def delete_registration(self, user_id: int, feed_id: int) -> bool:
        """Delete the user's registration of a feed; the shared feed (probes, entries, EIs) goes
        too when no other registration and no rule needs it. Returns whether it went.

        Raises :class:`FeedNotFoundError` (also when only other users registered it) and
        :class:`ConflictError` naming *this user's* profiles whose rules still read it;
        other users' use of the feed is never revealed.
        """
        async with self._tx() as conn:
            if conn.dialect.name == "postgresql":
                # See _ensure_feed: a concurrent registration must not lose its feed.
                await conn.exec_driver_sql("LOCK TABLE feeds IN SHARE ROW EXCLUSIVE MODE")
            names = (
                (
                    await conn.execute(
                        select(ProfileRow.name)
                        .join(RuleRow, RuleRow.profile_id == ProfileRow.id)
                        .join(RuleFeedRow, RuleFeedRow.rule_id == RuleRow.id)
                        .where(RuleFeedRow.feed_id == feed_id, ProfileRow.user_id == user_id)
                        .distinct()
                        .order_by(ProfileRow.name)
                    )
                )
                .scalars()
                .all()
            )
            result = await conn.execute(
                delete(FeedRegistrationRow).where(
                    FeedRegistrationRow.user_id == user_id, FeedRegistrationRow.feed_id == feed_id
                )
            )
            if not result.rowcount:
                raise FeedNotFoundError(feed_id)
            if names:
                # Raising rolls the deletion back.
                raise ConflictError(
                    f"feed {feed_id} is still read by the rules of your profile(s): "
                    + ", ".join(names)
                )
            return bool(await self._delete_if_unneeded(conn, [feed_id]))

    async def collect_unregistered_feeds(self) -> list[int]:
        """Delete every feed that no registration and no rule needs (with its probes, entries
        and EIs); return their ids. The service runs it on start: feeds registered before
        migration 0002 that no rule read have no owner, so nobody can see them."""
        async with self._tx() as conn:
            if conn.dialect.name == "postgresql":
                await conn.exec_driver_sql("LOCK TABLE feeds IN SHARE ROW EXCLUSIVE MODE")
            ids = list((await conn.execute(select(FeedRow.id).order_by(FeedRow.id))).scalars())
            return await self._delete_if_unneeded(conn, ids)

    async def _delete_if_unneeded(self, conn: AsyncConnection, feed_ids: Sequence[int]) -> list[int]:
        deleted: list[int] = []
        for chunk in _chunks(list(feed_ids)):
            needed = set(
                (
                    await conn.execute(
                        select(FeedRegistrationRow.feed_id).where(
                            FeedRegistrationRow.feed_id.in_(chunk)
                        )
                    )
                ).scalars()
            ) | set(
                (
                    await conn.execute(select(RuleFeedRow.feed_id).where(RuleFeedRow.feed_id.in_(chunk)))
                ).scalars()
            )
            unneeded = [f for f in chunk if f not in needed]
            if unneeded:
                await conn.execute(delete(FeedRow).where(FeedRow.id.in_(unneeded)))
                deleted.extend(unneeded)
        return deleted

    async def rotate_ping_token(self, user_id: int, feed_id: int) -> Registration:
        """A new ping token for the user's registration; the old one stops working at once.
        Raises :class:`FeedNotFoundError`."""
        async with self._tx() as conn:
            row = (
                await conn.execute(
                    update(FeedRegistrationRow)
                    .where(
                        FeedRegistrationRow.user_id == user_id,
                        FeedRegistrationRow.feed_id == feed_id,
                    )
                    .values(ping_token=new_ping_token())
                    .returning(*_REGISTRATION_COLUMNS)
                )
            ).first()
        if row is None:
            raise FeedNotFoundError(feed_id)
        return _registration(row)

    async def ping_users(self, feed_id: int, token: str) -> list[int]:
        """The users whose registration of ``feed_id`` has ping token ``token`` (constant-time
        compare). One user, except for registrations back-filled by migration 0002, which
        kept the feed's former shared token until rotated."""
        if not token:
            return []
        async with self._tx() as conn:
            rows = (
                await conn.execute(
                    select(FeedRegistrationRow.user_id, FeedRegistrationRow.ping_token)
                    .where(FeedRegistrationRow.feed_id == feed_id)
                    .order_by(FeedRegistrationRow.user_id)
                )
            ).all()
        given = token.encode()
        return [row.user_id for row in rows if secrets.compare_digest(row.ping_token.encode(), given)]

    async def profile_ids_of(self, user_ids: Sequence[int]) -> list[int]:
        """The ids of these users' profiles (a ping reaches only its registrant's rules)."""
        if not user_ids:
            return []
        async with self._tx() as conn:
            return list(
                (
                    await conn.execute(
                        select(ProfileRow.id)
                        .where(ProfileRow.user_id.in_(list(user_ids)))
                        .order_by(ProfileRow.id)
                    )
                ).scalars()
            )

    async def get_feed(self, feed_id: int) -> Feed:
        """Raises :class:`FeedNotFoundError`."""
        async with self._tx() as conn:
            row = (await conn.execute(select(FeedRow).where(FeedRow.id == feed_id))).first()
        if row is None:
            raise FeedNotFoundError(feed_id)
        return _feed(row)

    async def feed_by_resource(self, resource: int) -> Feed:
        """The feed behind an engine resource id. Raises :class:`NotFoundError`."""
        async with self._tx() as conn:
            row = (await conn.execute(select(FeedRow).where(FeedRow.resource == resource))).first()
        if row is None:
            raise NotFoundError("resource", resource)
        return _feed(row)

    async def list_feeds(self) -> list[Feed]:
        """Every feed, by id."""
        async with self._tx() as conn:
            rows = (await conn.execute(select(FeedRow).order_by(FeedRow.id))).all()
        return [_feed(row) for row in rows]

    async def resource_count(self) -> int:
        """``max(resource) + 1``: the size of the engine's resource arrays."""
        async with self._tx() as conn:
            top = (await conn.execute(select(func.max(FeedRow.resource)))).scalar_one()
        return 0 if top is None else int(top) + 1

    async def list_feeds_with_health(self) -> list[FeedHealth]:
        """Every shared feed with its probe, entry and referencing-profile counts (of every
        user), by id: an operator's view, never a user's (:meth:`list_registered_feeds`)."""
        probes = (
            select(ProbeRow.feed_id, func.count().label("n")).group_by(ProbeRow.feed_id).subquery()
        )
        entries = (
            select(EntryRow.feed_id, func.count().label("n")).group_by(EntryRow.feed_id).subquery()
        )
        profiles = (
            select(RuleFeedRow.feed_id, func.count(func.distinct(RuleRow.profile_id)).label("n"))
            .join(RuleRow, RuleRow.id == RuleFeedRow.rule_id)
            .group_by(RuleFeedRow.feed_id)
            .subquery()
        )
        stmt = (
            select(
                FeedRow,
                func.coalesce(probes.c.n, 0).label("probe_count"),
                func.coalesce(entries.c.n, 0).label("entry_count"),
                func.coalesce(profiles.c.n, 0).label("profile_count"),
            )
            .outerjoin(probes, probes.c.feed_id == FeedRow.id)
            .outerjoin(entries, entries.c.feed_id == FeedRow.id)
            .outerjoin(profiles, profiles.c.feed_id == FeedRow.id)
            .order_by(FeedRow.id)
        )
        async with self._tx() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            FeedHealth(
                feed=_feed(row),
                probes=int(row.probe_count),
                entries=int(row.entry_count),
                profiles=int(row.profile_count),
            )
            for row in rows
        ]

    async def delete_feed(self, feed_id: int) -> None:
        """Delete a shared feed with every registration, its probes, entries and EIs (an
        operator's tool: the API deletes one user's registration, :meth:`delete_registration`).

        Raises :class:`ConflictError` naming the profiles (of every user) whose rules still
        read it, and :class:`FeedNotFoundError`.
        """
        async with self._tx() as conn:
            users = (
                (
                    await conn.execute(
                        select(ProfileRow.name)
                        .join(RuleRow, RuleRow.profile_id == ProfileRow.id)
                        .join(RuleFeedRow, RuleFeedRow.rule_id == RuleRow.id)
                        .where(RuleFeedRow.feed_id == feed_id)
                        .distinct()
                        .order_by(ProfileRow.name)
                    )
                )
                .scalars()
                .all()
            )
            if users:
                raise ConflictError(
                    f"feed {feed_id} is still read by the rules of profile(s): {', '.join(users)}"
                )
            result = await conn.execute(delete(FeedRow).where(FeedRow.id == feed_id))
            if not result.rowcount:
                raise FeedNotFoundError(feed_id)

    async def update_feed_after_probe(self, feed_id: int, change: FeedUpdate) -> Feed:
        """Apply what a probe taught us (validators, health, redirect, 410). Raises :class:`FeedNotFoundError`."""
        async with self._tx() as conn:
            await self._apply_feed_update(conn, feed_id, change)
            row = (await conn.execute(select(FeedRow).where(FeedRow.id == feed_id))).one()
        return _feed(row)

    async def _apply_feed_update(
        self, conn: AsyncConnection, feed_id: int, change: FeedUpdate
    ) -> None:
        values: dict[str, Any] = feed_health_values(change)
        values["consecutive_errors"] = consecutive_errors_after(change.error)
        if change.new_url is not None:
            new_url = change.new_url.strip()
            values["url"] = new_url
            normalised = normalise_url(new_url)
            # Keep the dedupe key if another feed already has the target URL:
            # merging two feeds' histories is not the store's decision.
            clash = (
                await conn.execute(
                    select(FeedRow.id).where(
                        FeedRow.url_normalised == normalised, FeedRow.id != feed_id
                    )
                )
            ).first()
            if clash is None:
                values["url_normalised"] = normalised
        result = await conn.execute(update(FeedRow).where(FeedRow.id == feed_id).values(**values))
        if not result.rowcount:
            raise FeedNotFoundError(feed_id)


def new_ping_token() -> str:
    """A fresh ping token (192 random bits, URL-safe)."""
    return secrets.token_urlsafe(24)


def _normalised(url: str) -> str:
    normalised = normalise_url(url)
    if len(normalised) > 2048:
        raise ValidationError("feed URL is longer than 2048 characters")
    return normalised


def feed_health_values(change: FeedUpdate) -> dict[str, Any]:
    """The feed columns a probe's :class:`FeedUpdate` sets as plain values: everything but
    ``consecutive_errors`` (:func:`consecutive_errors_after`) and a redirect's new URL."""
    values: dict[str, Any] = {
        "last_probe_at": change.probed_at,
        "last_outcome": change.outcome[:32],
        "next_allowed_at": change.next_allowed_at,
    }
    if change.update_validators:
        values["etag"] = change.etag
        values["last_modified"] = change.last_modified
    if change.disabled_reason is not None:
        values["disabled"] = True
        values["disabled_reason"] = change.disabled_reason
    return values


def consecutive_errors_after(error: bool) -> Any:
    """``consecutive_errors`` after a probe: one more if it failed, else back to 0."""
    return FeedRow.consecutive_errors + 1 if error else 0
