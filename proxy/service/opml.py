"""OPML import and export for one user (issue 20), over :class:`ProxyService`'s own calls.

Import registers each outline exactly as ``POST /api/v1/feeds`` would (the same SSRF guard,
the same normalisation and sharing of feeds), so an imported feed is indistinguishable from
a registered one. One outline's refusal never stops the others: the report says, per
outline, ``added``, ``known`` (you had it already, or it came earlier in the same file) or
``refused`` with the reason. A URL listed twice (say in two folders) is one feed and one
line: listparser merges duplicates. Export lists the user's own registrations (which include every
feed their profiles read: a rule can only name a registered feed), never another user's URL.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from proxy.feeds import FeedUrlRefusedError
from proxy.feeds.opml import OpmlFeed, parse_opml, render_opml
from proxy.store import RegisteredFeed

if TYPE_CHECKING:
    from proxy.service.service import ProxyService

__all__ = ["OpmlOutcome", "export_opml", "import_opml"]

Status = Literal["added", "known", "refused"]


@dataclass(frozen=True, slots=True)
class OpmlOutcome:
    """What import did with one outline: ``feed_id`` unless refused, ``reason`` if refused."""

    url: str
    title: str
    status: Status
    feed_id: int | None = None
    reason: str | None = None


#: URLs stored per transaction: short enough not to hold SQLite's write lock (which the
#: chronon loop's probe writes need) for long, long enough that commits do not dominate.
CHUNK = 500


async def import_opml(service: ProxyService, user_id: int, document: bytes) -> list[OpmlOutcome]:
    """Register every feed outline of ``document`` for the user; one outcome per outline.

    Raises :class:`~proxy.feeds.opml.OpmlError` (422) when the document itself cannot be
    read, and :class:`~proxy.errors.StandbyError` on a standby; nothing is registered then."""
    outlines = parse_opml(document)
    outcomes: list[OpmlOutcome] = []
    for first in range(0, len(outlines), CHUNK):
        chunk = outlines[first:first + CHUNK]
        wanted = [o for o in chunk if o.url]
        results = iter(await service.register_feeds(user_id, [o.url for o in wanted]) if wanted else [])
        outcomes.extend(
            _outcome(outline, next(results)) if outline.url else OpmlOutcome(
                outline.url, outline.title, "refused", reason="malformed: the outline has an empty xmlUrl")
            for outline in chunk)
    return outcomes


def _outcome(outline: OpmlFeed, result: tuple[RegisteredFeed, bool] | FeedUrlRefusedError) -> OpmlOutcome:
    if isinstance(result, FeedUrlRefusedError):  # scheme, private address, malformed
        return OpmlOutcome(outline.url, outline.title, "refused", reason=result.reason)
    registered, created = result
    return OpmlOutcome(outline.url, outline.title, "added" if created else "known",
                       feed_id=registered.feed.id)


async def export_opml(service: ProxyService, user_id: int, *, user_name: str) -> bytes:
    """OPML 2.0 of the user's registrations (the URL as they gave it), oldest first."""
    registered = await service.store.list_registered_feeds(user_id)
    feeds = [OpmlFeed(url=r.registration.url, title="") for r in registered]
    now = dt.datetime.now(dt.UTC)
    return render_opml(feeds, title=f"Feeds of {user_name} (monitoring proxy)", now=now)
