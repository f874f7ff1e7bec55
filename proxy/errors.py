"""The proxy's one error hierarchy, shared by every layer.

Every error the project raises on purpose derives from :class:`ProxyError`.
Subclasses carry the identifiers a caller needs (``kind`` and ``id`` for a
missing object) and, where one fits, also subclass the matching builtin so
generic code (``except LookupError``) keeps working.

The API layer maps these to HTTP status codes in ONE exception handler
(``NotFoundError`` → 404, ``ConflictError`` → 409, ``ValidationError`` → 422,
``AuthError`` → 401, ``RateLimitedError`` → 429, ``StorageError`` and ``StandbyError`` → 503);
services never raise
``HTTPException``. This module deliberately knows nothing about HTTP.

``proxy.core.model.WorkloadError`` stays a plain ``ValueError`` on purpose:
``proxy.core`` imports nothing of the rest of the project.
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "ConflictError",
    "FeedNotFoundError",
    "FencedError",
    "NotFoundError",
    "ProfileNotFoundError",
    "ProxyError",
    "RateLimitedError",
    "SettingsError",
    "StandbyError",
    "StorageError",
    "ValidationError",
]


class ProxyError(Exception):
    """Root of every error the proxy raises deliberately."""


class NotFoundError(ProxyError, LookupError):
    """No ``kind`` with identifier ``id`` exists (or the caller may not see it).

    Another user's object is reported exactly like a missing one, so that
    identifiers never leak across users.
    """

    def __init__(self, kind: str, id: object) -> None:
        self.kind = kind
        self.id = id
        super().__init__(f"{kind} {id!r} not found")


class FeedNotFoundError(NotFoundError):
    """No feed with this id."""

    def __init__(self, feed_id: object) -> None:
        super().__init__("feed", feed_id)


class ProfileNotFoundError(NotFoundError):
    """No profile with this id for this user."""

    def __init__(self, profile_id: object) -> None:
        super().__init__("profile", profile_id)


class ConflictError(ProxyError):
    """The request contradicts the stored state (duplicate name, object still in use …)."""


class ValidationError(ProxyError, ValueError):
    """Input is malformed; the message names the offending field and says what to fix."""


class SettingsError(ProxyError):
    """The configuration is invalid; the message names the environment variable and the reason."""


class StorageError(ProxyError):
    """The database failed (unreachable, locked, driver error); the cause is chained.

    ``unavailable``: the database is away (connection lost or refused, locked), so the
    same write may succeed later; otherwise it refused this statement."""

    def __init__(self, message: str, *, unavailable: bool = False) -> None:
        super().__init__(message)
        self.unavailable = unavailable


class AuthError(ProxyError):
    """Missing, malformed, unknown or revoked API key."""


class StandbyError(ProxyError):
    """Another process holds the chronon loop's lease on this database.

    Raised by changes only the loop's holder may make (a standby answers reads
    only), and at start-up with ``PROXY_STANDBY=exit``. ``holder`` names the
    lease's holder when known.
    """

    def __init__(self, message: str, holder: str | None = None) -> None:
        self.holder = holder
        super().__init__(message)


class RateLimitedError(ProxyError):
    """Too many requests of one kind for one object (pings of a feed); try again later.

    ``retry_after`` is how many seconds until one more would be accepted (HTTP 429
    with ``Retry-After``).
    """

    def __init__(self, message: str, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__(message)
class FencedError(StandbyError):
    """A write carried a lease epoch that is no longer the lease's: the database refused it.

    Raised inside the write's own transaction (issue 21's fencing), so nothing of
    it is stored: a deposed leader that has not noticed yet loses its late writes,
    not the new leader's state. ``epoch`` is the stale one the write carried.
    """

    def __init__(self, lease: str, holder: str, epoch: int, current: str) -> None:
        self.lease = lease
        self.epoch = epoch
        super().__init__(
            f"write refused: lease {lease!r} epoch {epoch} of {holder} is no longer current "
            f"({current}); another process leads now", holder)
