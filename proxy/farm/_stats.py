"""What the farm reports about itself: request counts and the unknown-feed error.

Kept apart from :mod:`proxy.farm.farm` so the control API and fault serving
can name them without importing the farm (no import cycle).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


class FeedNotFoundError(LookupError):
    """The farm has no feed with this id."""

    def __init__(self, feed_id: str) -> None:
        super().__init__(f"the feed farm has no feed {feed_id!r}")
        self.feed_id = feed_id


@dataclass(frozen=True, slots=True)
class FeedStats:
    """Request counts of one feed (or of the whole farm)."""

    requests: int
    by_status: Mapping[int, int]
    """Responses by HTTP status; 0 counts requests that were never answered (``timeout``)."""
    conditional: int
    """Requests that carried If-None-Match or If-Modified-Since."""

    @property
    def not_modified(self) -> int:
        return self.by_status.get(304, 0)
