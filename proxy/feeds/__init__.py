"""Feed layer: one probe = one conditional HTTP GET, parse, new-entry detection.

The service calls :meth:`Fetcher.probe` with what the last probe learned
(:class:`FeedState`) and a :class:`KnownEntries` port, and persists the
returned :data:`ProbeResult`; :class:`ProbePool` offers the same ``probe``
with the work spread over worker processes (both are :class:`Prober`).  This package knows nothing about SQL or
scheduling; ``not_before`` on a result is advice the scheduler may follow.
"""

from proxy.feeds.fetch import DEFAULT_USER_AGENT, Fetcher, FetcherSettings, Prober
from proxy.feeds.identity import entry_identity, split_new
from proxy.feeds.parse import FeedParseError, ParsedFeed, parse_document
from proxy.feeds.pool import ProbePool
from proxy.feeds.results import (
    Entry,
    FeedState,
    Gone,
    HttpError,
    KnownEntries,
    MemoryKnownEntries,
    NetworkError,
    NothingKnown,
    NotModified,
    Ok,
    ParseError,
    ProbeResult,
    RateLimited,
    Redirected,
    Refused,
    Timeout,
    TooLarge,
)
from proxy.feeds.ssrf import (
    AddressPolicy,
    FeedUrlRefusedError,
    HostResolver,
    SystemResolver,
    normalise_url,
    redact_url,
)

__all__ = [
    "DEFAULT_USER_AGENT",
    "AddressPolicy",
    "Entry",
    "FeedParseError",
    "FeedState",
    "FeedUrlRefusedError",
    "Fetcher",
    "FetcherSettings",
    "Gone",
    "HostResolver",
    "HttpError",
    "KnownEntries",
    "MemoryKnownEntries",
    "NetworkError",
    "NotModified",
    "NothingKnown",
    "Ok",
    "ParseError",
    "ParsedFeed",
    "ProbePool",
    "ProbeResult",
    "Prober",
    "RateLimited",
    "Redirected",
    "Refused",
    "SystemResolver",
    "Timeout",
    "TooLarge",
    "entry_identity",
    "normalise_url",
    "parse_document",
    "redact_url",
    "split_new",
]
