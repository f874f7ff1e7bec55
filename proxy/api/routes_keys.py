"""``/api/v1/keys``: your API keys. Rotate by creating a new key, then revoking the old one
(in the same request with ``revoke_current``, or later by its id). Only a key's prefix is
kept in clear; the key itself is shown once, in the answer that created it."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Request, status
from pydantic import BaseModel, ConfigDict, Field

from proxy.api._cache import TtlMap
from proxy.api.deps import CurrentKey, Service, UserId
from proxy.store import ApiKey

router = APIRouter(prefix="/api/v1/keys", tags=["keys"])


class KeyIn(BaseModel):
    """``revoke_current``: also revoke the key this request is sent with (a one-step rotation)."""

    model_config = ConfigDict(extra="forbid")

    revoke_current: bool = False


class KeyOut(BaseModel):
    """One of your API keys; ``key`` only in the answer that created it."""

    id: int
    prefix: str = Field(description="The key's first characters, to tell keys apart.")
    created_at: dt.datetime
    revoked_at: dt.datetime | None
    current: bool = Field(False, description="This request was sent with this key.")
    key: str | None = Field(None, description="The new key: store it now, it is not shown again.")

    @classmethod
    def of(cls, k: ApiKey, *, current: ApiKey | None = None, key: str | None = None) -> KeyOut:
        return cls(id=k.id, prefix=k.prefix, created_at=k.created_at, revoked_at=k.revoked_at,
                   current=current is not None and k.id == current.id, key=key)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=KeyOut)
async def create_key(request: Request, service: Service, current: CurrentKey,
                     body: KeyIn | None = None) -> KeyOut:
    """A new API key for you. With ``{"revoke_current": true}`` the key this request carries
    stops working at once; otherwise revoke it later with ``DELETE /api/v1/keys/{id}``."""
    new_key = await service.store.create_api_key(current.user_id)
    record = await service.store.authenticate_key(new_key)
    assert record is not None  # just created, unrevoked
    if body is not None and body.revoke_current:
        await service.store.revoke_api_key_id(current.user_id, current.id)
        _forget_keys_of(request, current.user_id)
    return KeyOut.of(record, key=new_key)


@router.get("", response_model=list[KeyOut])
async def list_keys(service: Service, current: CurrentKey) -> list[KeyOut]:
    """Your API keys, revoked ones too, oldest first."""
    return [KeyOut.of(k, current=current) for k in await service.store.list_api_keys(current.user_id)]


@router.delete("/{key_id}", response_model=KeyOut)
async def revoke_key(request: Request, key_id: int, service: Service, user: UserId) -> KeyOut:
    """Revoke one of your keys (the one you send too, if you name it). Another user's key
    answers 404 like a missing one."""
    revoked = await service.store.revoke_api_key_id(user, key_id)
    _forget_keys_of(request, user)
    return KeyOut.of(revoked)


def _forget_keys_of(request: Request, user_id: int) -> None:
    """A revoked key stops working at once in this process: the API's one-second memory of
    valid keys (``proxy.api.deps.get_user_id``) forgets the user's."""
    keys: TtlMap = request.app.state.api_keys
    keys.forget_value(user_id)
