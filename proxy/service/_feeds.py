"""The service's in-memory view of the feeds it probes (the store holds the truth)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from proxy.feeds import FeedState
from proxy.store import Feed


@dataclass(slots=True)
class FeedSlot:
    """One feed as the loop needs it between probes: where to fetch, validators, health."""

    id: int
    resource: int
    url: str
    etag: str | None
    last_modified: str | None
    consecutive_errors: int
    not_before: dt.datetime | None
    disabled: bool
    last_success: int | None = None
    """The chronon of the feed's last successful probe: new entries found later changed after it."""
    last_success_at: float | None = None
    """When that probe started (POSIX seconds), for the update model."""
    mean_rate: float = 0.0
    """Updates per second the model expects over the last week, refreshed at each probe:
    the cheap first cut of the background ranking."""
    seen: frozenset[str] | None = None
    """Identities of the last document this process parsed (None: none yet): what is new
    when the database cannot say (it is away; docs/operations.md)."""

    @classmethod
    def of(cls, feed: Feed) -> FeedSlot:
        return cls(
            id=feed.id,
            resource=feed.resource,
            url=feed.url,
            etag=feed.etag,
            last_modified=feed.last_modified,
            consecutive_errors=feed.consecutive_errors,
            not_before=feed.next_allowed_at,
            disabled=feed.disabled,
        )

    def state(self) -> FeedState:
        return FeedState(
            url=self.url,
            etag=self.etag,
            last_modified=self.last_modified,
            consecutive_errors=self.consecutive_errors,
        )


class FeedTable:
    """Feeds by id and by engine resource."""

    def __init__(self) -> None:
        self.by_id: dict[int, FeedSlot] = {}
        self.by_resource: dict[int, FeedSlot] = {}
        # Slots that are disabled or told to wait: the only ones `blocked` must look at,
        # so a tick costs what is held back, not every feed (the chronon loop's hot path).
        self._held: dict[int, FeedSlot] = {}
        self._holes: tuple[int, set[int]] | None = None  # (resources, holes), reset on put/remove

    def put(self, feed: Feed) -> FeedSlot:
        slot = self.by_id.get(feed.id)
        if slot is None:
            slot = FeedSlot.of(feed)
            self.by_id[feed.id] = slot
            self.by_resource[feed.resource] = slot
            self._holes = None
            self.note(slot)
        return slot

    def remove(self, feed_id: int) -> None:
        slot = self.by_id.pop(feed_id, None)
        if slot is not None:
            self.by_resource.pop(slot.resource, None)
            self._held.pop(feed_id, None)
            self._holes = None

    def note(self, slot: FeedSlot) -> None:
        """Call after changing ``slot.disabled`` or ``slot.not_before``."""
        if slot.disabled or slot.not_before is not None:
            self._held[slot.id] = slot
        else:
            self._held.pop(slot.id, None)

    def resource_of(self, feed_ref: str) -> int:
        """The engine resource of a feed id as written in a rule (``"12"``); ``KeyError`` if unknown."""
        try:
            feed_id = int(feed_ref)
        except ValueError:
            raise KeyError(feed_ref) from None
        return self.by_id[feed_id].resource

    def blocked(self, resources: int, now: dt.datetime) -> set[int]:
        """Resources the loop must not select: no feed behind them, disabled, or told to wait."""
        if self._holes is None or self._holes[0] != resources:
            self._holes = (resources, {r for r in range(resources) if r not in self.by_resource})
        out = set(self._holes[1])
        for slot in list(self._held.values()):
            if slot.disabled or (slot.not_before is not None and slot.not_before > now):
                out.add(slot.resource)
            else:  # its wait is over: stop looking until a probe or an operator holds it again
                del self._held[slot.id]
        return out

    def __len__(self) -> int:
        return len(self.by_id)
