"""Values that cross the store's boundary: frozen records out, small input types in.

Records are snapshots: changing the database does not change them, and they
carry no session or lazy loading. Datetimes are timezone-aware UTC.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

CeiState = Literal["pending", "captured", "missed"]
CEI_STATES: tuple[CeiState, ...] = ("pending", "captured", "missed")

# --- records read from the store -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One of a user's API keys: only its clear ``prefix`` is kept (the key itself never is)."""

    id: int
    user_id: int
    prefix: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class ChrononFigures:
    """One recorded chronon: probes allowed (``budget``) and spent (``used``), CEIs resolved."""

    chronon: int
    started_at: dt.datetime
    budget: int
    used: int
    captured_ceis: int
    missed_ceis: int


@dataclass(frozen=True, slots=True)
class User:
    """An account."""

    id: int
    name: str
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Feed:
    """The shared resource behind every registration of one URL, with its probe health.

    ``url`` is what the service fetches and may hold a secret (userinfo, query):
    it is never shown to a user; :class:`Registration` carries each user's own URL.
    """

    id: int
    url: str
    url_normalised: str
    resource: int
    etag: str | None
    last_modified: str | None
    last_probe_at: dt.datetime | None
    last_outcome: str | None
    consecutive_errors: int
    next_allowed_at: dt.datetime | None
    disabled: bool
    disabled_reason: str | None
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Registration:
    """One user's registration of a shared feed: the URL as they gave it, their ping token."""

    id: int
    user_id: int
    feed_id: int
    url: str
    ping_token: str
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class RegisteredFeed:
    """A feed as one user sees it: their registration over the shared feed's health.

    ``profiles`` counts only this user's profiles whose rules read the feed.
    """

    registration: Registration
    feed: Feed
    probes: int | None = None
    entries: int | None = None
    profiles: int | None = None


@dataclass(frozen=True, slots=True)
class FeedHealth:
    """A feed with counts for a health listing."""

    feed: Feed
    probes: int
    entries: int
    profiles: int  # distinct profiles whose rules read the feed


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of a profile; ``spec`` as submitted, ``state`` the evaluator's runtime state."""

    id: int
    profile_id: int
    name: str
    position: int
    spec: Any
    state: Any
    feed_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NotifyTarget:
    """One of a user's delivery endpoints (a webhook or an Apprise URL).

    ``secret`` is set only in the answer that created the endpoint or rotated its
    secret: it is shown once. ``previous_secret_expires_at``: until then the
    previous secret signs too (a rotation's overlap).
    """

    id: int
    user_id: int
    kind: Literal["webhook", "apprise"]
    url: str
    disabled: bool
    disabled_reason: str | None
    created_at: dt.datetime
    previous_secret_expires_at: dt.datetime | None = None
    secret: str | None = None


@dataclass(frozen=True, slots=True)
class Profile:
    """A user's profile and its rules in order.

    ``notify`` is the profile's default notify targets as submitted (JSON), or None;
    ``new_targets`` the endpoints that storing it created, with their secrets (shown once).
    """

    id: int
    user_id: int
    name: str
    created_at: dt.datetime
    updated_at: dt.datetime
    rules: tuple[Rule, ...]
    notify: Any = None
    new_targets: tuple[NotifyTarget, ...] = ()


@dataclass(frozen=True, slots=True)
class Ei:
    """A stored simple execution interval."""

    id: int
    cei_id: str
    ordinal: int
    feed_id: int
    start: int
    finish: int
    reveal: int | None
    state: CeiState
    captured_chronon: int | None
    captured_probe_id: int | None


@dataclass(frozen=True, slots=True)
class MatchedRecord:
    """An entry that made a CEI's rule fire, and what in it matched (issue 43: "what matched
    is told"), as ``ceis.matched`` keeps it: ``kind`` ``contains``/``all``/``regex``/``any``,
    ``field`` the entry field, ``text`` the keyword as written or the regex pattern."""

    feed_id: int
    title: str | None
    link: str | None
    published: dt.datetime | None
    kind: str
    field: str | None = None
    text: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"feed_id": self.feed_id, "title": self.title, "link": self.link,
                "published": None if self.published is None else self.published.isoformat(),
                "kind": self.kind, "field": self.field, "text": self.text}

    @classmethod
    def from_json(cls, data: Any) -> MatchedRecord:
        published = data.get("published")
        return cls(
            feed_id=int(data["feed_id"]), title=data.get("title"), link=data.get("link"),
            published=None if published is None else dt.datetime.fromisoformat(published),
            kind=str(data.get("kind", "any")), field=data.get("field"), text=data.get("text"),
        )


#: At most this many matched entries are kept per CEI (the first ones told).
MAX_MATCHED_PER_CEI = 20


@dataclass(frozen=True, slots=True)
class Cei:
    """A stored complex execution interval with its EIs (by ordinal)."""

    id: str
    profile_id: int
    rule_id: int | None
    release: int
    sealed: bool
    state: CeiState
    resolved_chronon: int | None
    created_at: dt.datetime
    eis: tuple[Ei, ...]
    fired: bool = False
    """The rule's condition held (its query EIs joined); false: only the trigger was checked."""
    matched: tuple[MatchedRecord, ...] = ()
    """The entries that made it fire, with what matched in each (at most 20; none told for
    CEIs stored before migration 0010, nor for a temporal rule fired by earlier probes)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A feed entry as first seen."""

    id: int
    feed_id: int
    identity: str
    title: str | None
    link: str | None
    published: dt.datetime | None
    summary: str | None
    first_seen_probe_id: int | None
    first_seen_at: dt.datetime


@dataclass(frozen=True, slots=True)
class CapturedEntry:
    """An entry first seen by a probe that captured an EI of a profile's CEI."""

    entry: Entry
    cei_id: str
    ei_id: int
    chronon: int


@dataclass(frozen=True, slots=True)
class Probe:
    """A stored probe."""

    id: int
    feed_id: int
    chronon: int | None
    started_at: dt.datetime
    finished_at: dt.datetime | None
    duration_seconds: float | None
    outcome: str
    http_status: int | None
    error: str | None
    new_entries: int
    bytes: int | None


@dataclass(frozen=True, slots=True)
class MetricTotals:
    """What the database holds of the totals ``/metrics`` shows (they survive restarts)."""

    probes: dict[str, int]  # stored probes by outcome (retention purges old ones)
    budget_used: int  # probes started, summed over the recorded chronons
    budget_offered: int  # budget, summed over the recorded chronons
    ceis: dict[str, int]  # CEIs by state
    # Delivery attempts by the dispatcher's outcome label, read back from the rows
    # (:func:`delivery_outcome_totals`; retention purges settled ones).
    deliveries: dict[str, int] = field(default_factory=dict)


#: The error a delivery given up because its target is disabled stores (``Dispatcher``);
#: such an outcome is not an attempt, so the totals tell it from a failed send by it.
TARGET_DISABLED_ERROR = "target disabled: "


def delivery_outcome_totals(by_state: dict[str, tuple[int, int, int, int]]) -> dict[str, int]:
    """``proxy_deliveries_total`` by outcome from the delivery rows, per state:
    ``(rows, attempts summed, rows ended by a 410, rows given up on a disabled target)``.

    Every attempt is one outcome: a row's last is its state's (``delivered``; for a
    failed row ``gone`` on a 410, ``failed`` otherwise), every earlier one a ``retry``;
    a row given up on a disabled target ends with a ``target_disabled`` outcome that
    was no attempt, and a pending row's attempts were all retries.
    """
    empty = (0, 0, 0, 0)
    delivered, delivered_attempts, _, _ = by_state.get("delivered", empty)
    failed, failed_attempts, gone, disabled = by_state.get("failed", empty)
    _, pending_attempts, _, _ = by_state.get("pending", empty)
    sent_last = failed - disabled  # failed rows whose last outcome was an attempt
    return {
        "delivered": delivered,
        "retry": pending_attempts + (delivered_attempts - delivered) + (failed_attempts - sent_last),
        "failed": sent_last - gone,
        "gone": gone,
        "target_disabled": disabled,
    }


@dataclass(frozen=True, slots=True)
class FeedActivity:
    """What a feed's probes say about it (issue 23, "feeds that say why")."""

    probes: int  # every stored probe
    entries: int  # every stored entry
    last_success_at: dt.datetime | None  # the newest probe that got a document (200) or a 304
    recent: tuple[Probe, ...]  # newest first


@dataclass(frozen=True, slots=True)
class ProfileCompleteness:
    """Resolved CEIs of one profile: completeness = captured / (captured + missed)."""

    profile_id: int
    name: str
    captured: int
    missed: int
    pending: int
    fired: int = 0  # CEIs whose rule condition held, in any state
    not_fired: int = 0  # CEIs whose trigger was only checked (or never decided)
    captured_fired: int = 0  # fired and captured: what the user asked for, delivered

    @property
    def completeness(self) -> float | None:
        resolved = self.captured + self.missed
        return self.captured / resolved if resolved else None


@dataclass(frozen=True, slots=True)
class MetricsSummary:
    """A user's completeness (overall and per profile) and the proxy's recent budget use."""

    captured: int
    missed: int
    pending: int
    profiles: tuple[ProfileCompleteness, ...]
    chronons: int  # how many recent chronons the budget figures cover
    budget_used: int
    budget_total: int
    fired: int = 0
    not_fired: int = 0
    captured_fired: int = 0

    @property
    def completeness(self) -> float | None:
        resolved = self.captured + self.missed
        return self.captured / resolved if resolved else None

    @property
    def budget_use(self) -> float | None:
        return self.budget_used / self.budget_total if self.budget_total else None


DeliveryState = Literal["pending", "delivered", "failed"]


@dataclass(frozen=True, slots=True)
class NotificationEvent:
    """A stored notification document (one per resolved CEI); ``id`` is the SSE event id."""

    id: int
    user_id: int
    profile_id: int
    cei_id: str
    type: Literal["captured", "missed"]
    payload: str
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Delivery:
    """One (event, target) row of the outbox, as its owner sees it."""

    id: int
    event_id: int
    target_id: int
    target_kind: Literal["webhook", "apprise"]
    target_url: str
    profile_id: int
    cei_id: str
    type: Literal["captured", "missed"]
    msg_id: str
    state: DeliveryState
    attempts: int
    next_attempt_at: dt.datetime
    last_attempt_at: dt.datetime | None
    last_status: int | None
    last_error: str | None
    delivered_at: dt.datetime | None
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """A pending delivery whose next attempt is due, with everything the dispatcher sends.

    ``secrets``: the target's current secret, then the previous one while its overlap
    lasts (webhooks; empty for Apprise). ``resolved_at``: when the event was stored
    (delivery latency is measured from it).
    """

    id: int
    event_id: int
    target_id: int
    kind: Literal["webhook", "apprise"]
    url: str
    secrets: tuple[str, ...]
    msg_id: str
    payload: str
    attempts: int
    window_start: dt.datetime
    resolved_at: dt.datetime
    target_disabled: str | None  # the reason, when the target is disabled


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """What one delivery attempt decided, to store: the row's new state and, on a 410 Gone,
    the reason to disable its target."""

    delivery_id: int
    target_id: int
    at: dt.datetime
    state: DeliveryState
    next_attempt_at: dt.datetime
    status: int | None = None
    error: str | None = None
    disable_target: str | None = None
    attempted: bool = True  # False: given up without sending (target disabled)


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """How many rows a retention purge deleted."""

    probes: int
    entries: int
    deliveries: int = 0
    events: int = 0


# --- inputs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TargetInput:
    """A notify target as a profile or rule names it: ``kind`` (webhook, apprise), URL, events."""

    kind: Literal["webhook", "apprise"]
    url: str
    events: tuple[str, ...] = ("captured",)


@dataclass(frozen=True, slots=True)
class RuleInput:
    """A rule to store: its name, its validated ``spec`` (JSON-able) and the feeds it reads.

    ``notify``: the rule's own notify targets (replacing the profile's), or None to use
    the profile's.
    """

    name: str
    spec: Any
    feed_ids: tuple[int, ...] = ()
    notify: tuple[TargetInput, ...] | None = None


@dataclass(frozen=True, slots=True)
class NewProfile:
    """A profile to create: its owner, name, rules in order and default notify targets
    (``notify_spec``: as submitted, JSON)."""

    user_id: int
    name: str
    rules: tuple[RuleInput, ...] = ()
    notify: tuple[TargetInput, ...] | None = None
    notify_spec: Any = None


@dataclass(frozen=True, slots=True)
class NewEi:
    """An EI to add to a CEI; ``ordinal`` numbers the EIs of one CEI."""

    ordinal: int
    feed_id: int
    start: int
    finish: int
    reveal: int | None = None


@dataclass(frozen=True, slots=True)
class NewEntry:
    """An entry as parsed from a feed; ``identity`` is the feed layer's stable entry id."""

    identity: str
    title: str | None = None
    link: str | None = None
    published: dt.datetime | None = None
    summary: str | None = None


@dataclass(frozen=True, slots=True)
class ProbeInput:
    """One finished probe of a feed."""

    feed_id: int
    started_at: dt.datetime
    outcome: str
    finished_at: dt.datetime | None = None
    chronon: int | None = None
    http_status: int | None = None
    error: str | None = None
    bytes: int | None = None


@dataclass(frozen=True, slots=True)
class CaptureInput:
    """This probe captured EI ``ei_id`` at ``chronon``."""

    ei_id: int
    chronon: int


@dataclass(frozen=True, slots=True)
class CeiStateChange:
    """CEI ``cei_id`` resolved to ``state`` at ``resolved_chronon``."""

    cei_id: str
    state: CeiState
    resolved_chronon: int | None = None


@dataclass(frozen=True, slots=True)
class FeedUpdate:
    """What one probe taught us about its feed.

    ``error`` counts the probe towards ``consecutive_errors`` (a success resets
    it). ``etag``/``last_modified`` replace the stored validators only when
    ``update_validators`` is true (a 200 response); a 304 or an error keeps
    them. ``new_url`` follows a permanent redirect (RFC 9110 §15.4.2 301,
    §15.4.9 308); ``disabled_reason`` disables the feed (e.g. 410 Gone,
    RFC 9110 §15.5.11).
    """

    probed_at: dt.datetime
    outcome: str
    error: bool = False
    update_validators: bool = False
    etag: str | None = None
    last_modified: str | None = None
    next_allowed_at: dt.datetime | None = None
    new_url: str | None = None
    disabled_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ProbeRecord:
    """What :meth:`Store.record_probe` stored: the probe's id and the identities that were new."""

    probe_id: int
    new_identities: tuple[str, ...] = field(default=())
    captured_ei_ids: tuple[int, ...] = field(default=())


ProbeItem = tuple[
    ProbeInput,
    Sequence[NewEntry],
    Sequence[CaptureInput],
    Sequence[CeiStateChange],
    FeedUpdate | None,
]
"""One probe's inputs to :meth:`Store.record_probes`, in :meth:`Store.record_probe`'s order."""
