"""Stable entry identity, and the split of a document's entries into known and new.

The identity of an entry is, in order of preference (as reader and most feed
readers do):

1. its ``id`` / ``guid`` (RSS 2.0 §guid, Atom RFC 4287 §4.2.6), stripped;
2. else its link;
3. else ``sha256:`` + a hash of title, summary and date.

Identities longer than :data:`MAX_IDENTITY_CHARS` are replaced by their hash so
that the store can index them.  This module does not look at the feed URL:
identities are scoped to one feed by the caller.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Sequence
from datetime import datetime

from proxy.feeds.results import Entry, KnownEntries

__all__ = ["MAX_IDENTITY_CHARS", "entry_identity", "split_new"]

#: Longer identities are hashed (keeps the store's index small; real guids are far shorter).
MAX_IDENTITY_CHARS = 512


_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def _plain(text: str | None) -> str | None:
    """Text without markup, entities or whitespace runs.

    Parsers differ in how they sanitise HTML (feedparser strips unsafe
    attributes, fast parsers keep them); hashing the plain text keeps the
    identity of an id-less, link-less entry stable across parsers and
    cosmetic markup edits.
    """
    if text is None:
        return None
    return _SPACE.sub(" ", html.unescape(_TAG.sub("", text))).strip()


def _hash(*parts: str | None) -> str:
    h = hashlib.sha256()
    for part in parts:
        # A separator that cannot occur in text keeps ("ab", "c") and ("a", "bc") apart.
        h.update((part or "").encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return "sha256:" + h.hexdigest()


def entry_identity(
    *,
    id: str | None,
    link: str | None,
    title: str | None,
    summary: str | None,
    published: datetime | None,
) -> str:
    """Return the stable identity of one entry (never empty)."""
    for candidate in (id, link):
        if candidate is not None:
            stripped = candidate.strip()
            if stripped:
                if len(stripped) > MAX_IDENTITY_CHARS:
                    return _hash(stripped)
                return stripped
    date = published.isoformat() if published is not None else None
    return _hash(_plain(title), _plain(summary), date)


def split_new(
    entries: Sequence[Entry], known: KnownEntries
) -> tuple[tuple[Entry, ...], tuple[Entry, ...]]:
    """Deduplicate ``entries`` by identity (first occurrence wins) and pick the new ones.

    Returns ``(entries, new)`` in document order.  ``known`` is asked once,
    with this document's identities only, so the cost does not depend on how
    long the feed's history is.
    """
    unique: dict[str, Entry] = {}
    for entry in entries:
        unique.setdefault(entry.identity, entry)
    seen = known.known(unique.keys()) if unique else set()
    kept = tuple(unique.values())
    new = tuple(e for e in kept if e.identity not in seen)
    return kept, new
