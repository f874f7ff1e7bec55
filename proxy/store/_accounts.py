"""Users and their API keys."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.errors import (
    ConflictError,
    NotFoundError,
    ValidationError,
)

# The feed layer owns URL canonicalisation; dedupe must use the very same function.
from proxy.store._base import (
    API_KEY_PREFIX_LENGTH,
    StoreBase,
    _user,
    hash_api_key,
)
from proxy.store._models import (
    ApiKeyRow,
    UserRow,
)
from proxy.store._types import (
    ApiKey,
    User,
)


class Accounts(StoreBase):
    """Users with their API keys: who may call the API, and as whom."""

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

    async def list_users(self) -> list[User]:
        """Every user, by id."""
        async with self._tx() as conn:
            rows = (await conn.execute(select(UserRow).order_by(UserRow.id))).all()
        return [_user(row) for row in rows]

    async def delete_user(self, user_id: int) -> None:
        """Delete a user with everything it owns (keys, registrations, profiles, targets:
        ``ON DELETE CASCADE``); a feed nobody registers any more stays until housekeeping
        collects it. :class:`NotFoundError` if there is no such user."""
        async with self._tx() as conn:
            result = await conn.execute(delete(UserRow).where(UserRow.id == user_id))
            if not result.rowcount:
                raise NotFoundError("user", user_id)

    async def list_api_keys(self, user_id: int) -> list[ApiKey]:
        """A user's API keys (revoked ones too), oldest first."""
        async with self._tx() as conn:
            rows = (
                await conn.execute(
                    select(ApiKeyRow).where(ApiKeyRow.user_id == user_id).order_by(ApiKeyRow.id)
                )
            ).all()
        return [_api_key(row) for row in rows]

    async def authenticate_key(self, api_key: str) -> ApiKey | None:
        """The valid, unrevoked key record of ``api_key`` (with its user), else ``None``."""
        if not api_key:
            return None
        async with self._tx() as conn:
            row = (
                await conn.execute(
                    select(ApiKeyRow).where(
                        ApiKeyRow.key_hash == hash_api_key(api_key), ApiKeyRow.revoked_at.is_(None)
                    )
                )
            ).first()
        return None if row is None else _api_key(row)

    async def active_key_user(self, key_id: int) -> int | None:
        """The user of API key ``key_id`` while the key is unrevoked, else ``None`` (a web
        session holds the key's id, so revoking the key ends the session too)."""
        async with self._tx() as conn:
            return (
                await conn.execute(
                    select(ApiKeyRow.user_id).where(
                        ApiKeyRow.id == key_id, ApiKeyRow.revoked_at.is_(None)
                    )
                )
            ).scalar_one_or_none()

    async def revoke_api_key_id(self, user_id: int, key_id: int) -> ApiKey:
        """Revoke the user's key ``key_id`` (already revoked: unchanged). Another user's key
        answers :class:`NotFoundError` exactly like a missing one."""
        async with self._tx() as conn:
            await conn.execute(
                update(ApiKeyRow)
                .where(ApiKeyRow.id == key_id, ApiKeyRow.user_id == user_id,
                       ApiKeyRow.revoked_at.is_(None))
                .values(revoked_at=self._clock())
            )
            row = (
                await conn.execute(
                    select(ApiKeyRow).where(ApiKeyRow.id == key_id, ApiKeyRow.user_id == user_id)
                )
            ).first()
        if row is None:
            raise NotFoundError("api key", key_id)
        return _api_key(row)


def _api_key(row: Any) -> ApiKey:
    return ApiKey(id=row.id, user_id=row.user_id, prefix=row.prefix, created_at=row.created_at,
                  revoked_at=row.revoked_at)
