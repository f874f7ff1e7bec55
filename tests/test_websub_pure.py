"""WebSub's pure part (proxy.feeds.websub): discovery (§4) and signatures (§7.1, §8) as tables."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from proxy.feeds.websub import PushLinks, discover, parse_link_header, sign, signature_valid

BASE = "http://feeds.example/f/1.xml"

ATOM = b"""<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom">
<title>t</title><link rel="hub" href="https://hub.example/"/><link rel="self" href="/f/1.atom"/>
<entry><link rel="hub" href="https://entry-hub.example/"/></entry></feed>"""
RSS = b"""<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"><channel><title>t</title>
<link>http://feeds.example/</link><atom:link rel='self' href='http://feeds.example/f/1.xml?a=1&amp;b=2'/>
<atom:link href="http://hub.example/h" rel="hub"/><item><title>x</title></item></channel></rss>"""
RSS_NO_HUB = b"""<rss version="2.0"><channel><title>t</title><link>http://feeds.example/</link>
<item><atom:link rel="hub" href="http://item.example/"/></item></channel></rss>"""
HUB_SELF_ONE_LINK = b"""<feed><link rel="hub self" href="http://both.example/"/></feed>"""


@pytest.mark.parametrize(("body", "header", "expected"), [
    (ATOM, None, PushLinks("https://hub.example/", "http://feeds.example/f/1.atom")),
    (RSS, None, PushLinks("http://hub.example/h", "http://feeds.example/f/1.xml?a=1&b=2")),
    (RSS_NO_HUB, None, None),  # an item's link is not the feed's
    (b"<rss/>", None, None),
    (HUB_SELF_ONE_LINK, None, PushLinks("http://both.example/", "http://both.example/")),
    # The header wins, relation by relation (§4).
    (ATOM, '<https://header-hub.example/>; rel="hub", <http://t.example/self>; rel="self"',
     PushLinks("https://header-hub.example/", "http://t.example/self")),
    (ATOM, '<https://header-hub.example/>; rel="hub"',
     PushLinks("https://header-hub.example/", "http://feeds.example/f/1.atom")),
    (b"<rss/>", '<http://h.example/>; rel=hub, </topic>; rel="self"',
     PushLinks("http://h.example/", "http://feeds.example/topic")),
    (b"<rss/>", '<http://h.example/a,b>; rel="hub"', PushLinks("http://h.example/a,b", None)),
    # Not http(s): ignored.
    (b"<rss/>", '<ftp://h.example/>; rel="hub"', None),
    (b'<feed><link rel="hub" href="javascript:alert(1)"/></feed>', None, None),
    (b"<rss/>", "garbage, <; rel=", None),
])
def test_discover(body: bytes, header: str | None, expected: PushLinks | None) -> None:
    assert discover(body, header, BASE) == expected


def test_link_header_first_of_each_relation() -> None:
    links = parse_link_header('<http://a/>; rel="hub", <http://b/>; rel="hub"; title="x,y"')
    assert links == {"hub": "http://a/"}


@pytest.mark.parametrize("method", ["sha1", "sha256", "sha384", "sha512"])
def test_each_signature_method(method: str) -> None:
    body = b"<feed>new</feed>"
    digest = hmac.new(b"s3cret", body, getattr(hashlib, method)).hexdigest()
    assert sign(method, "s3cret", body) == f"{method}={digest}"
    assert signature_valid(f"{method}={digest}", "s3cret", body)
    assert signature_valid(f"{method.upper()}={digest.upper()}", "s3cret", body)
    assert not signature_valid(f"{method}={digest}", "other", body)
    assert not signature_valid(f"{method}={digest}", "s3cret", body + b" ")


@pytest.mark.parametrize("header", [
    None, "", "sha256", "sha256=", "md5=" + hashlib.md5(b"x").hexdigest(),
    "sha256=" + "0" * 64, "=abc",
])
def test_wrong_or_missing_signature(header: str | None) -> None:
    assert not signature_valid(header, "s3cret", b"x")
