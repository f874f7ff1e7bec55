"""Users, API keys and feeds."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import delete, func, insert, select, update
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
from proxy.store._base import (
    _FEED_COLUMNS,
    API_KEY_PREFIX_LENGTH,
    StoreBase,
    _feed,
    _user,
    hash_api_key,
)
from proxy.store._models import (
    ApiKeyRow,
    EntryRow,
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
    User,
)


class AccountsAndFeeds(StoreBase):
    """Users with their API keys, and the shared feeds with their probe health."""

    # --- users and API keys ---------------------------------------------------------

    async def create_user(self, name: str) -> tuple[int, str]:
        """Create user ``name`` with a first API key; return ``(user_id, api_key)``.

        The key is returned once and only its hash is stored. Raises
        :class:`ConflictError` if the name is taken, :class:`ValidationError` if blank.
        """
        name = name.strip()
        if not name or len(name) > 100:
            raise ValidationError("user name must be 1 to 100 characters")
        async with self._tx() as conn:
            try:
                user_id = (
                    await conn.execute(
                        insert(UserRow)
                        .values(name=name, created_at=self._clock())
                        .returning(UserRow.id)
                    )
                ).scalar_one()
            except IntegrityError:
                raise ConflictError(f"user {name!r} already exists") from None
            api_key = await self._new_api_key(conn, user_id)
        return user_id, api_key

    async def create_api_key(self, user_id: int) -> str:
        """Another API key for ``user_id`` (shown once)."""
        async with self._tx() as conn:
            if (
                await conn.execute(select(UserRow.id).where(UserRow.id == user_id))
            ).first() is None:
                raise NotFoundError("user", user_id)
            return await self._new_api_key(conn, user_id)

    async def _new_api_key(self, conn: AsyncConnection, user_id: int) -> str:
        api_key = secrets.token_urlsafe(32)
        await conn.execute(
            insert(ApiKeyRow).values(
                user_id=user_id,
                key_hash=hash_api_key(api_key),
                prefix=api_key[:API_KEY_PREFIX_LENGTH],
                created_at=self._clock(),
            )
        )
        return api_key

    async def revoke_api_key(self, api_key: str) -> bool:
        """Revoke a key; ``False`` if it was unknown or already revoked."""
        async with self._tx() as conn:
            result = await conn.execute(
                update(ApiKeyRow)
                .where(ApiKeyRow.key_hash == hash_api_key(api_key), ApiKeyRow.revoked_at.is_(None))
                .values(revoked_at=self._clock())
            )
            return bool(result.rowcount)

    async def authenticate(self, api_key: str) -> int | None:
        """The user id of a valid, unrevoked API key, else ``None``."""
        if not api_key:
            return None
        async with self._tx() as conn:
            return (
                await conn.execute(
                    select(ApiKeyRow.user_id).where(
                        ApiKeyRow.key_hash == hash_api_key(api_key), ApiKeyRow.revoked_at.is_(None)
                    )
                )
            ).scalar_one_or_none()

    async def get_user(self, user_id: int) -> User:
        async with self._tx() as conn:
            row = (await conn.execute(select(UserRow).where(UserRow.id == user_id))).first()
        if row is None:
            raise NotFoundError("user", user_id)
        return _user(row)

    async def get_user_by_name(self, name: str) -> User | None:
        async with self._tx() as conn:
            row = (await conn.execute(select(UserRow).where(UserRow.name == name))).first()
        return None if row is None else _user(row)

    # --- feeds ----------------------------------------------------------------------

    async def register_feed(self, url: str) -> tuple[Feed, bool]:
        """The feed for ``url``, creating it if no feed has the same normalised URL.

        Returns ``(feed, created)``. A new feed gets the next dense ``resource``
        (max + 1; deleted feeds leave holes, resources are never reused so the
        engine never confuses two feeds) and a fresh ``ping_token``. Concurrent
        registrations of the same URL return the same feed. Does not check
        whether the URL may be fetched (the feed layer's SSRF guard does).
        """
        url = url.strip()
        normalised = normalise_url(url)
        if len(normalised) > 2048:
            raise ValidationError("feed URL is longer than 2048 characters")
        next_resource = select(func.coalesce(func.max(FeedRow.resource), -1) + 1).scalar_subquery()
        # Two attempts: the second only runs when a concurrent registration of the
        # same URL won the race, and then finds that feed.
        for _attempt in range(2):
            try:
                async with self._tx() as conn:
                    if conn.dialect.name == "postgresql":
                        # Registrations are rare: serialise them so `max + 1` cannot
                        # hand the same resource to two feeds. (SQLite runs the
                        # INSERT … SELECT below under its single write lock.)
                        await conn.exec_driver_sql("LOCK TABLE feeds IN SHARE ROW EXCLUSIVE MODE")
                    existing = (
                        await conn.execute(
                            select(FeedRow).where(FeedRow.url_normalised == normalised)
                        )
                    ).first()
                    if existing is not None:
                        return _feed(existing), False
                    row = (
                        await conn.execute(
                            insert(FeedRow)
                            .values(
                                url=url,
                                url_normalised=normalised,
                                resource=next_resource,
                                ping_token=secrets.token_urlsafe(24),
                                consecutive_errors=0,
                                disabled=False,
                                created_at=self._clock(),
                            )
                            .returning(*_FEED_COLUMNS)
                        )
                    ).one()
                return _feed(row), True
            except StorageError as exc:
                if not isinstance(exc.__cause__, IntegrityError):
                    raise
        raise StorageError(f"could not register feed {url!r}: concurrent registrations collided")

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
        """Every feed with its probe, entry and referencing-profile counts, by id."""
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
        """Delete a feed with its probes, entries and EIs.

        Raises :class:`ConflictError` naming the profiles whose rules still read
        it, and :class:`FeedNotFoundError`.
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

    async def verify_ping_token(self, feed_id: int, token: str) -> bool:
        """Whether ``token`` is the feed's ping token (constant-time compare); ``False`` for unknown feeds."""
        async with self._tx() as conn:
            stored = (
                await conn.execute(select(FeedRow.ping_token).where(FeedRow.id == feed_id))
            ).scalar_one_or_none()
        return stored is not None and secrets.compare_digest(stored.encode(), token.encode())

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
