"""Invariants of the feed layer's pure parts, checked with Hypothesis."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.feeds.parse import FeedParseError, parse_document
from proxy.feeds.ssrf import AddressPolicy, literal_address, normalise_url

FIXTURE = (Path(__file__).parent / "fixtures" / "feeds" / "rss_ttl.xml").read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_never_crash_the_parser(body: bytes) -> None:
    try:
        parsed = parse_document(body, url="http://feeds.test/")
    except FeedParseError as exc:
        assert exc.reason in {"empty", "not-a-feed", "malformed", "entity-expansion", "parser-crash"}
    else:
        assert all(e.identity for e in parsed.entries)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(FIXTURE) - 1), st.integers(1, 200), st.binary(max_size=40))
def test_mangled_feeds_never_crash_the_parser(at: int, cut: int, junk: bytes) -> None:
    body = FIXTURE[:at] + junk + FIXTURE[at + cut :]
    try:
        parsed = parse_document(body, url="http://feeds.test/")
    except FeedParseError:
        return
    identities = [e.identity for e in parsed.entries]
    assert all(identities)


@given(st.integers(0, 2**32 - 1))
def test_every_decimal_ipv4_form_is_recognised(n: int) -> None:
    addr = ipaddress.IPv4Address(n)
    assert literal_address(str(n)) == addr
    assert literal_address(hex(n)) == addr
    assert literal_address(str(addr)) == addr
    # and the policy judges the numeric form exactly like the dotted one
    policy = AddressPolicy()
    assert policy.refusal(literal_address(str(n)) or addr) == policy.refusal(addr)


_label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)


@given(
    scheme=st.sampled_from(["http", "HTTP", "https", "HttpS"]),
    labels=st.lists(_label, min_size=1, max_size=4),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    path=st.text(alphabet="abc/%-_.~", max_size=20),
    query=st.text(alphabet="abc=&", max_size=10),
)
def test_normalise_url_is_idempotent(
    scheme: str, labels: list[str], port: int | None, path: str, query: str
) -> None:
    host = ".".join(labels).upper()
    url = f"{scheme}://{host}{'' if port is None else f':{port}'}/{path}{'?' + query if query else ''}#frag"
    once = normalise_url(url)
    assert normalise_url(once) == once
    assert "#" not in once and once.startswith(scheme.lower() + "://" + host.lower())
