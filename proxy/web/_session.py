"""The web session: a signed, HTTP-only cookie naming the API key the user signed in with.

The cookie holds ``{"k": key id, "u": user id, "c": CSRF token}`` signed and timestamped
by itsdangerous (what Starlette's own ``SessionMiddleware`` uses), never the key itself.
Every request re-checks that the key is still unrevoked (``Store.active_key_user``), so
revoking a key, rotating it with ``proxy users rotate`` or deleting the user ends the
session at once. The CSRF token is the synchronizer-token pattern (OWASP CSRF cheat sheet):
every form carries it in a hidden field and every POST must send it back, compared in
constant time; ``SameSite=Lax`` is a second line, not the defence.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer

COOKIE = "proxy_ui_session"


@dataclass(frozen=True, slots=True)
class WebSession:
    """A signed-in browser: the user, the API key it signed in with, its CSRF token."""

    user_id: int
    key_id: int
    csrf: str

    def csrf_ok(self, sent: str | None) -> bool:
        return sent is not None and hmac.compare_digest(sent.encode(), self.csrf.encode())


class SessionCodec:
    """Signs sessions into cookie values and reads them back (``None``: absent, forged,
    or older than ``max_age_seconds``)."""

    def __init__(self, secret: str | None, *, max_age_seconds: float) -> None:
        # No configured secret: a random one, so a session dies with the process (documented).
        self._serializer = URLSafeTimedSerializer(secret or secrets.token_urlsafe(32), salt="proxy-ui")
        self.max_age_seconds = max_age_seconds

    def new(self, user_id: int, key_id: int) -> WebSession:
        return WebSession(user_id=user_id, key_id=key_id, csrf=secrets.token_urlsafe(24))

    def dumps(self, session: WebSession) -> str:
        return self._serializer.dumps({"u": session.user_id, "k": session.key_id, "c": session.csrf})

    def loads(self, value: str | None) -> WebSession | None:
        if not value:
            return None
        try:
            data: Any = self._serializer.loads(value, max_age=int(self.max_age_seconds))
            return WebSession(user_id=int(data["u"]), key_id=int(data["k"]), csrf=str(data["c"]))
        except (BadSignature, KeyError, TypeError, ValueError):
            return None
