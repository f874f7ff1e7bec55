"""Feed documents the farm serves: entries, RSS 2.0 / Atom rendering, hostile bodies.

Pure functions over immutable values; the server in ``feedfarm`` caches their
output per feed version.  Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import enum
import gzip
import hashlib
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from xml.sax.saxutils import escape, quoteattr


class FeedFormat(enum.StrEnum):
    """The document syntax of a feed; the URL suffix selects it (``.xml`` / ``.atom``)."""

    RSS = "rss"
    ATOM = "atom"

    @property
    def suffix(self) -> str:
        return ".xml" if self is FeedFormat.RSS else ".atom"

    @property
    def content_type(self) -> str:
        if self is FeedFormat.RSS:
            return "application/rss+xml; charset=utf-8"
        return "application/atom+xml; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Entry:
    """One published entry of one feed, as every rendering shows it."""

    entry_id: str
    """Globally unique: the RSS ``guid`` (isPermaLink="false") and the Atom ``id``."""
    feed_id: str
    seq: int
    title: str
    summary: str
    published: datetime
    """UTC-aware publication date (trace time mapped onto the calendar)."""
    link_path: str
    """Path of the entry's page on the farm; rendered as an absolute URL."""


def entry_id_for(feed_id: str, seq: int) -> str:
    """The entry id the farm gives the ``seq``-th entry of a feed (a URN, valid as an Atom id)."""
    return f"urn:feedfarm:{feed_id}:{seq}"


# A word list reads better as one string than as 25 one-word lines.
_WORDS = (  # noqa: SIM905
    "market energy report city council weather river election museum football "
    "harvest railway bridge festival science budget hospital school review storm "
    "airport library concert garden opera"
).split()


def default_entry_text(feed_id: str, seq: int) -> tuple[str, str]:
    """Deterministic filler text for entry ``seq`` of a feed (no keywords on purpose)."""
    h = zlib.crc32(feed_id.encode()) + seq * 7919
    words = [_WORDS[(h >> k) % len(_WORDS)] for k in range(0, 24, 3)]
    title = f"{words[0].title()} {words[1]} {words[2]}: entry {seq} of feed {feed_id}"
    summary = (
        f"Entry {seq} of feed {feed_id} reports on the {words[3]} and the {words[4]} "
        f"near the {words[5]}; readers of the {words[6]} pages follow the {words[7]} story. "
        "Synthetic text from the local feed farm, long enough to look like a real summary."
    )
    return title, summary


def http_date(when: datetime) -> str:
    """RFC 9110 §5.6.7 IMF-fixdate, the form of Last-Modified and Retry-After dates."""
    return format_datetime(when.astimezone(UTC).replace(microsecond=0), usegmt=True)


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def syndication_schedule(seconds: float) -> tuple[str, int]:
    """``(updatePeriod, updateFrequency)`` of the syndication module closest to one update per ``seconds``:
    the shortest period holding at least one update, the frequency rounded (at least 1)."""
    for period, length in (("hourly", 3600.0), ("daily", 86_400.0), ("weekly", 604_800.0)):
        if seconds <= length:
            return period, max(1, round(length / seconds))
    return "yearly", max(1, round(31_556_952.0 / seconds))


def render_rss(
    feed_id: str, base_url: str, entries: Iterable[Entry], updated: datetime, hub: str | None = None,
    interval: float | None = None,
) -> bytes:
    """An RSS 2.0 document listing ``entries`` newest first; with ``hub``, the channel
    advertises it and its own URL as ``<atom:link rel="hub"/"self">`` (WebSub §4); with
    ``interval``, the syndication module states one update per that many seconds, as
    ``sy:updatePeriod`` and ``sy:updateFrequency`` (:func:`syndication_schedule`)."""
    home = f"{base_url}/feeds/{feed_id}"
    ns = ' xmlns:atom="http://www.w3.org/2005/Atom"' if hub else ""
    if interval is not None:
        ns += ' xmlns:sy="http://purl.org/rss/1.0/modules/syndication/"'
    parts = [
        f'<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"{ns}><channel>',
        f"<title>Farm feed {escape(feed_id)}</title><link>{escape(home)}</link>",
        f"<description>Synthetic feed {escape(feed_id)} of the local feed farm</description>",
        f"<lastBuildDate>{http_date(updated)}</lastBuildDate>",
    ]
    if hub:
        parts.append(f'<atom:link rel="hub" href={quoteattr(hub)}/>'
                     f'<atom:link rel="self" href={quoteattr(home + ".xml")}/>')
    if interval is not None:
        period, times = syndication_schedule(interval)
        parts.append(f"<sy:updatePeriod>{period}</sy:updatePeriod><sy:updateFrequency>{times}</sy:updateFrequency>")
    parts.extend(
        f"<item><title>{escape(e.title)}</title>"
        f"<link>{escape(base_url + e.link_path)}</link>"
        f'<guid isPermaLink="false">{escape(e.entry_id)}</guid>'
        f"<pubDate>{http_date(e.published)}</pubDate>"
        f"<description>{escape(e.summary)}</description></item>"
        for e in entries
    )
    parts.append("</channel></rss>\n")
    return "\n".join(parts).encode()


def render_atom(
    feed_id: str, base_url: str, entries: Iterable[Entry], updated: datetime, hub: str | None = None
) -> bytes:
    """An Atom (RFC 4287) document listing ``entries`` newest first; with ``hub``, a
    ``<link rel="hub">`` beside its ``rel="self"`` (WebSub §4)."""
    home = f"{base_url}/feeds/{feed_id}"
    parts = [
        '<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">',
        f"<title>Farm feed {escape(feed_id)}</title>",
        f"<id>urn:feedfarm:{escape(feed_id)}</id>",
        f"<updated>{_rfc3339(updated)}</updated>",
        f'<link rel="self" href={quoteattr(home + ".atom")}/><link href={quoteattr(home)}/>',
        f"<link rel=\"hub\" href={quoteattr(hub)}/>" if hub else "",
        # RFC 4287 §4.1.1: a feed without per-entry authors needs a feed-level author.
        "<author><name>feed farm</name></author>",
    ]
    parts.extend(
        f"<entry><title>{escape(e.title)}</title><id>{escape(e.entry_id)}</id>"
        f"<link href={quoteattr(base_url + e.link_path)}/>"
        f"<published>{_rfc3339(e.published)}</published>"
        f"<updated>{_rfc3339(e.published)}</updated>"
        f"<summary>{escape(e.summary)}</summary></entry>"
        for e in entries
    )
    parts.append("</feed>\n")
    return "\n".join(parts).encode()


@dataclass(frozen=True, slots=True)
class Rendered:
    """One feed version in one format, ready to send: body, pre-compressed body, validators."""

    body: bytes
    etag: str
    """Strong ETag of the identity encoding."""
    last_modified: str
    content_type: str
    _gzip: list[bytes]

    @classmethod
    def build(cls, body: bytes, last_modified: datetime, fmt: FeedFormat) -> Rendered:
        digest = hashlib.blake2b(body, digest_size=8).hexdigest()
        return cls(body, f'"{digest}"', http_date(last_modified), fmt.content_type, [])

    @property
    def etag_gzip(self) -> str:
        # A strong ETag names one representation (RFC 9110 §8.8.3), so the gzip
        # encoding gets its own; conditional requests accept either.
        return self.etag[:-1] + '-gz"'

    def gzipped(self) -> bytes:
        """The gzip body, compressed once on first use (mtime 0 keeps it reproducible)."""
        if not self._gzip:
            self._gzip.append(gzip.compress(self.body, compresslevel=6, mtime=0))
        return self._gzip[0]


def html_page(feed_id: str) -> bytes:
    """What a feed URL returns when a site replaced its feed with a web page."""
    return (
        "<!DOCTYPE html>\n<html><head><title>Welcome</title></head>"
        f"<body><h1>Our new website</h1><p>The feed {escape(feed_id)} has moved. "
        "Please visit our homepage.</p></body></html>\n"
    ).encode()


def malformed_document(body: bytes) -> bytes:
    """A feed cut off mid-document with an undefined entity and an unclosed tag."""
    cut = body[: max(len(body) // 2, 80)]
    return cut + b"<item><title>broken &nbsp; entity & bare ampersand</titl></item"


def xml_bomb() -> bytes:
    """The billion-laughs document (10 levels of 10x entity expansion, ~3 GB expanded).

    A safe parser (defusedxml, or one with entity expansion off) refuses it; a
    naive one tries to allocate gigabytes.  The body itself is under 1 KB.
    """
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        "<!DOCTYPE rss [",
        ' <!ENTITY lol0 "lol">',
    ]
    for level in range(1, 10):
        ref = f"&lol{level - 1};"
        lines.append(f' <!ENTITY lol{level} "{ref * 10}">')
    lines.append("]>")
    lines.append(
        '<rss version="2.0"><channel><title>bomb</title><link>http://127.0.0.1/</link>'
        "<description>&lol9;</description><item><title>&lol9;</title></item></channel></rss>"
    )
    return ("\n".join(lines) + "\n").encode()


def huge_prefix(feed_id: str) -> bytes:
    """The start of a ``huge`` body: a plausible RSS head whose description never ends."""
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel>'
        f"<title>Huge feed {escape(feed_id)}</title><link>http://127.0.0.1/</link><description>"
    ).encode()


HUGE_SUFFIX = b"</description></channel></rss>\n"


def format_of(
    formats: str | FeedFormat | Mapping[str, FeedFormat | str], feed_id: str, index: int
) -> FeedFormat:
    """Feed ``feed_id``'s format (the ``index``-th feed) from a farm's ``formats`` argument."""
    if isinstance(formats, Mapping):
        try:
            return FeedFormat(formats.get(feed_id, FeedFormat.RSS))
        except ValueError:
            raise ValueError(
                f"feed {feed_id!r}: format must be 'rss' or 'atom', got {formats[feed_id]!r}"
            ) from None
    if formats == "mixed":
        return FeedFormat.RSS if index % 2 == 0 else FeedFormat.ATOM
    try:
        return FeedFormat(formats)
    except ValueError:
        raise ValueError(
            f"formats must be 'rss', 'atom', 'mixed' or a mapping, got {formats!r}"
        ) from None
