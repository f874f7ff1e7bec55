"""Checking notify targets before a profile is stored: a refused target is a 422 naming its field.

* ``webhook``: the SSRF guard of the feed layer, exactly as for a feed URL
  (http/https only; loopback and private addresses refused unless
  ``PROXY_ALLOW_PRIVATE_NETWORKS``; the host resolved and every address checked).
  The dispatcher checks again at every send, in its connector's resolver.
* ``apprise``: Apprise must recognise the URL. Apprise's generic HTTP schemes
  (``json://``, ``form://``, ``xml://`` and their ``s`` variants) and the
  self-hosted services whose host the user names (ntfy, Gotify, Apprise API)
  post to an arbitrary host, so their host passes the same guard. Other schemes
  talk to their service's fixed public host. Apprise does its own HTTP, so for
  those the guard runs at validation only (documented in docs/notifications.md).

What it does not do: send anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.errors import ValidationError
from proxy.feeds.fetch import check_feed_url
from proxy.feeds.ssrf import AddressPolicy, FeedUrlRefusedError, HostResolver

__all__ = ["GUARDED_APPRISE_SCHEMES", "NotifyTargetError", "check_apprise_url", "check_target"]

#: Apprise schemes that post to a host the user names (the SSRF guard applies to it).
GUARDED_APPRISE_SCHEMES = frozenset({
    "json", "jsons", "form", "forms", "xml", "xmls",
    "ntfy", "ntfys", "gotify", "gotifys", "apprise", "apprises",
})


class NotifyTargetError(ValidationError):
    """A notify target the proxy will not use; ``loc`` names the field (``notify.0.webhook``)."""

    def __init__(self, loc: str, reason: str) -> None:
        self.loc = loc
        self.reason = reason
        super().__init__(f"{loc}: {reason}")


def check_apprise_url(url: str) -> Any:
    """The Apprise plugin for ``url``; :class:`ValueError` if Apprise cannot use it."""
    import apprise  # heavy (loads its plugins): only when a profile names an Apprise URL

    plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    if plugin is None:
        raise ValueError(
            f"{_shown(url)} is not a URL Apprise can use (see Apprise's list of services)"
        )
    return plugin


def _shown(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return f"{scheme}://…" if sep else repr(url[:40])


async def check_target(
    loc: str, kind: str, url: str, policy: AddressPolicy, resolver: HostResolver
) -> None:
    """Raise :class:`NotifyTargetError` (naming ``loc``) unless the proxy may deliver to ``url``."""
    if kind == "webhook":
        try:
            await check_feed_url(url, policy, resolver)
        except FeedUrlRefusedError as exc:
            raise NotifyTargetError(loc, f"webhook URL refused: {exc.reason}") from None
        return
    try:
        plugin = check_apprise_url(url)
    except ValueError as exc:
        raise NotifyTargetError(loc, str(exc)) from None
    scheme = url.partition("://")[0].lower()
    if scheme in GUARDED_APPRISE_SCHEMES:
        host = getattr(plugin, "host", None)
        if not host:
            raise NotifyTargetError(loc, "Apprise URL has no host")
        port = getattr(plugin, "port", None)
        secure = scheme.endswith("s")
        probe = f"{'https' if secure else 'http'}://{_bracketed(host)}{f':{port}' if port else ''}/"
        try:
            await check_feed_url(probe, policy, resolver)
        except FeedUrlRefusedError as exc:
            raise NotifyTargetError(loc, f"Apprise URL refused: {exc.reason}") from None


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


async def check_targets(
    targets: Sequence[tuple[str, str, str]], policy: AddressPolicy, resolver: HostResolver
) -> None:
    """:func:`check_target` for ``(loc, kind, url)`` triples, in order (the first refusal raises)."""
    for loc, kind, url in targets:
        await check_target(loc, kind, url, policy, resolver)
