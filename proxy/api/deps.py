"""FastAPI dependencies: the service, and the caller's user id from ``Authorization: Bearer KEY``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from proxy.errors import AuthError
from proxy.service import ProxyService
from proxy.store import ApiKey

_bearer = HTTPBearer(auto_error=False, description="An API key from `proxy users create NAME`.")


def get_service(request: Request) -> ProxyService:
    service: ProxyService = request.app.state.service
    return service


Service = Annotated[ProxyService, Depends(get_service)]


async def get_user_id(
    service: Service,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> int:
    """The user owning the API key; :class:`AuthError` (401) if missing, unknown or revoked."""
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise AuthError("missing API key: send 'Authorization: Bearer KEY'")
    user_id = await service.store.authenticate(credentials.credentials)
    if user_id is None:
        raise AuthError("unknown or revoked API key")
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
