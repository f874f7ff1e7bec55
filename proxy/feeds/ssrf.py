"""SSRF guard: which URLs and addresses the proxy may fetch, and a DNS resolver that enforces it.

A feed URL is user input, so by default the proxy refuses to talk to anything
that is not on the public internet (OWASP SSRF Prevention Cheat Sheet):

* schemes other than ``http`` / ``https``;
* hosts that are, or resolve to, loopback, private (RFC 1918, RFC 4193 ULA,
  RFC 6598 shared), link-local (incl. cloud metadata at 169.254.169.254),
  multicast, unspecified or reserved addresses, IPv4 and IPv6 alike;
* IPv6 addresses that embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``,
  6to4, Teredo, NAT64) are judged by the embedded address;
* numeric host forms that ``inet_aton`` accepts (``2130706433``, ``0177.1``,
  ``0x7f.0.0.1``) are recognised as the address they denote.

The check runs when a feed is registered (:func:`check_url_syntax` +
resolution) and again at every fetch, inside the connector's resolver
(:class:`GuardedResolver`): the addresses that were checked are the addresses
the socket connects to, so DNS rebinding between check and connect is
impossible.  A host that resolves to several addresses is refused if *any* of
them is refused.

``allow_private_networks`` opens loopback and private ranges (the local feed
farm, intranet deployments); link-local, multicast, unspecified and reserved
stay refused even then.  ``allowed_networks`` lists CIDRs that are always
allowed.  This module does not do HTTP.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from proxy.errors import ValidationError

__all__ = [
    "AddressPolicy",
    "AddressRefusedError",
    "FeedUrlRefusedError",
    "HostResolver",
    "SystemResolver",
    "check_url_syntax",
    "literal_address",
    "normalise_url",
    "redact_url",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOWED_SCHEMES = frozenset({"http", "https"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
# inet_aton's numeric forms only contain these characters; anything else is a DNS name.
_NUMERIC_HOST = re.compile(r"^[0-9a-fA-FxX.]+$")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class FeedUrlRefusedError(ValidationError):
    """A feed URL the proxy will not fetch; ``reason`` says why (scheme, address class, …)."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"feed URL {url!r} refused: {reason}")


class AddressRefusedError(OSError):
    """Raised inside the connector when a host resolves to a refused address.

    An ``OSError`` so that aiohttp wraps it like any resolution failure; the
    fetcher finds it again in the exception chain.
    """

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"host {host!r} refused: {reason}")


class HostResolver(Protocol):
    """Resolves a host name to IP address strings (injectable for tests and custom DNS)."""

    async def resolve(self, host: str, port: int) -> list[str]: ...


class SystemResolver:
    """The operating system's resolver (``getaddrinfo`` in the loop's thread pool)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except UnicodeError as exc:  # getaddrinfo IDNA-encodes; keep the OSError contract
            raise OSError(f"invalid host name {host!r}: {exc}") from exc
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


def literal_address(host: str) -> IPAddress | None:
    """The address ``host`` denotes if it is an IP literal in any form, else ``None``.

    Recognises IPv6 (with or without brackets, zone ids dropped) and every
    IPv4 form ``inet_aton`` accepts: dotted quads, decimal, octal, hex and
    shortened forms such as ``127.1`` -- the same forms the C library would
    connect to.
    """
    h = host.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    h = h.split("%", 1)[0]
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h)
        except ValueError:
            return None
    if h.endswith("."):
        h = h[:-1]
    if h and _NUMERIC_HOST.match(h):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(h))
        except OSError:
            return None
    return None


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr.teredo is not None:
        return addr.teredo[1]
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which resolved addresses may be connected to."""

    allow_private_networks: bool = False
    allowed_networks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for net in self.allowed_networks:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:
                raise ValueError(
                    f"allowed_networks: {net!r} is not a CIDR network ({exc})"
                ) from exc

    def refusal(self, addr: IPAddress) -> str | None:
        """Why ``addr`` is refused, or ``None`` if it may be connected to."""
        for net in self.allowed_networks:
            if addr in ipaddress.ip_network(net, strict=False):
                return None
        if isinstance(addr, ipaddress.IPv6Address):
            embedded = _embedded_ipv4(addr)
            if embedded is not None:
                reason = self.refusal(embedded)
                return None if reason is None else f"{reason} (embedded in {addr})"
        # Order matters: the first matching class names the reason.
        if addr.is_unspecified:
            return f"unspecified address {addr}"
        if addr.is_multicast:
            return f"multicast address {addr}"
        if addr.is_link_local:
            # Never opened by allow_private_networks: 169.254.169.254 is the cloud metadata service.
            return f"link-local address {addr}"
        if addr.is_loopback:
            return None if self.allow_private_networks else f"loopback address {addr}"
        if addr.is_reserved:
            # Before "private": Python counts 240.0.0.0/4 as private too, but it is never intranet.
            return f"reserved address {addr}"
        if addr.is_private or (isinstance(addr, ipaddress.IPv4Address) and addr in _SHARED):
            return None if self.allow_private_networks else f"private address {addr}"
        if not addr.is_global:
            return f"non-global address {addr}"
        return None

    def check_addresses(self, host: str, addresses: Sequence[str]) -> None:
        """Raise :class:`AddressRefusedError` unless every address is allowed."""
        if not addresses:
            raise AddressRefusedError(host, "resolved to no address")
        for text in addresses:
            try:
                addr = ipaddress.ip_address(text.split("%", 1)[0])
            except ValueError as exc:
                raise AddressRefusedError(host, f"resolver returned {text!r}") from exc
            reason = self.refusal(addr)
            if reason is not None:
                raise AddressRefusedError(host, reason)


_SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # RFC 6598 carrier-grade NAT


def check_url_syntax(url: str, policy: AddressPolicy) -> tuple[str, int]:
    """Check scheme and (if literal) address of ``url``; return ``(host, port)``.

    Raises :class:`FeedUrlRefusedError`.  Host names are *not* resolved here.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise FeedUrlRefusedError(url, f"not a valid URL ({exc})") from exc
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise FeedUrlRefusedError(
            url, f"scheme {parts.scheme or '(none)'!r} is not http or https"
        )
    host = parts.hostname
    if not host:
        raise FeedUrlRefusedError(url, "URL has no host")
    addr = literal_address(host)
    if addr is not None:
        reason = policy.refusal(addr)
        if reason is not None:
            raise FeedUrlRefusedError(url, reason)
    else:
        problem = _host_name_problem(host)
        if problem is not None:
            raise FeedUrlRefusedError(url, f"not a valid URL (host {host!r}: {problem})")
    return host, port if port is not None else _DEFAULT_PORTS[scheme]


def _host_name_problem(host: str) -> str | None:
    """What makes ``host`` unusable as a DNS name (RFC 1035 §2.3.4 lengths), or ``None``."""
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            return str(exc)
    name = host[:-1] if host.endswith(".") else host
    if len(name) > 253:
        return "longer than 253 characters"
    labels = name.split(".")
    if any(not 0 < len(label) <= 63 for label in labels):
        return "empty label, or a label longer than 63 characters"
    for label in labels:
        if label[:4].lower() == "xn--":
            # An A-label must be valid Punycode (RFC 5890 §2.3.2.1); the HTTP stack would choke.
            import idna  # a dependency of httpx and yarl; only needed for this rare case

            try:
                idna.decode(label)
            except idna.IDNAError as exc:
                return f"invalid A-label {label!r} ({exc})"
    return None


def normalise_url(url: str) -> str:
    """Canonical form of a feed URL, for deduplicating feeds.

    Lower-cases scheme and host, IDNA-encodes the host, drops the default
    port, the fragment and empty userinfo, and turns an empty path into
    ``/``.  Path and query are kept byte for byte (servers may treat them
    case-sensitively).  Raises :class:`proxy.errors.ValidationError` for a URL
    without scheme or host.  It does not check whether the URL may be fetched.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValidationError(f"feed URL {url!r} is not a valid URL ({exc})") from exc
    scheme = parts.scheme.lower()
    host = parts.hostname
    if not scheme or not host:
        raise ValidationError(f"feed URL {url!r} needs a scheme and a host")
    if ":" in host:
        host = f"[{ipaddress.IPv6Address(host.split('%', 1)[0]).compressed}]"
    else:
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError as exc:
            raise ValidationError(f"feed URL {url!r} has an invalid host ({exc})") from exc
    netloc = host
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        netloc = f"{host}:{port}"
    if parts.username:
        userinfo = parts.username + (f":{parts.password}" if parts.password else "")
        netloc = f"{userinfo}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def redact_url(url: str) -> str:
    """A feed URL fit for logs and shared views: ``scheme://host[:port]/path``, with userinfo
    and fragment dropped and a query replaced by ``?…``.

    Issue 22: credentials and query strings are where feed URLs carry their secrets
    (``?token=…``, ``user:pass@``), and they belong to the user who registered the URL.
    Never raises: an unparsable URL becomes ``"<unparsable URL>"``.
    """
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparsable URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "…" if parts.query else "", ""))
