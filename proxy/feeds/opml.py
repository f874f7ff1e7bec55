"""OPML subscription lists in and out (issue 20): ``parse_opml(document)`` and ``render_opml(feeds)``.

Parsing is listparser's (it knows OPML 1.0/2.0 and the variants readers export, and it
flattens nested folders: each ``xmlUrl`` outline is one feed whatever its depth). The
document is first read by defusedxml, so an entity bomb or an external entity is
refused before listparser sees it, and a document that is not XML at all gets one
clear error instead of an empty list. Rendering writes OPML 2.0 with the standard
library's ElementTree (escaping done by it, not by us).

This module does no I/O and does not check URLs: the service does, per outline.
"""

from __future__ import annotations

import datetime as dt
import email.utils
from collections.abc import Iterable
from dataclasses import dataclass
from xml.etree import ElementTree

import defusedxml.ElementTree
import listparser
from defusedxml import DefusedXmlException

from proxy.errors import ValidationError

__all__ = ["MAX_OPML_BYTES", "OpmlError", "OpmlFeed", "parse_opml", "render_opml"]

#: The largest OPML document accepted (10,000 outlines with long titles take ~2 MB).
MAX_OPML_BYTES = 20 * 1024 * 1024


class OpmlError(ValidationError):
    """The document is not an OPML subscription list we can read; the message says why."""

    loc = "file"


@dataclass(frozen=True, slots=True)
class OpmlFeed:
    """One feed outline: its ``xmlUrl`` and title, whatever folder it sat in."""

    url: str
    title: str


def parse_opml(document: bytes) -> list[OpmlFeed]:
    """The feed outlines of an OPML document, in document order (nested folders flattened).

    Raises :class:`OpmlError` for an empty, oversized, malformed or unsafe document, or a
    document that is XML but not OPML. Duplicates are kept (the caller reports them)."""
    if not document.strip():
        raise OpmlError("the OPML document is empty")
    if len(document) > MAX_OPML_BYTES:
        raise OpmlError(f"the OPML document is {len(document)} bytes; the limit is {MAX_OPML_BYTES}")
    try:
        root = defusedxml.ElementTree.fromstring(document)
    except DefusedXmlException as exc:
        raise OpmlError(f"the OPML document was refused: {type(exc).__name__} (entities and DTDs are not allowed)") from None
    except ElementTree.ParseError as exc:
        raise OpmlError(f"the OPML document is not well-formed XML: {exc}") from None
    if root.tag.rsplit("}", 1)[-1].lower() != "opml":
        raise OpmlError(f"the document's root element is <{root.tag}>, not <opml>")
    # bytes, never str: listparser.parse() takes a str that looks like a URL as one to fetch.
    parsed = listparser.parse(document)
    return [OpmlFeed(url=str(f.get("url", "")).strip(), title=str(f.get("title", "") or ""))
            for f in parsed.get("feeds", [])]


def render_opml(feeds: Iterable[OpmlFeed], *, title: str, now: dt.datetime) -> bytes:
    """An OPML 2.0 document with one ``type="rss"`` outline per feed, in the given order."""
    opml = ElementTree.Element("opml", version="2.0")
    head = ElementTree.SubElement(opml, "head")
    ElementTree.SubElement(head, "title").text = title
    ElementTree.SubElement(head, "dateCreated").text = email.utils.format_datetime(now.astimezone(dt.UTC), usegmt=True)
    body = ElementTree.SubElement(opml, "body")
    for feed in feeds:
        text = feed.title or feed.url
        ElementTree.SubElement(body, "outline", type="rss", text=text, title=text, xmlUrl=feed.url)
    ElementTree.indent(opml)
    out: bytes = ElementTree.tostring(opml, encoding="utf-8", xml_declaration=True)
    return out + b"\n"
