"""WebSub, the pure part: discovery of a feed's hub, and content signatures (W3C WebSub 2018).

Discovery (§4): a publisher advertises its hub(s) and the topic's canonical URL with
``rel="hub"`` and ``rel="self"`` links, in the HTTP ``Link`` header (RFC 8288) or in the
document (``<atom:link>``, also inside an RSS ``<channel>``, or an HTML-style ``<link>``).
:func:`discover` reads both; per relation the header wins, as §4 says subscribers
should prefer it. Only the first hub is kept: the proxy subscribes through one hub.

Signatures (§7.1, §8): a hub signs each content distribution with
``X-Hub-Signature: method=hexdigest``, an HMAC of the raw body under the secret the
subscriber gave; :func:`signature_valid` checks it in constant time for the methods
the Recommendation names (sha1, sha256, sha384, sha512).

What this module does not do: any I/O, subscription state, or choosing whether to
subscribe (``proxy.service._websub`` does that).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from html import unescape
from urllib.parse import urljoin, urlsplit

__all__ = ["SIGNATURE_METHODS", "PushLinks", "discover", "parse_link_header", "sign", "signature_valid"]

#: §7.1: the methods a hub may sign with; anything else is refused.
SIGNATURE_METHODS = {
    "sha1": hashlib.sha1,
    "sha256": hashlib.sha256,
    "sha384": hashlib.sha384,
    "sha512": hashlib.sha512,
}

# A <link …> or <prefix:link …> start tag (atom:link in RSS, Atom's own link).
_LINK_TAG = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?link\b([^>]*)>", re.IGNORECASE)
_ATTR = re.compile(rb"""([A-Za-z_:][\w:.-]*)\s*=\s*("[^"]*"|'[^']*')""")
# Feed-level links come before the first item/entry; entries' links are not the feed's.
_FIRST_ITEM = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?(?:item|entry)\b", re.IGNORECASE)
_HEAD_LIMIT = 65536


@dataclass(frozen=True, slots=True)
class PushLinks:
    """What a feed advertises for push: its hub and its topic URL (``self``), absolute."""

    hub: str | None
    self_url: str | None


def _http_url(value: str, base: str) -> str | None:
    url = urljoin(base, value.strip()) if base else value.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return url


def parse_link_header(value: str | None, base: str = "") -> dict[str, str]:
    """RFC 8288 ``Link`` header to ``{rel: first absolute URL}``; a rel may list several
    relation types (``rel="hub self"``). Malformed links are skipped, never raised on."""
    found: dict[str, str] = {}
    if not value:
        return found
    # Split on commas outside <…> and quotes.
    links: list[str] = []
    depth_angle = False
    quoted = False
    start = 0
    for i, ch in enumerate(value):
        if ch == '"' and not depth_angle:
            quoted = not quoted
        elif ch == "<" and not quoted:
            depth_angle = True
        elif ch == ">" and not quoted:
            depth_angle = False
        elif ch == "," and not quoted and not depth_angle:
            links.append(value[start:i])
            start = i + 1
    links.append(value[start:])
    for link in links:
        link = link.strip()
        if not link.startswith("<") or ">" not in link:
            continue
        target, _, params = link[1:].partition(">")
        rels: list[str] = []
        for param in params.split(";"):
            name, eq, val = param.strip().partition("=")
            if eq and name.strip().lower() == "rel":
                rels = val.strip().strip('"').lower().split()
                break
        url = _http_url(target, base)
        if url is None:
            continue
        for rel in rels:
            found.setdefault(rel, url)
    return found


def _document_links(body: bytes, base: str) -> dict[str, str]:
    head = body[:_HEAD_LIMIT]
    item = _FIRST_ITEM.search(head)
    if item is not None:
        head = head[: item.start()]
    found: dict[str, str] = {}
    for tag in _LINK_TAG.finditer(head):
        attrs = {
            m.group(1).lower(): unescape(m.group(2)[1:-1].decode("utf-8", "replace"))
            for m in _ATTR.finditer(tag.group(1))
        }
        href = attrs.get(b"href")
        rel = attrs.get(b"rel")
        if not href or not rel:
            continue
        url = _http_url(href, base)
        if url is None:
            continue
        for r in rel.lower().split():
            found.setdefault(r, url)
    return found


def discover(body: bytes, link_header: str | None, base_url: str) -> PushLinks | None:
    """The hub and self URLs a feed advertises (§4), or ``None`` when it names no hub.

    The ``Link`` header wins over the document, relation by relation; relative URLs
    are resolved against ``base_url`` (the URL the document was fetched from).
    """
    header = parse_link_header(link_header, base_url)
    document = _document_links(body, base_url)
    hub = header.get("hub") or document.get("hub")
    if hub is None:
        return None
    return PushLinks(hub=hub, self_url=header.get("self") or document.get("self"))


def sign(method: str, secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature`` value a hub sends for ``body`` (tests, and the farm)."""
    digest = hmac.new(secret.encode(), body, SIGNATURE_METHODS[method]).hexdigest()
    return f"{method}={digest}"


def signature_valid(header: str | None, secret: str, body: bytes) -> bool:
    """§8: whether ``X-Hub-Signature`` is a valid HMAC of ``body`` under ``secret``.

    A missing header, an unknown method or a wrong digest are all invalid; the
    comparison is constant-time (``hmac.compare_digest``).
    """
    if not header:
        return False
    method, eq, digest = header.strip().partition("=")
    algorithm = SIGNATURE_METHODS.get(method.strip().lower())
    if not eq or algorithm is None:
        return False
    expected = hmac.new(secret.encode(), body, algorithm).hexdigest()
    return hmac.compare_digest(expected, digest.strip().lower())
