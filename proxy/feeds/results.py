"""Typed values that cross the feed layer's boundary: feed state in, probe result out.

Every probe ends in exactly one of the result types below; the fetcher never
lets an exception escape to its caller.  Each result carries ``state``, the
:class:`FeedState` the caller should persist for the next probe (the URL after
a permanent redirect, the new validators, the consecutive-error count), and
``not_before``, the earliest time the scheduler should spend budget on the
feed again (cache hints, ``Retry-After``, or error back-off).

These types deliberately know nothing about SQL or scheduling.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Protocol, runtime_checkable

__all__ = [
    "Entry",
    "FeedState",
    "Gone",
    "HttpError",
    "KnownEntries",
    "MemoryKnownEntries",
    "NetworkError",
    "NotModified",
    "NothingKnown",
    "Ok",
    "ParseError",
    "ProbeResult",
    "RateLimited",
    "Redirected",
    "Refused",
    "Timeout",
    "TooLarge",
]


@dataclass(frozen=True, slots=True)
class FeedState:
    """What the last probe of a feed learned; the input of the next probe.

    ``etag`` and ``last_modified`` are the validators of the last 200 response,
    sent back as ``If-None-Match`` / ``If-Modified-Since`` (RFC 9110 §13.1).
    ``consecutive_errors`` drives the exponential back-off.
    """

    url: str
    etag: str | None = None
    last_modified: str | None = None
    consecutive_errors: int = 0

    def __post_init__(self) -> None:
        if self.consecutive_errors < 0:
            raise ValueError(
                f"FeedState.consecutive_errors must be >= 0, got {self.consecutive_errors}"
            )


@dataclass(frozen=True, slots=True)
class Entry:
    """One feed entry, reduced to what the proxy needs.

    ``identity`` is stable across probes (see :mod:`proxy.feeds.identity`);
    ``published`` is timezone-aware UTC, or ``None`` when the feed gives no
    parsable date. ``author`` is feedparser's ``author`` (RSS ``<author>`` or
    ``<dc:creator>``, Atom ``<author>`` as "name (email)"); ``categories`` the
    terms of the entry's ``<category>`` elements (Atom: ``term``; a category
    without one is left out), in document order, without repeats. Rules read both
    (:mod:`proxy.rules.matching`); they are not part of the identity, and have
    defaults so producers that lack them (the store, the cluster codec) need not
    pass them.
    """

    identity: str
    title: str | None
    link: str | None
    summary: str | None
    content: str | None
    published: datetime | None
    author: str | None = None
    categories: tuple[str, ...] = ()


@runtime_checkable
class KnownEntries(Protocol):
    """Which entry identities one feed has produced before.

    The store answers :meth:`known` with one indexed query over the
    candidates (``WHERE feed_id = ? AND identity IN (...)``), so the cost is
    proportional to the size of the current document, not the feed's
    history.  Implementations must not mutate anything: recording the new
    entries is the caller's job, after it has persisted the probe.
    """

    def known(self, identities: Collection[str]) -> set[str]:
        """Return the subset of ``identities`` already seen for this feed."""
        ...


class NothingKnown:
    """A :class:`KnownEntries` that knows nothing: every entry comes back as new.

    For callers that decide what is new after the fetch, elsewhere: the
    service asks its (async) store, and a :class:`~proxy.feeds.pool.ProbePool`
    worker leaves it to the pool's caller.
    """

    def known(self, identities: Collection[str]) -> set[str]:
        return set()


class MemoryKnownEntries:
    """In-memory :class:`KnownEntries` for tests and benchmarks (one feed)."""

    __slots__ = ("_seen",)

    def __init__(self, identities: Iterable[str] = ()) -> None:
        self._seen: set[str] = set(identities)

    def known(self, identities: Collection[str]) -> set[str]:
        return self._seen.intersection(identities)

    def add(self, identities: Iterable[str]) -> None:
        """Record identities as seen (what the service does after persisting a probe)."""
        self._seen.update(identities)

    def __len__(self) -> int:
        return len(self._seen)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Result:
    """Fields shared by every probe outcome."""

    outcome: ClassVar[str] = "?"
    #: True for outcomes that count as a failure of the feed (they raise the back-off).
    is_error: ClassVar[bool] = False

    state: FeedState
    """The state to persist and pass to the next probe."""
    elapsed: float
    """Wall-clock seconds the probe took (queueing for the host included)."""
    not_before: datetime | None = None
    """Do not probe the feed before this time (cache hint, Retry-After, back-off)."""
    moved_to: str | None = None
    """The new URL if the redirect chain started with permanent ones (301/308) and the
    probe succeeded there (``Ok``/``NotModified``); ``state.url`` is then that URL too."""

    @property
    def consecutive_errors(self) -> int:
        """Errors in a row including this probe; 0 after a success."""
        return self.state.consecutive_errors


@dataclass(frozen=True, slots=True, kw_only=True)
class Ok(_Result):
    """A 200 response parsed into entries; ``new`` are those the feed had not produced before."""

    outcome: ClassVar[str] = "ok"

    entries: tuple[Entry, ...]
    new: tuple[Entry, ...]
    feed_title: str | None = None
    parser: str = "feedparser"
    """Which parser produced the entries: ``"fast"``, ``"feedparser"`` or ``"jsonfeed"``."""
    warning: str | None = None
    """Set when the document was ill-formed but still yielded entries (feedparser's bozo)."""
    final_url: str = ""
    hub: str | None = None
    """The WebSub hub the feed advertises (header or document; :mod:`proxy.feeds.websub`)."""
    self_url: str | None = None
    """The topic URL (``rel="self"``) the feed advertises, when it names a hub."""
    update_every: float | None = None
    """Seconds between updates the document states (``PublisherHints.interval``: the syndication
    module's schedule, else ``<ttl>``), ``None`` when it states none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NotModified(_Result):
    """304 Not Modified: nothing changed and nothing was parsed."""

    outcome: ClassVar[str] = "not_modified"


@dataclass(frozen=True, slots=True, kw_only=True)
class Redirected(_Result):
    """The redirect chain did not end: too many hops, a loop, or a missing/invalid Location.

    ``location`` is the last target the server pointed to (if any).  A
    permanent move that *does* end in a response is not this outcome: it
    travels as ``moved_to`` on the final result.
    """

    outcome: ClassVar[str] = "redirected"
    is_error: ClassVar[bool] = True

    location: str | None
    hops: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Gone(_Result):
    """410 Gone: the feed is permanently removed; the caller disables it."""

    outcome: ClassVar[str] = "gone"

    @property
    def disables_feed(self) -> bool:
        return True


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimited(_Result):
    """429, or 503 with Retry-After: ``not_before`` is when the server allows the next request."""

    outcome: ClassVar[str] = "rate_limited"
    is_error: ClassVar[bool] = True

    status: int
    retry_after: datetime | None
    """The time the server asked for, unclamped; ``None`` if it gave none (back-off applies)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeout(_Result):
    """The connect, read or total timeout expired."""

    outcome: ClassVar[str] = "timeout"
    is_error: ClassVar[bool] = True

    phase: str
    """``"connect"``, ``"read"``, ``"pool"`` or ``"total"``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TooLarge(_Result):
    """The (decompressed) body exceeded ``max_body_bytes``; reading stopped there."""

    outcome: ClassVar[str] = "too_large"
    is_error: ClassVar[bool] = True

    limit: int
    declared: int | None = None
    """The Content-Length the server announced, when that alone was over the limit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpError(_Result):
    """Any other non-2xx final status."""

    outcome: ClassVar[str] = "http_error"
    is_error: ClassVar[bool] = True

    status: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkError(_Result):
    """No HTTP response at all: connection refused/reset, DNS failure, TLS or protocol error."""

    outcome: ClassVar[str] = "network_error"
    is_error: ClassVar[bool] = True

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ParseError(_Result):
    """The body is not a usable feed.

    ``reason`` is a stable code: ``"empty"``, ``"not-a-feed"`` (e.g. an HTML
    page), ``"entity-expansion"`` (DTD entities referencing entities),
    ``"malformed"`` (no feed could be recovered), ``"parser-crash"``.
    """

    outcome: ClassVar[str] = "parse_error"
    is_error: ClassVar[bool] = True

    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused(_Result):
    """The SSRF guard refused the URL or an address it resolved to (no request was sent)."""

    outcome: ClassVar[str] = "refused"
    is_error: ClassVar[bool] = True

    reason: str


ProbeResult = (
    Ok
    | NotModified
    | Redirected
    | Gone
    | RateLimited
    | Timeout
    | TooLarge
    | HttpError
    | NetworkError
    | ParseError
    | Refused
)
