"""Response bodies of the REST API (request bodies: ``FeedIn`` here, ``proxy.rules.ProfileSpec``)."""

from __future__ import annotations

import datetime as dt
from http import HTTPStatus
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from proxy.notify.payload import MatchedEntryInfo, Notification
from proxy.rules import FeedModelEstimate
from proxy.service.rule_status import FeedStatus, ProfileStatus, RuleState
from proxy.store import (
    CapturedEntry,
    Cei,
    Delivery,
    Ei,
    FeedActivity,
    MetricsSummary,
    NotifyTarget,
    Probe,
    Profile,
    RegisteredFeed,
)


class FeedIn(BaseModel):
    """Register a feed by URL (http or https)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2048, examples=["https://example.org/feed.xml"])


class UpdateModelOut(BaseModel):
    """When the feed changes, as the proxy has learnt it (docs/discovery.md, "The update model")."""

    kind: Literal["prior", "poisson", "seasonal", "periodic"]
    """``prior`` until the feed has data of its own, then the model chosen on held-out likelihood."""
    rate_per_hour: float
    next_expected_at: dt.datetime | None
    """The expected time of the feed's next update."""
    observations: int
    updates: int

    @classmethod
    def of(cls, est: FeedModelEstimate) -> UpdateModelOut:
        return cls(
            kind=est.kind,
            rate_per_hour=est.rate_per_hour,
            next_expected_at=est.next_expected_at(),
            observations=est.observations,
            updates=est.updates,
        )


class ProbeOut(BaseModel):
    """One probe of the feed: when, what came of it, and why it failed in words."""

    started_at: dt.datetime
    duration_seconds: float | None
    chronon: int | None
    outcome: str
    http_status: int | None
    error: str | None
    new_entries: int

    @classmethod
    def of(cls, p: Probe) -> ProbeOut:
        return cls(
            started_at=p.started_at, duration_seconds=p.duration_seconds, chronon=p.chronon,
            outcome=p.outcome, http_status=p.http_status,
            error=error_in_words(p.outcome, p.http_status, p.error), new_entries=p.new_entries,
        )


NextProbeReason = Literal["backoff", "retry_after", "cache_hint"]

# Outcomes after which the fetcher backs off (docs/feeds.md): the feed failed.
_BACKOFF_OUTCOMES = frozenset(
    {"http_error", "network_error", "timeout", "parse_error", "too_large", "refused", "redirected"})


def error_in_words(outcome: str, status: int | None, error: str | None) -> str | None:
    """A probe's failure as a person reads it; ``None`` for a success."""
    if outcome in ("ok", "not_modified", "push"):
        return error  # a warning about a document that was still read, if any
    words = error
    if status is not None and status >= 400:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "(unknown status)"
        words = f"HTTP {status} {phrase}" + (f": {error}" if error else "")
    if outcome == "gone":
        words = "HTTP 410 Gone: the feed was removed for good; it is no longer probed"
    elif outcome == "rate_limited":
        words = (words or "rate limited") + " (the server asked to wait: Retry-After)"
    return words or outcome.replace("_", " ")


def next_probe_reason(
    last_outcome: str | None, next_allowed_at: dt.datetime | None, now: dt.datetime
) -> NextProbeReason | None:
    """Why the feed may not be probed before ``next_allowed_at`` (``None``: nothing holds it)."""
    if next_allowed_at is None or next_allowed_at <= now or last_outcome is None:
        return None
    if last_outcome == "rate_limited":
        return "retry_after"  # RFC 9110 §10.2.3: the server's own Retry-After
    if last_outcome in _BACKOFF_OUTCOMES:
        return "backoff"  # exponential back-off after consecutive errors
    return "cache_hint"  # Cache-Control max-age / Expires / RSS <ttl> of the last document


class PushOut(BaseModel):
    """The feed's WebSub subscription (issue 44, docs/websub.md): its hub, its state
    (``pending``, ``subscribed``, ``denied``, ``expired``, ``unsubscribing``), when the
    hub's lease ends and when the hub last pushed a valid update."""

    hub: str
    state: str
    lease_expires_at: dt.datetime | None
    last_notification_at: dt.datetime | None


class FeedOut(BaseModel):
    """One of your feeds: your registration (the URL as you gave it, your ping token, when you
    registered it) over the feed's shared health. ``id`` is the feed's id; ``profiles``
    counts only your profiles."""

    id: int
    url: str
    ping_token: str
    last_probe_at: dt.datetime | None
    last_outcome: str | None
    consecutive_errors: int
    next_allowed_at: dt.datetime | None
    disabled: bool
    disabled_reason: str | None
    created_at: dt.datetime
    probes: int | None = None
    entries: int | None = None
    profiles: int | None = None
    update_model: UpdateModelOut | None = None
    """Shown by ``GET /api/v1/feeds/{id}`` (one feed), not in lists."""
    last_status: int | None = None
    """The last probe's HTTP status (one feed only)."""
    last_error: str | None = None
    """Why the last probe failed, in words (one feed only; null after a success)."""
    last_success_at: dt.datetime | None = None
    """When a probe last got the document (200) or a 304 (one feed only)."""
    next_probe_reason: NextProbeReason | None = None
    """Why not before ``next_allowed_at``: ``backoff`` after errors, ``retry_after`` (the server
    asked), ``cache_hint`` (the document's max-age / Expires / ttl); null when nothing holds it."""
    recent_probes: list[ProbeOut] | None = None
    """The newest probes, newest first (one feed only)."""
    push: PushOut | None = None
    """The feed's WebSub subscription (one feed only; null when it has none)."""

    def with_activity(self, activity: FeedActivity, now: dt.datetime) -> FeedOut:
        """This feed's detail: counts, last success, the last probe's status and error, why it waits."""
        last = activity.recent[0] if activity.recent else None
        return self.model_copy(update={
            "probes": activity.probes,
            "entries": activity.entries,
            "last_status": None if last is None else last.http_status,
            "last_error": None if last is None or last.outcome in ("ok", "not_modified", "push")
            else error_in_words(last.outcome, last.http_status, last.error),
            "last_success_at": activity.last_success_at,
            "next_probe_reason": next_probe_reason(self.last_outcome, self.next_allowed_at, now),
            "recent_probes": [ProbeOut.of(p) for p in activity.recent],
        })

    @classmethod
    def of(cls, registered: RegisteredFeed) -> FeedOut:
        # Built field by field from the registration, never from ``feed.url``: the shared
        # feed's URL is the first registrant's and may hold their secret (issue 22).
        feed, mine = registered.feed, registered.registration
        return cls(
            id=feed.id,
            url=mine.url,
            ping_token=mine.ping_token,
            last_probe_at=feed.last_probe_at,
            last_outcome=feed.last_outcome,
            consecutive_errors=feed.consecutive_errors,
            next_allowed_at=feed.next_allowed_at,
            disabled=feed.disabled,
            disabled_reason=feed.disabled_reason,
            created_at=mine.created_at,
            probes=registered.probes,
            entries=registered.entries,
            profiles=registered.profiles,
        )


class PingTokenOut(BaseModel):
    """Your new ping token for the feed; the previous one no longer works."""

    ping_token: str


class PingOut(BaseModel):
    """The notification was accepted; ``operations`` CEI changes followed from it."""

    accepted: bool = True
    operations: int


class RuleOut(BaseModel):
    id: int
    name: str
    position: int
    spec: Any


class TargetOut(BaseModel):
    """One of your notify targets (a webhook or an Apprise URL). ``secret`` is shown once:
    in the answer that created the target or rotated its secret; null otherwise."""

    id: int
    kind: Literal["webhook", "apprise"]
    url: str
    disabled: bool
    disabled_reason: str | None
    created_at: dt.datetime
    previous_secret_expires_at: dt.datetime | None = Field(
        None, description="Until then the previous secret signs too (a second signature).")
    secret: str | None = Field(
        None, description="The Standard Webhooks secret (`whsec_…`): store it now, it is not shown again.")

    @classmethod
    def of(cls, t: NotifyTarget) -> TargetOut:
        return cls(
            id=t.id, kind=t.kind, url=t.url, disabled=t.disabled,
            disabled_reason=t.disabled_reason, created_at=t.created_at,
            previous_secret_expires_at=t.previous_secret_expires_at, secret=t.secret,
        )


class ProfileOut(BaseModel):
    """A profile; ``notify`` its default notify targets as submitted; ``new_targets`` the
    targets this request created, each with its secret (shown only here)."""

    id: int
    name: str
    created_at: dt.datetime
    updated_at: dt.datetime
    rules: list[RuleOut]
    notify: Any = None
    new_targets: list[TargetOut] = Field(default_factory=list)

    @classmethod
    def of(cls, p: Profile) -> ProfileOut:
        return cls(
            id=p.id, name=p.name, created_at=p.created_at, updated_at=p.updated_at,
            rules=[RuleOut(id=r.id, name=r.name, position=r.position, spec=r.spec) for r in p.rules],
            notify=p.notify, new_targets=[TargetOut.of(t) for t in p.new_targets],
        )


class SecretRotationIn(BaseModel):
    """Rotate a webhook target's secret; the previous one also signs for ``overlap_seconds``
    (default ``PROXY_WEBHOOK_SECRET_OVERLAP_SECONDS``)."""

    model_config = ConfigDict(extra="forbid")

    overlap_seconds: float | None = Field(None, ge=0, le=30 * 86400)


class DeliveryOut(BaseModel):
    """One notification to one of your targets: ``pending`` (being retried), ``delivered``
    or ``failed`` (a dead letter: ``last_error`` says why). ``msg_id`` is the ``webhook-id``
    header of every attempt."""

    id: int
    event_id: int
    target_id: int
    target_kind: Literal["webhook", "apprise"]
    target_url: str
    profile_id: int
    cei_id: str
    type: Literal["captured", "missed"]
    msg_id: str
    state: Literal["pending", "delivered", "failed"]
    attempts: int
    next_attempt_at: dt.datetime
    last_attempt_at: dt.datetime | None
    last_status: int | None
    last_error: str | None
    delivered_at: dt.datetime | None
    created_at: dt.datetime
    notification: Notification | None = Field(
        None, description="The document sent (only on GET /api/v1/deliveries/{id}).")

    @classmethod
    def of(cls, d: Delivery, notification: Notification | None = None) -> DeliveryOut:
        return cls(
            id=d.id, event_id=d.event_id, target_id=d.target_id, target_kind=d.target_kind,
            target_url=d.target_url, profile_id=d.profile_id, cei_id=d.cei_id, type=d.type,
            msg_id=d.msg_id, state=d.state, attempts=d.attempts,
            next_attempt_at=d.next_attempt_at, last_attempt_at=d.last_attempt_at,
            last_status=d.last_status, last_error=d.last_error, delivered_at=d.delivered_at,
            created_at=d.created_at, notification=notification,
        )


class EiOut(BaseModel):
    """An EI: probe ``feed`` at some chronon in ``[start, finish]`` (chronons and wall times)."""

    ordinal: int
    feed: int
    state: Literal["pending", "captured", "missed"]
    start: int
    finish: int
    window_start: dt.datetime
    window_end: dt.datetime
    captured_chronon: int | None
    captured_at: dt.datetime | None


class CeiOut(BaseModel):
    """A CEI. ``fired``: its rule's condition held on the trigger probe's new entries and the
    query EIs joined (a watch rule's CEIs always have); ``false``: the trigger was only checked
    (or not yet), so ``captured`` means the check was made in time, not that anything happened."""

    id: str
    state: Literal["pending", "captured", "missed"]
    fired: bool
    release: int
    sealed: bool
    resolved_chronon: int | None
    created_at: dt.datetime
    rule_id: int | None
    eis: list[EiOut]
    matched: list[MatchedEntryInfo] = Field(
        default_factory=list,
        description="The entries that made the rule fire, with the field and the keyword or "
                    "pattern that matched in each (issue 43; as in the notification, version 2).",
    )


class CapturedEntryOut(BaseModel):
    id: int
    feed: int
    title: str | None
    link: str | None
    published: dt.datetime | None
    summary: str | None
    first_seen_at: dt.datetime
    cei_id: str
    chronon: int

    @classmethod
    def of(cls, c: CapturedEntry) -> CapturedEntryOut:
        e = c.entry
        return cls(
            id=e.id, feed=e.feed_id, title=e.title, link=e.link, published=e.published,
            summary=e.summary, first_seen_at=e.first_seen_at, cei_id=c.cei_id, chronon=c.chronon,
        )


class ProfileCompletenessOut(BaseModel):
    profile_id: int
    name: str
    captured: int
    missed: int
    pending: int
    completeness: float | None
    fired: int
    not_fired: int
    captured_fired: int


class MetricsSummaryOut(BaseModel):
    """Completeness = captured / (captured + missed); budget use over the last ``chronons``.

    ``fired`` counts CEIs whose rule condition held (the query EIs joined), ``not_fired``
    those whose trigger was only checked (or is not decided yet); ``captured_fired`` the fired
    ones captured: what a person reads as "it happened and the proxy caught it" (docs/api.md).
    """

    captured: int
    missed: int
    pending: int
    completeness: float | None
    fired: int
    not_fired: int
    captured_fired: int
    profiles: list[ProfileCompletenessOut]
    chronons: int
    budget_used: int
    budget_total: int
    budget_use: float | None

    @classmethod
    def of(cls, m: MetricsSummary) -> MetricsSummaryOut:
        return cls(
            captured=m.captured, missed=m.missed, pending=m.pending, completeness=m.completeness,
            fired=m.fired, not_fired=m.not_fired, captured_fired=m.captured_fired,
            profiles=[
                ProfileCompletenessOut(
                    profile_id=p.profile_id, name=p.name, captured=p.captured, missed=p.missed,
                    pending=p.pending, completeness=p.completeness,
                    fired=p.fired, not_fired=p.not_fired, captured_fired=p.captured_fired,
                )
                for p in m.profiles
            ],
            chronons=m.chronons, budget_used=m.budget_used, budget_total=m.budget_total,
            budget_use=m.budget_use,
        )


class ReadyOut(BaseModel):
    """``/readyz``: ``status`` is ``ready`` (200), ``standby`` (503: another process runs the
    chronon loop; this one answers reads and takes over if it stops) or ``unavailable`` (503).
    ``role`` ``api`` (``proxy serve --role api``) is ready whenever its database answers."""

    status: Literal["ready", "standby", "unavailable"]
    role: Literal["leader", "standby", "api"]
    epoch: int | None = None
    ready: bool
    database: bool
    ticking: bool
    chronon: int | None
    inflight: int
    backlog: int
    writing: bool = True
    write_lag_seconds: float = 0.0
    detail: str = ""


def ei_out(ei: Ei, start_of: Any) -> EiOut:
    return EiOut(
        ordinal=ei.ordinal, feed=ei.feed_id, state=ei.state, start=ei.start, finish=ei.finish,
        window_start=start_of(ei.start), window_end=start_of(ei.finish + 1),
        captured_chronon=ei.captured_chronon,
        captured_at=None if ei.captured_chronon is None else start_of(ei.captured_chronon),
    )


def cei_out(cei: Cei, start_of: Any) -> CeiOut:
    return CeiOut(
        id=cei.id, state=cei.state, fired=cei.fired, release=cei.release, sealed=cei.sealed,
        resolved_chronon=cei.resolved_chronon, created_at=cei.created_at, rule_id=cei.rule_id,
        eis=[ei_out(ei, start_of) for ei in cei.eis],
        matched=[MatchedEntryInfo.of(m.feed_id, m.title, m.link, m.published, m.kind, m.field, m.text)
                 for m in cei.matched],
    )


class PlanPointOut(BaseModel):
    """The expected outcome of one budget over the sampled futures (docs/plan.md)."""

    budget: int
    """Probes per chronon allowed."""
    completeness: float | None
    """Expected share of your CEIs captured (mean over futures); ``null`` when no CEI is expected."""
    stderr: float
    """Standard error of ``completeness`` over the futures (0 with one future)."""
    probes_per_chronon: float
    """Probes the budget actually uses per chronon (mean)."""
    ceis: float
    """CEIs your rules open in the horizon, mean per future."""


class PlanOut(BaseModel):
    """Your budget plan: expected completeness at the configured budget and the least budget
    reaching ``target``, for your own profiles as if the (shared) budget served them alone."""

    profiles: int
    rules: int
    skipped_rules: int
    feeds: int
    unrecorded_feeds: int | None
    """Of ``feeds``, those the proxy has no record of yet (never fetched): the plan counts what
    learning their pace costs, as the chronon loop will spend it."""
    horizon: int
    """Chronons planned, from the current one."""
    chronon_seconds: float
    futures: int
    seed: int
    policy: str
    target: float
    current: PlanPointOut
    """At the configured budget (``PROXY_BUDGET``)."""
    least: PlanPointOut | None
    """At the least budget whose expected completeness reaches ``target``; ``null`` if none up
    to ``max_budget`` does."""
    best: PlanPointOut | None
    """The highest completeness the search saw (``least`` when the target is reached)."""
    max_budget: int
    """The search's ceiling: the feeds your rules read (probing every one every chronon)."""
    seconds: float
    """Time the plan took."""


class SeenUpdateOut(BaseModel):
    """A watched feed's update in the CEI being built: ``at`` the start of its chronon."""

    feed: int
    at: dt.datetime


class OpenCeiOut(BaseModel):
    """A trigger rule's CEI that fired and waits for the probe that decides it within its window."""

    id: str
    window_start: dt.datetime
    window_end: dt.datetime


class ProbeDueOut(BaseModel):
    """An EI of one of the rule's pending CEIs that no probe has captured yet: a probe of
    ``feed`` within ``[window_start, window_end)`` captures it."""

    cei: str
    feed: int
    window_start: dt.datetime
    window_end: dt.datetime


class RuleStatusOut(BaseModel):
    """Where one rule stands (docs/api.md, "Rule status"): ``state`` in a word, ``explanation`` in a
    sentence, then the facts: the feeds whose next update it waits for, a watch rule's CEI
    being built and the updates already in it, a trigger rule's next check and its fired CEIs
    not yet decided, and the probes its pending CEIs still need (``probes_due``)."""

    id: int
    name: str
    kind: Literal["trigger", "watch"]
    state: RuleState
    explanation: str
    waiting_for: list[int]
    seen: list[SeenUpdateOut]
    building_cei: str | None
    building_missed: bool
    updates_from: dt.datetime | None
    next_check_at: dt.datetime | None
    open_ceis: list[OpenCeiOut]
    last_fired_at: dt.datetime | None
    pending_ceis: int
    probes_due: list[ProbeDueOut]


class ProfileStatusOut(BaseModel):
    """``GET /api/v1/profiles/{id}/status``. ``source``: ``live`` (the process running the chronon
    loop read its rules' states now) or ``saved`` (an API replica or a standby: the states as
    last stored, the models as last saved)."""

    profile_id: int
    at: dt.datetime
    source: Literal["live", "saved"]
    rules: list[RuleStatusOut]
    feeds: list[FeedStatus]  # as the service names them (proxy/service/rule_status.py)

    @classmethod
    def of(cls, s: ProfileStatus) -> ProfileStatusOut:
        return cls(
            profile_id=s.profile_id, at=s.at, source=s.source,
            rules=[RuleStatusOut(
                id=r.id, name=r.name, kind=r.kind, state=r.state, explanation=r.explanation,
                waiting_for=list(r.waiting_for), seen=[SeenUpdateOut(feed=f, at=t) for f, t in r.seen],
                building_cei=r.building_cei, building_missed=r.building_missed, updates_from=r.updates_from,
                next_check_at=r.next_check_at,
                open_ceis=[OpenCeiOut(id=c, window_start=a, window_end=b) for c, a, b in r.open_ceis],
                last_fired_at=r.last_fired_at, pending_ceis=r.pending_ceis,
                probes_due=[ProbeDueOut(cei=c, feed=f, window_start=a, window_end=b) for c, f, a, b in r.probes_due],
            ) for r in s.rules],
            feeds=list(s.feeds),
        )
