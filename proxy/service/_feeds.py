"""The service's in-memory view of the feeds it probes (the store holds the truth)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from proxy.core.rates import CycleShape
from proxy.feeds import FeedState
from proxy.rules import FeedUpdateModels, UpdateModelSettings
from proxy.service.clock import ChrononClock
from proxy.store import Feed

WEEK = 7 * 86_400.0  # seconds over which a feed's mean rate is read


def update_model_settings(chronon_seconds: float) -> UpdateModelSettings:
    """The update models' defaults, with dates merged within at most one chronon.

    The models count two dates closer than ``merge_window`` (60 s) as one
    change, because a scheduler with minute chronons cannot tell them apart.
    With shorter chronons it can: the live bench's 0.3 s chronons replay two
    weeks in a minute, and a 60 s merge made every feed's whole run one update,
    so the background allocation ranked feeds on nothing (docs/discovery.md,
    "Rates the allocation can use"). Minute chronons and longer are unchanged.
    """
    default = UpdateModelSettings()
    return UpdateModelSettings(merge_window=min(default.merge_window, chronon_seconds))


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
    last_probe: int | None = None
    """The chronon the feed's last probe started in, whatever its outcome (None: never probed):
    how stale a feed no rule reads is (``ChrononLoop``'s unwatched probes)."""
    mean_rate: float = 0.0
    """Updates per second the model expects over the last week, refreshed at each probe, at
    each ping the model learns from, and after a restart."""

    evidence: tuple[float, float] = (0.0, 0.0)
    """The model's record, ``(updates, covered seconds)`` (``FeedUpdateModels.evidence``),
    refreshed with :attr:`mean_rate`: what the background allocation pools its rates from
    (``proxy.core.rates.pooled_rates``)."""

    shape: CycleShape | None = None
    """When in its cycle the feed changes, in chronons (``None``: homogeneous, a Poisson model):
    the background allocation reads a seasonal or near-periodic feed at the chronons that matter."""

    def learn_rate(self, models: FeedUpdateModels, at: float, clock: ChrononClock) -> None:
        """Read :attr:`mean_rate`, :attr:`evidence` and :attr:`shape` from the feed's update model at ``at`` (POSIX seconds)."""
        self.mean_rate = models.expected_updates(self.resource, at - WEEK, at) / WEEK
        self.evidence = models.evidence(self.resource)
        cycle = models.cycle_profile(self.resource)
        if cycle is None:
            self.shape = None
        elif self.shape is None or self.shape.weights is not cycle[2]:  # new only when the model's choice is
            self.shape = CycleShape((cycle[0] - clock.origin.timestamp()) / clock.length, cycle[1] / clock.length,
                                    cycle[2])
    update_every: float | None = None
    """Seconds between updates the feed's last parsed document stated (``Ok.update_every``:
    ``sy:updatePeriod``/``sy:updateFrequency``, else ``<ttl>``), ``None``: none stated. In memory
    only: a restart learns it again from the next 200 (a prior matters only until the feed's
    record outweighs it)."""
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
