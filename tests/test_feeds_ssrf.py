"""SSRF guard: schemes, address classes (v4, v6, mapped, numeric forms), URL normalisation."""

from __future__ import annotations

import ipaddress

import pytest

from proxy.errors import ValidationError
from proxy.feeds.ssrf import (
    AddressPolicy,
    AddressRefusedError,
    FeedUrlRefusedError,
    check_url_syntax,
    literal_address,
    normalise_url,
    redact_url,
)

STRICT = AddressPolicy()
PRIVATE_OK = AddressPolicy(allow_private_networks=True)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),  # decimal
        ("0177.0.0.1", "127.0.0.1"),  # octal
        ("0x7f.0.0.1", "127.0.0.1"),  # hex
        ("0x7f000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),  # shortened
        ("10.1", "10.0.0.1"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("fe80::1%eth0", "fe80::1"),
        ("example.com", None),
        ("cafe.example", None),
        ("deadbeef", None),  # hex letters without 0x: a DNS name, not an address
        ("1.2.3.4.5", None),
    ],
)
def test_literal_address_recognises_numeric_forms(host: str, expected: str | None) -> None:
    got = literal_address(host)
    assert (str(got) if got is not None else None) == expected


@pytest.mark.parametrize(
    ("address", "reason_word"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),  # RFC 6598 shared address space
        ("fd00::1", "private"),  # ULA
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 embedding 127.0.0.1
        ("64:ff9b::a00:1", "private"),  # NAT64 embedding 10.0.0.1
    ],
)
def test_strict_policy_refuses_non_public_addresses(address: str, reason_word: str) -> None:
    reason = STRICT.refusal(ipaddress.ip_address(address))
    assert reason is not None and reason_word in reason


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert STRICT.refusal(ipaddress.ip_address(address)) is None


def test_private_networks_setting_opens_loopback_and_private_only() -> None:
    assert PRIVATE_OK.refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert PRIVATE_OK.refusal(ipaddress.ip_address("10.0.0.1")) is None
    assert PRIVATE_OK.refusal(ipaddress.ip_address("::ffff:192.168.0.1")) is None
    # Never opened: metadata endpoints, multicast, unspecified.
    assert PRIVATE_OK.refusal(ipaddress.ip_address("169.254.169.254")) is not None
    assert PRIVATE_OK.refusal(ipaddress.ip_address("224.0.0.1")) is not None
    assert PRIVATE_OK.refusal(ipaddress.ip_address("0.0.0.0")) is not None


def test_allowed_networks_are_precise() -> None:
    policy = AddressPolicy(allowed_networks=("127.0.0.1/32",))
    assert policy.refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert policy.refusal(ipaddress.ip_address("127.0.0.2")) is not None
    with pytest.raises(ValueError, match="not-a-net"):
        AddressPolicy(allowed_networks=("not-a-net",))


def test_check_addresses_refuses_if_any_address_is_refused() -> None:
    STRICT.check_addresses("ok.test", ["93.184.215.14"])
    with pytest.raises(AddressRefusedError) as info:
        STRICT.check_addresses("mixed.test", ["93.184.215.14", "10.0.0.1"])
    assert info.value.host == "mixed.test" and "private" in info.value.reason
    with pytest.raises(AddressRefusedError, match="no address"):
        STRICT.check_addresses("empty.test", [])


@pytest.mark.parametrize(
    ("url", "reason_word"),
    [
        ("file:///etc/passwd", "scheme"),
        ("ftp://example.com/feed", "scheme"),
        ("gopher://example.com/", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("example.com/feed", "scheme"),
        ("http:///feed", "no host"),
        ("http://127.0.0.1/feed", "loopback"),
        ("http://2130706433/feed", "loopback"),
        ("http://0177.0.0.1:8080/feed", "loopback"),
        ("http://[::ffff:127.0.0.1]/feed", "loopback"),
        ("http://[::1]:80/", "loopback"),
        ("https://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://example.com:99999/", "not a valid URL"),
        ("http://a..b/feed", "not a valid URL"),
        ("http://xn--/feed", "invalid A-label"),
        ("http://" + "a" * 64 + ".example/", "not a valid URL"),
        ("http://" + "a." * 127 + "example/", "not a valid URL"),
    ],
)
def test_check_url_syntax_refuses(url: str, reason_word: str) -> None:
    with pytest.raises(FeedUrlRefusedError) as info:
        check_url_syntax(url, STRICT)
    assert reason_word in info.value.reason
    assert info.value.url == url
    assert isinstance(info.value, ValidationError) and isinstance(info.value, ValueError)


def test_check_url_syntax_returns_host_and_default_port() -> None:
    assert check_url_syntax("https://Example.com/feed", STRICT) == ("example.com", 443)
    assert check_url_syntax("http://example.com:8080/feed", STRICT) == ("example.com", 8080)
    assert check_url_syntax("http://127.0.0.1:8080/", PRIVATE_OK) == ("127.0.0.1", 8080)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("HTTP://Example.COM:80/Feed?X=1#frag", "http://example.com/Feed?X=1"),
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com:8443/a", "https://example.com:8443/a"),
        ("  http://example.com/a b  ", "http://example.com/a b"),
        ("http://Bücher.example/feed", "http://xn--bcher-kva.example/feed"),
        ("http://[0:0:0:0:0:0:0:1]:8080/x", "http://[::1]:8080/x"),
        ("http://user:pw@Example.com/x", "http://user:pw@example.com/x"),
    ],
)
def test_normalise_url(url: str, expected: str) -> None:
    assert normalise_url(url) == expected
    assert normalise_url(expected) == expected  # idempotent


def test_normalise_url_keeps_the_secrets_that_make_fetches_differ() -> None:
    # Issue 22: two users' URLs differing only in a secret are two feeds, never one.
    assert normalise_url("http://h/f?secret=a") != normalise_url("http://h/f?secret=b")
    assert normalise_url("http://a:1@h/f") != normalise_url("http://a:2@h/f")
    assert normalise_url("http://a:1@h/f") != normalise_url("http://h/f")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://host.example/feed.xml?secret=alice-private-token", "http://host.example/feed.xml?…"),
        ("https://user:pw@Host.example:8443/a/b?x=1#frag", "https://host.example:8443/a/b?…"),
        ("https://token@host.example/f", "https://host.example/f"),
        ("http://host.example/f?", "http://host.example/f"),
        ("http://[::1]:9/f?a=1", "http://[::1]:9/f?…"),
        ("http://host.example", "http://host.example"),
        ("http://host.example:x/?s=1", "<unparsable URL>"),
    ],
)
def test_redact_url_drops_credentials_and_query(url: str, expected: str) -> None:
    assert redact_url(url) == expected


@pytest.mark.parametrize("url", ["", "example.com/feed", "http://", "http://example.com:x/"])
def test_normalise_url_rejects_garbage(url: str) -> None:
    with pytest.raises(ValidationError):
        normalise_url(url)
