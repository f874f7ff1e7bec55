"""Standard Webhooks signatures (https://www.standardwebhooks.com, spec v1).

A secret is ``whsec_`` + base64 of 24 random bytes. A message is signed as
``v1,`` + base64(HMAC-SHA256(secret bytes, "{id}.{timestamp}.{body}")), sent in
``webhook-signature``; during a secret rotation's overlap the header carries one
signature per secret, separated by a space (spec: "multiple signatures"), so a
receiver holding either secret verifies.

Implemented here (a dozen lines of hmac) rather than with the ``standardwebhooks``
package, which the tests use as the independent verifier: a signer checked only
against itself proves nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Iterable

__all__ = ["SECRET_PREFIX", "new_secret", "sign", "webhook_headers"]

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A fresh endpoint secret (192 random bits), ``whsec_``-prefixed base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 signature>`` of one message under one secret."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def webhook_headers(
    secrets_: Iterable[str], msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers, signed with every given secret (newest first)."""
    signatures = " ".join(sign(s, msg_id, timestamp, body) for s in secrets_)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signatures,
    }
