"""FastAPI dependencies: the service, and the caller's user id from ``Authorization: Bearer KEY``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from proxy.api._cache import ProfilePages, ResponseCache, TtlMap
from proxy.errors import AuthError
from proxy.service import ProxyService
from proxy.store import ApiKey, hash_api_key

#: How long a heavy read's body and a valid API key are reused (issue 24.4): a key revoked
#: from another process stops working within this, a summary is at most this old.
READ_TTL_SECONDS = 1.0

_bearer = HTTPBearer(auto_error=False, description="An API key from `proxy users create NAME`.")


def get_service(request: Request) -> ProxyService:
    service: ProxyService = request.app.state.service
    return service


Service = Annotated[ProxyService, Depends(get_service)]


def get_cache(request: Request) -> ResponseCache:
    cache: ResponseCache = request.app.state.responses
    return cache


Cache = Annotated[ResponseCache, Depends(get_cache)]


def get_pages(request: Request) -> ProfilePages:
    pages: ProfilePages = request.app.state.profile_pages
    return pages


Pages = Annotated[ProfilePages, Depends(get_pages)]


async def get_user_id(
    request: Request,
    service: Service,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> int:
    """The user owning the API key; :class:`AuthError` (401) if missing, unknown or revoked.

    A valid key is remembered for :data:`READ_TTL_SECONDS` (by its hash), so a client polling
    the API costs no database query per request; unknown keys are always looked up."""
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise AuthError("missing API key: send 'Authorization: Bearer KEY'")
    keys: TtlMap = request.app.state.api_keys
    digest = hash_api_key(credentials.credentials)
    user_id = keys.get(digest)
    if user_id is not None:
        return user_id
    user_id = await service.store.authenticate(credentials.credentials)
    if user_id is None:
        raise AuthError("unknown or revoked API key")
    keys.put(digest, user_id)
    return user_id


UserId = Annotated[int, Depends(get_user_id)]


async def get_api_key(
    service: Service,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiKey:
    """The record of the API key the request carries (for ``/api/v1/keys``); 401 like ``UserId``."""
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise AuthError("missing API key: send 'Authorization: Bearer KEY'")
    key = await service.store.authenticate_key(credentials.credentials)
    if key is None:
        raise AuthError("unknown or revoked API key")
    return key


CurrentKey = Annotated[ApiKey, Depends(get_api_key)]
