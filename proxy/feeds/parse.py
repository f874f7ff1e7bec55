"""Parse a feed document into :class:`~proxy.feeds.results.Entry` values.

feedparser is the reference for correctness (ill-formed feeds, encodings,
sanitising, relative links), but it is slow: milliseconds per document.  The
hot path therefore uses ``fastfeedparser`` **only for documents of the shape
where it was measured to agree with feedparser** (``docs/parser-agreement.md``,
``benchmarks/machinery/parser_agreement.py``): UTF-8 XML, no DOCTYPE, an RSS 2.0 /
Atom 1.0 root, no bare ``&`` or rich Atom titles, and (after parsing) as many
entries as the document has ``<item>`` / ``<entry>`` elements, real ids, and no
identity that depends on feedparser's sanitiser.  Everything else, and every
fast-parser failure, goes to feedparser.  JSON Feed documents, which
feedparser 6 cannot read, go to fastfeedparser with no reference to agree
with (:func:`parse_json_feed`).

Before any parser runs, cheap byte-level checks turn hostile or useless input
into a typed :class:`FeedParseError`: empty bodies, HTML pages, and DTDs whose
entities reference other entities or would expand far beyond the document's
size (billion laughs, quadratic blow-up).  The body size itself is bounded by
the fetcher while streaming.

This module is synchronous and CPU-bound on purpose: the fetcher runs it in
an executor, off the event loop.  It does no I/O: feedparser is always given
a file object, never a string or bytes it might take for a URL or file name.
"""

from __future__ import annotations

import calendar
import dataclasses
import io
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin

from proxy.feeds.hints import PublisherHints, publisher_hints
from proxy.feeds.identity import entry_identity
from proxy.feeds.results import Entry

__all__ = [
    "FeedParseError",
    "ParsedFeed",
    "fast_path_eligible",
    "parse_document",
    "parse_json_feed",
    "parse_with_feedparser",
    "precheck",
]

#: Entity expansion above this many characters (and above 4× the document) is refused.
MAX_ENTITY_EXPANSION = 1_000_000

_ENTITY_DECL = re.compile(rb"<!ENTITY\s+(%\s+)?([^\s>]+)\s+(?:\"([^\"]*)\"|'([^']*)')", re.S)
_ENTITY_REF = re.compile(rb"&([A-Za-z_:][-A-Za-z0-9._:]*);")
_XML_DECL = re.compile(rb"^<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"']", re.S)
_CHARSET = re.compile(r"charset\s*=\s*\"?([A-Za-z0-9._-]+)", re.I)
_FIRST_TAG = re.compile(rb"<([A-Za-z_][-A-Za-z0-9._:]*)")
_ITEM_TAG = re.compile(rb"<(?:item|entry)[\s>/]")
_TTL = re.compile(rb"<ttl>\s*(\d{1,7})\s*</ttl>")
_ATOM10 = b"http://www.w3.org/2005/Atom"
# Not well-formed XML: an ampersand that starts no entity reference (feedparser recovers differently).
_BARE_AMP = re.compile(rb"&(?![A-Za-z_][-A-Za-z0-9._:]*;|#[0-9]+;|#x[0-9A-Fa-f]+;)")
# Atom text constructs other than plain text (RFC 4287 §3.1): feedparser sanitises/decodes them.
_RICH_TITLE = re.compile(rb"<title[^>]*\s(?:type|mode)\s*=\s*[\"'](?!text[\"'])")
_UTF8 = frozenset({"utf-8", "utf8"})


class FeedParseError(Exception):
    """The document is not a usable feed; ``reason`` is a stable code (see ``ParseError``)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


@dataclass(frozen=True, slots=True)
class ParsedFeed:
    """The entries of one document (document order, not deduplicated) and what else we use."""

    entries: tuple[Entry, ...]
    title: str | None
    ttl_minutes: int | None
    parser: str
    warning: str | None = None
    hints: PublisherHints | None = None
    """``<ttl>`` and the syndication module's schedule (:mod:`proxy.feeds.hints`), whichever parser ran."""


def _prolog_end(body: bytes) -> int:
    """Offset of the first element tag, skipping XML declaration, comments, PIs and DOCTYPE."""
    pos = 0
    n = len(body)
    while pos < n:
        lt = body.find(b"<", pos)
        if lt < 0:
            return n
        if body.startswith(b"<?", lt):
            end = body.find(b"?>", lt)
            pos = n if end < 0 else end + 2
        elif body.startswith(b"<!--", lt):
            end = body.find(b"-->", lt)
            pos = n if end < 0 else end + 3
        elif body.startswith(b"<!", lt):
            # DOCTYPE, possibly with an internal subset in brackets.
            bracket = body.find(b"[", lt)
            gt = body.find(b">", lt)
            if 0 <= bracket < gt:
                close = body.find(b"]", bracket)
                gt = body.find(b">", close) if close >= 0 else -1
            pos = n if gt < 0 else gt + 1
        else:
            return lt
    return n


def _root_tag(body: bytes) -> bytes:
    m = _FIRST_TAG.match(body, _prolog_end(body))
    return m.group(1).lower() if m else b""


# XML 1.0 Appendix F: how a document in a wide encoding starts (BOM or "<" padded with NULs).
_WIDE_ENCODINGS = (
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\x00<", "utf-32-be"),
    (b"<\x00\x00\x00", "utf-32-le"),
    (b"\xfe\xff", "utf-16"),
    (b"\xff\xfe", "utf-16"),
    (b"\x00<", "utf-16-be"),
    (b"<\x00", "utf-16-le"),
)


def _as_utf8_for_checks(body: bytes) -> bytes:
    """UTF-16/32 documents re-encoded as UTF-8, so byte-level checks see their markup too."""
    for start, encoding in _WIDE_ENCODINGS:
        if body.startswith(start):
            return body.decode(encoding, "replace").encode("utf-8")
    return body


def precheck(body: bytes) -> None:
    """Refuse, before any parser runs, what no parser should be given.

    Raises :class:`FeedParseError` with reason ``"empty"``, ``"not-a-feed"``
    (an HTML page) or ``"entity-expansion"``.
    """
    if not body.strip():
        raise FeedParseError("empty", "the response body is empty")
    body = _as_utf8_for_checks(body)
    if b"<!ENTITY" in body:
        _check_entities(body)
    head = body[:4096].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith((b"<!doctype html", b"<html")) or _root_tag(body[:65536]) == b"html":
        raise FeedParseError("not-a-feed", "the document is an HTML page, not a feed")


def _check_entities(body: bytes) -> None:
    # XML 1.0 §4.2: an internal entity's replacement text may reference other entities;
    # nesting is what makes billion laughs exponential, so it is refused outright.
    values: dict[bytes, int] = {}
    for m in _ENTITY_DECL.finditer(body):
        value = m.group(3) if m.group(3) is not None else (m.group(4) or b"")
        if m.group(1) or _ENTITY_REF.search(value) or b"%" in value:
            raise FeedParseError(
                "entity-expansion",
                f"entity {m.group(2).decode('ascii', 'replace')!r} references other entities",
            )
        values[m.group(2)] = len(value)
    if not values:
        return
    expanded = sum(values.get(ref.group(1), 0) for ref in _ENTITY_REF.finditer(body))
    if expanded > max(MAX_ENTITY_EXPANSION, 4 * len(body)):
        raise FeedParseError(
            "entity-expansion", f"entities would expand to {expanded} characters"
        )


def fast_path_eligible(body: bytes, content_type: str | None) -> bool:
    """True if ``body`` has the shape on which the fast parser agrees with feedparser.

    UTF-8 only (declared, or undeclared and valid), no DOCTYPE, a ``<rss>`` or
    Atom 1.0 ``<feed>`` root.  The rules come from the agreement measurement
    in ``docs/parser-agreement.md``.
    """
    if content_type:
        m = _CHARSET.search(content_type)
        if m and m.group(1).lower() not in _UTF8:
            return False
    start = 3 if body.startswith(b"\xef\xbb\xbf") else 0
    if body[start : start + 1] != b"<" and not body[start:start + 64].lstrip().startswith(b"<"):
        return False
    decl = _XML_DECL.match(body, start)
    if decl and decl.group(1).decode("ascii").lower() not in _UTF8:
        return False
    prolog = _prolog_end(body)
    if b"<!DOCTYPE" in body[:prolog] or b"<!doctype" in body[:prolog]:
        return False
    root = _FIRST_TAG.match(body, prolog)
    if root is None:
        return False
    tag = root.group(1)
    if tag == b"rss":
        rss_head = body[prolog : prolog + 200]
        if b'version="2.0"' not in rss_head and b"version='2.0'" not in rss_head:
            return False
    elif tag == b"feed":
        if _ATOM10 not in body[prolog : prolog + 1024]:
            return False
    else:
        return False
    if _BARE_AMP.search(body) or _RICH_TITLE.search(body):
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _utc_from_struct(value: Any) -> datetime | None:
    if not isinstance(value, time.struct_time):
        return None
    try:
        return datetime.fromtimestamp(calendar.timegm(value), UTC)
    except (OverflowError, ValueError, OSError):
        return None


def _utc_from_iso(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    elif parsed.tzinfo is not UTC:
        parsed = parsed.astimezone(UTC)
    # feedparser's struct_time has whole seconds
    return parsed.replace(microsecond=0) if parsed.microsecond else parsed


def _text(value: Any) -> str | None:
    # feedparser omits absent elements where fastfeedparser gives "": both mean "none".
    return value if isinstance(value, str) and value else None


def _first_content(value: Any) -> str | None:
    # fastfeedparser and feedparser both give dict subclasses (an ABC check is slow here)
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return _text(value[0].get("value"))
    return None


def _categories(value: Any) -> tuple[str, ...]:
    """The terms of the parsers' ``tags``, in order, without repeats.

    feedparser drops a repeated category, fastfeedparser keeps it; feedparser keeps an Atom
    category with a label but no term (RFC 4287 §4.2.2 requires ``term``), fastfeedparser
    drops it: terms only, once each, give the same with both.
    """
    if not isinstance(value, list):
        return ()
    terms: dict[str, None] = {}
    for tag in value:
        if isinstance(tag, dict):
            term = _text(tag.get("term"))
            if term is not None:
                terms[term] = None
    return tuple(terms)


def _make_entry(
    *,
    id: str | None,
    link: str | None,
    title: str | None,
    summary: str | None,
    content: str | None,
    published: datetime | None,
    author: str | None = None,
    categories: tuple[str, ...] = (),
) -> Entry:
    identity = entry_identity(id=id, link=link, title=title, summary=summary, published=published)
    return Entry(
        identity=identity,
        title=title,
        link=link,
        summary=summary,
        content=content,
        published=published,
        author=author,
        categories=categories,
    )


def _feedparser_entries(raw: Iterable[Mapping[str, Any]]) -> tuple[Entry, ...]:
    out: list[Entry] = []
    for e in raw:
        published = _utc_from_struct(e.get("published_parsed")) or _utc_from_struct(
            e.get("updated_parsed")
        )
        out.append(
            _make_entry(
                id=_text(e.get("id")),
                link=_text(e.get("link")),
                title=_text(e.get("title")),
                summary=_text(e.get("summary")),
                content=_first_content(e.get("content")),
                published=published,
                author=_text(e.get("author")),
                categories=_categories(e.get("tags")),
            )
        )
    return tuple(out)


def _ttl(body: bytes) -> int | None:
    m = _TTL.search(body)
    return int(m.group(1)) if m else None


def parse_with_feedparser(
    body: bytes, *, url: str, content_type: str | None = None
) -> ParsedFeed:
    """Parse with feedparser (the reference).  Raises :class:`FeedParseError` if no feed results.

    A bozo document that still yields a feed is accepted with ``warning`` set,
    as feed readers do; one that yields neither a version nor entries is
    ``"malformed"`` (or ``"not-a-feed"`` when it parsed cleanly as something else).
    """
    import feedparser  # imported lazily: a noticeable import cost for processes that never fall back

    headers = {"content-location": url}
    if content_type:
        headers["content-type"] = content_type
    try:
        # A file object, never bytes/str: feedparser would open a str as a URL or a file name.
        d = feedparser.parse(io.BytesIO(body), response_headers=headers)
    except Exception as exc:  # feedparser should not raise, but an ill-formed feed must not crash us
        raise FeedParseError("parser-crash", f"{type(exc).__name__}: {exc}") from exc
    version = d.get("version") or ""
    entries = _feedparser_entries(d.get("entries") or ())
    warning = None
    if d.get("bozo"):
        warning = str(d.get("bozo_exception") or "ill-formed document")
    if not version and not entries:
        if warning is not None:
            raise FeedParseError("malformed", warning)
        raise FeedParseError("not-a-feed", "no RSS or Atom feed found in the document")
    feed = d.get("feed") or {}
    return ParsedFeed(
        entries=entries,
        title=_text(feed.get("title")),
        ttl_minutes=_ttl(body),
        parser="feedparser",
        warning=warning,
    )


def _fast_link(e: Mapping[str, Any]) -> str | None:
    """The entry's alternate link as feedparser picks it (enclosures etc. are not links)."""
    links = e.get("links")
    if isinstance(links, list) and links:
        for item in links:
            if isinstance(item, dict) and item.get("rel") in (None, "alternate"):
                href = _text(item.get("href"))
                if href:
                    return href
        return ""  # links, but none of them an alternate: feedparser leaves link unset
    return _text(e.get("link"))


def _parse_fast(body: bytes, *, url: str) -> ParsedFeed | None:
    """fastfeedparser on an eligible document; ``None`` means "fall back to feedparser"."""
    import fastfeedparser

    try:
        # Tags are the entries' categories (rules may match them); measured at no extra cost.
        d = fastfeedparser.parse(
            body, include_tags=True, include_media=False, include_enclosures=False
        )
    except Exception:  # any fast-parser failure is a reason to ask the reference
        return None
    raw = d.get("entries") or []
    # fastfeedparser skips some entries feedparser keeps (and vice versa); a count
    # mismatch with the document's own <item>/<entry> elements sends it to feedparser.
    if len(raw) != len(_ITEM_TAG.findall(body)):
        return None
    # fastfeedparser invents an id (from the link) for Atom entries without <id>;
    # feedparser does not, and the identity would differ.
    if _root_tag(body) == b"feed" and body.count(b"<id>") < len(raw):
        return None
    # feedparser's author is "name (email)" for an Atom author with an email, and the
    # last of <author>/<dc:creator> in RSS; fastfeedparser gives the name, the first.
    if b"<email>" in body or (b"<author>" in body and b"creator>" in body):
        return None
    out: list[Entry] = []
    permalink_flags = b"isPermaLink" in body
    for e in raw:
        id_ = _text(e.get("id"))
        link = _fast_link(e)
        if link == "":
            link = None
        elif link is None:
            # feedparser's rule (RSS 2.0 guid isPermaLink defaults to true; Atom ids alike):
            # an entry without a link takes its id as link -- unless isPermaLink="false",
            # which fastfeedparser does not report.
            if permalink_flags or (id_ is not None and id_.startswith("/")):
                return None
            link = id_
        elif link == id_ and permalink_flags:
            # fastfeedparser also copies isPermaLink="false" guids into link; only
            # feedparser can tell, so such documents go to the reference.
            return None
        if link and "://" not in link:
            link = urljoin(url, link)
        title = _text(e.get("title"))
        out.append(
            _make_entry(
                id=id_,
                link=link,
                title=title,
                summary=_text(e.get("description")),
                content=_first_content(e.get("content")),
                published=_utc_from_iso(e.get("published")) or _utc_from_iso(e.get("updated")),
                author=_text(e.get("author")),
                categories=_categories(e.get("tags")),
            )
        )
    if any(e.identity.startswith("sha256:") for e in out):
        # The hash identity covers the summary, whose text depends on feedparser's
        # sanitiser (script/style content removed): only the reference gets it right.
        return None
    feed = d.get("feed") or {}
    return ParsedFeed(
        entries=tuple(out),
        title=_text(feed.get("title")),
        ttl_minutes=_ttl(body),
        parser="fast",
    )


def _is_json_feed(body: bytes) -> bool:
    head = body[:1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"{") and b"jsonfeed.org/version" in body[:65536]


def parse_json_feed(body: bytes, *, url: str) -> ParsedFeed:
    """A JSON Feed (https://jsonfeed.org/version/1.1) through fastfeedparser.

    feedparser 6 does not read JSON Feed, so there is no reference to agree
    with: this path is used only for documents that declare a jsonfeed.org
    version.  Raises :class:`FeedParseError` (``"malformed"``) for invalid JSON
    or a structure fastfeedparser rejects.
    """
    import fastfeedparser

    try:
        d = fastfeedparser.parse(
            body, include_tags=True, include_media=False, include_enclosures=False
        )
    except Exception as exc:  # invalid JSON, wrong types where strings are required, ...
        raise FeedParseError("malformed", f"invalid JSON Feed: {type(exc).__name__}: {exc}") from exc
    out: list[Entry] = []
    for e in d.get("entries") or []:
        link = _text(e.get("link"))
        if link and "://" not in link:
            link = urljoin(url, link)
        out.append(
            _make_entry(
                id=_text(e.get("id")),
                link=link,
                title=_text(e.get("title")),
                summary=_text(e.get("description")),
                content=_first_content(e.get("content")),
                published=_utc_from_iso(e.get("published")) or _utc_from_iso(e.get("updated")),
                author=_text(e.get("author")),  # the first of JSON Feed's "authors"
                categories=_categories(e.get("tags")),
            )
        )
    feed = d.get("feed") or {}
    return ParsedFeed(
        entries=tuple(out), title=_text(feed.get("title")), ttl_minutes=None, parser="jsonfeed"
    )


def parse_document(
    body: bytes, *, url: str, content_type: str | None = None, fast: bool = True
) -> ParsedFeed:
    """Precheck, then parse ``body`` (fast path where eligible, else feedparser).

    ``url`` is the final URL of the response (base for relative links).
    JSON Feed documents go to :func:`parse_json_feed`.  Raises
    :class:`FeedParseError`; never anything else for bad input.
    """
    if _is_json_feed(body):
        return parse_json_feed(body, url=url)
    precheck(body)
    parsed = _parse_fast(body, url=url) if fast and fast_path_eligible(body, content_type) else None
    if parsed is None:
        parsed = parse_with_feedparser(body, url=url, content_type=content_type)
    hints = publisher_hints(body)
    return parsed if hints is None else dataclasses.replace(parsed, hints=hints)
