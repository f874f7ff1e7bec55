"""SQLAlchemy tables of the proxy (typed declarative; the migrations in ``migrations/`` mirror them).

Tables
------
``users``            an account; ``name`` is unique.
``api_keys``         sha256 (hex) of each API key; only a short ``prefix`` is kept in clear
                     for display. Keys are shown once, at creation; ``revoked_at`` disables one.
``feeds``            the shared resource: one row per distinct fetch, deduplicated by
                     ``url_normalised`` (which keeps userinfo and query, so URLs differing only
                     in a secret are different feeds). ``resource`` is the core engine's dense
                     resource id; conditional-GET state (``etag``, ``last_modified``) and health
                     live here too. No user reads this row's ``url`` (it may hold a secret).
``feed_registrations`` one user's registration of a feed (issue 22): the URL as that user gave
                     it and their own ``ping_token`` for ``POST /api/v1/feeds/{id}/ping``.
                     UNIQUE (user_id, feed_id). A user sees and deletes only their own; the feed
                     goes with its last registration (and once no rule reads it).
``profiles``         a user's named profile (``name`` unique per user).
``rules``            a profile's ordered rules: ``spec`` is the rule as submitted and validated,
                     ``state`` the trigger evaluator's runtime state (kept for restarts).
``rule_feeds``       which feeds a rule reads; lets ``delete_feed`` refuse while a rule needs it.
``ceis``             complex execution intervals; ``id`` is the engine's CEI id; ``matched``
                     the entries that made it fire (JSON, migration 0010).
``eis``              the simple execution intervals of a CEI (``ordinal`` within the CEI).
``probes``           one row per HTTP probe of a feed.
``entries``          every entry ever seen of a feed, UNIQUE (feed_id, identity): "is this
                     entry new?" is one indexed query however long the history.
``captures``         which EI was captured by which probe, at which chronon.
``chronon_metrics``  per-chronon budget use and CEI outcomes.
``service_state``    small JSON values keyed by name (chronon origin, last chronon …).
``leases``           named exclusive leases (``chronon-loop``: which process runs the loop);
                     ``epoch`` grows by one at every acquisition and is never reused (fencing);
                     ``holder`` is NULL once released. :mod:`proxy.store._lease` has the SQL.
``notify_targets``   a user's delivery endpoints (issue 19): a webhook or Apprise URL,
                     UNIQUE (user_id, kind, url_hash); a webhook's Standard Webhooks
                     ``secret`` and, during a rotation's overlap, ``previous_secret`` until
                     ``previous_secret_expires_at``. ``disabled`` after a 410 Gone.
``notify_subscriptions`` which targets a profile's rules notify, for which events
                     (``rule_id`` NULL: the profile's default, for CEIs without a rule).
``notification_events`` the outbox's documents: one per resolved CEI (UNIQUE cei_id),
                     written in the transaction that resolves it; ``id`` is the
                     monotonic SSE event id, ``payload`` the rendered JSON (version 2;
                     events written before migration 0010 hold version 1).
``deliveries``       one row per (event, target), UNIQUE: ``pending`` until delivered
                     (``delivered``) or given up (``failed``: the dead letters);
                     ``msg_id`` is the ``webhook-id`` of every attempt.
``websub_subscriptions`` a feed's WebSub subscription at its hub (issue 44): state, lease,
                     the callback's random id and the HMAC secret; no foreign key to ``feeds``
                     (a deleted feed's row lives until its unsubscription is verified).

Time stamps are timezone-aware UTC on both backends (:class:`UTCDateTime`).
This module holds no queries; :mod:`proxy.store._repository` does.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Deterministic constraint names, so migrations can drop/alter them on both backends.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments an "INTEGER PRIMARY KEY" (the rowid alias), not a BIGINT one.
BigId = BigInteger().with_variant(Integer(), "sqlite")

STATES = ("pending", "captured", "missed")
DELIVERY_STATES = ("pending", "delivered", "failed")
TARGET_KINDS = ("webhook", "apprise")
EVENT_TYPES = ("captured", "missed")

# Ids are handed out to users and kept in the service's memory: SQLite must not
# reuse the id of a deleted row (it does without AUTOINCREMENT), as PostgreSQL
# sequences never do.
NO_REUSE = {"sqlite_autoincrement": True}


class UTCDateTime(TypeDecorator[dt.datetime]):
    """``DateTime(timezone=True)`` that always returns aware UTC datetimes.

    SQLite has no time zones and hands back naive values; we store UTC and
    re-attach ``UTC`` on the way out. Naive input is refused rather than guessed.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware UTC datetime")
        value = value.astimezone(dt.UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dt.datetime: UTCDateTime()}


def _state_check(column: str, states: tuple[str, ...] = STATES) -> CheckConstraint:
    allowed = ", ".join(f"'{s}'" for s in states)
    return CheckConstraint(f"{column} IN ({allowed})", name=f"{column}_valid")


class UserRow(Base):
    __tablename__ = "users"
    __table_args__ = (NO_REUSE,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[dt.datetime]


class ApiKeyRow(Base):
    __tablename__ = "api_keys"
    __table_args__ = (NO_REUSE,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[dt.datetime]
    revoked_at: Mapped[dt.datetime | None]


class FeedRow(Base):
    __tablename__ = "feeds"
    __table_args__ = (NO_REUSE,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    url_normalised: Mapped[str] = mapped_column(String(2048), unique=True)
    resource: Mapped[int] = mapped_column(Integer, unique=True)
    etag: Mapped[str | None] = mapped_column(Text)
    last_modified: Mapped[str | None] = mapped_column(String(64))
    last_probe_at: Mapped[dt.datetime | None]
    last_outcome: Mapped[str | None] = mapped_column(String(32))
    consecutive_errors: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    next_allowed_at: Mapped[dt.datetime | None]
    disabled: Mapped[bool] = mapped_column(Boolean, server_default=false())
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime]


class FeedRegistrationRow(Base):
    __tablename__ = "feed_registrations"
    __table_args__ = (
        UniqueConstraint("user_id", "feed_id", name="uq_feed_registrations_user_id_feed_id"),
        NO_REUSE,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    # CASCADE: only an operator's Store.delete_feed removes a feed that still has registrations.
    feed_id: Mapped[int] = mapped_column(ForeignKey("feeds.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(Text)
    ping_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime]


class ProfileRow(Base):
    __tablename__ = "profiles"
    __table_args__ = (
        UniqueConstraint("user_id", "name", name="uq_profiles_user_id_name"),
        NO_REUSE,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]
    # The profile's default notify targets as submitted (JSON list), or NULL.
    notify: Mapped[Any | None] = mapped_column(JSON)


class RuleRow(Base):
    __tablename__ = "rules"
    __table_args__ = (
        UniqueConstraint("profile_id", "position", name="uq_rules_profile_id_position"),
        NO_REUSE,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    position: Mapped[int] = mapped_column(Integer)
    spec: Mapped[Any] = mapped_column(JSON)
    state: Mapped[Any | None] = mapped_column(JSON)


class RuleFeedRow(Base):
    __tablename__ = "rule_feeds"

    rule_id: Mapped[int] = mapped_column(
        ForeignKey("rules.id", ondelete="CASCADE"), primary_key=True
    )
    # RESTRICT: a feed a rule reads cannot disappear under it (delete_feed says which profiles).
    feed_id: Mapped[int] = mapped_column(
        ForeignKey("feeds.id", ondelete="RESTRICT"), primary_key=True, index=True
    )


class CeiRow(Base):
    __tablename__ = "ceis"
    __table_args__ = (
        Index("ix_ceis_profile_id_state", "profile_id", "state"),
        # Keyset pagination of a profile's CEIs, newest first (migration 0006).
        Index("ix_ceis_profile_id_release_id", "profile_id", "release", "id"),
        _state_check("state"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id", ondelete="CASCADE"))
    rule_id: Mapped[int | None] = mapped_column(
        ForeignKey("rules.id", ondelete="SET NULL"), index=True
    )
    release: Mapped[int] = mapped_column(Integer)
    sealed: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # Whether the rule's condition held (query EIs joined), not only its trigger checked.
    fired: Mapped[bool] = mapped_column(Boolean, server_default=false())
    state: Mapped[str] = mapped_column(String(16), server_default=text("'pending'"))
    resolved_chronon: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[dt.datetime]
    # The entries that made it fire and what matched in each (JSON list, MatchedRecord.to_json;
    # migration 0010, issue 43), NULL when none was told.
    matched: Mapped[Any | None] = mapped_column(JSON)


class EiRow(Base):
    __tablename__ = "eis"
    __table_args__ = (
        UniqueConstraint("cei_id", "ordinal", name="uq_eis_cei_id_ordinal"),
        _state_check("state"),
        NO_REUSE,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    cei_id: Mapped[str] = mapped_column(ForeignKey("ceis.id", ondelete="CASCADE"))
    ordinal: Mapped[int] = mapped_column(Integer)
    feed_id: Mapped[int] = mapped_column(ForeignKey("feeds.id", ondelete="CASCADE"), index=True)
    start: Mapped[int] = mapped_column(Integer)
    finish: Mapped[int] = mapped_column(Integer)
    reveal: Mapped[int | None] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), server_default=text("'pending'"))
    captured_chronon: Mapped[int | None] = mapped_column(Integer)
    captured_probe_id: Mapped[int | None] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), ForeignKey("probes.id", ondelete="SET NULL")
    )


class ProbeRow(Base):
    __tablename__ = "probes"
    __table_args__ = (Index("ix_probes_feed_id_started_at", "feed_id", "started_at"), NO_REUSE)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    feed_id: Mapped[int] = mapped_column(ForeignKey("feeds.id", ondelete="CASCADE"))
    chronon: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[dt.datetime] = mapped_column(index=True)
    finished_at: Mapped[dt.datetime | None]
    duration_seconds: Mapped[float | None] = mapped_column(Float)
    outcome: Mapped[str] = mapped_column(String(32))
    http_status: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    new_entries: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    bytes: Mapped[int | None] = mapped_column(BigInteger)


class EntryRow(Base):
    __tablename__ = "entries"
    __table_args__ = (
        UniqueConstraint("feed_id", "identity", name="uq_entries_feed_id_identity"),
        NO_REUSE,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    feed_id: Mapped[int] = mapped_column(ForeignKey("feeds.id", ondelete="CASCADE"))
    identity: Mapped[str] = mapped_column(String(1024))
    title: Mapped[str | None] = mapped_column(Text)
    link: Mapped[str | None] = mapped_column(Text)
    published: Mapped[dt.datetime | None]
    summary: Mapped[str | None] = mapped_column(Text)
    first_seen_probe_id: Mapped[int | None] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("probes.id", ondelete="SET NULL"),
        index=True,
    )
    first_seen_at: Mapped[dt.datetime] = mapped_column(index=True)


class CaptureRow(Base):
    __tablename__ = "captures"
    __table_args__ = (NO_REUSE,)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # One capture per EI: an EI is captured once, by the first probe inside its window.
    ei_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("eis.id", ondelete="CASCADE"),
        unique=True,
    )
    probe_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("probes.id", ondelete="CASCADE"),
        index=True,
    )
    chronon: Mapped[int] = mapped_column(Integer)


class ChrononMetricsRow(Base):
    __tablename__ = "chronon_metrics"

    chronon: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    started_at: Mapped[dt.datetime]
    budget: Mapped[int] = mapped_column(Integer)
    used: Mapped[int] = mapped_column(Integer)
    captured_ceis: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    missed_ceis: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    tick_jitter_seconds: Mapped[float | None] = mapped_column(Float)


class ServiceStateRow(Base):
    __tablename__ = "service_state"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON)
    updated_at: Mapped[dt.datetime]


class LeaseRow(Base):
    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(200))
    epoch: Mapped[int] = mapped_column(BigInteger)
    acquired_at: Mapped[dt.datetime]
    renewed_at: Mapped[dt.datetime]
    expires_at: Mapped[dt.datetime]
class NotifyTargetRow(Base):
    __tablename__ = "notify_targets"
    __table_args__ = (
        UniqueConstraint("user_id", "kind", "url_hash", name="uq_notify_targets_user_id_kind_url_hash"),
        _state_check("kind", TARGET_KINDS),
        NO_REUSE,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    url: Mapped[str] = mapped_column(Text)
    url_hash: Mapped[str] = mapped_column(String(64))  # sha256 hex: URLs are too long to index
    secret: Mapped[str | None] = mapped_column(String(100))
    previous_secret: Mapped[str | None] = mapped_column(String(100))
    previous_secret_expires_at: Mapped[dt.datetime | None]
    disabled: Mapped[bool] = mapped_column(Boolean, server_default=false())
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime]


class NotifySubscriptionRow(Base):
    __tablename__ = "notify_subscriptions"
    __table_args__ = (NO_REUSE,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    profile_id: Mapped[int] = mapped_column(
        ForeignKey("profiles.id", ondelete="CASCADE"), index=True
    )
    rule_id: Mapped[int | None] = mapped_column(
        ForeignKey("rules.id", ondelete="CASCADE"), index=True
    )
    target_id: Mapped[int] = mapped_column(
        ForeignKey("notify_targets.id", ondelete="CASCADE"), index=True
    )
    events: Mapped[str] = mapped_column(String(32))  # "captured,missed"


class NotificationEventRow(Base):
    __tablename__ = "notification_events"
    __table_args__ = (
        Index("ix_notification_events_user_id_id", "user_id", "id"),
        # A profile's resolutions in order, read with ?after= (migration 0006).
        Index("ix_notification_events_profile_id_id", "profile_id", "id"),
        _state_check("type", EVENT_TYPES),
        NO_REUSE,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    profile_id: Mapped[int] = mapped_column(
        ForeignKey("profiles.id", ondelete="CASCADE"), index=True
    )
    cei_id: Mapped[str] = mapped_column(String(64), unique=True)
    type: Mapped[str] = mapped_column(String(16))
    payload: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime]


class DeliveryRow(Base):
    __tablename__ = "deliveries"
    __table_args__ = (
        UniqueConstraint("event_id", "target_id", name="uq_deliveries_event_id_target_id"),
        Index("ix_deliveries_state_next_attempt_at", "state", "next_attempt_at"),
        _state_check("state", DELIVERY_STATES),
        NO_REUSE,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    event_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("notification_events.id", ondelete="CASCADE"),
    )
    target_id: Mapped[int] = mapped_column(
        ForeignKey("notify_targets.id", ondelete="CASCADE"), index=True
    )
    msg_id: Mapped[str] = mapped_column(String(64), unique=True)
    state: Mapped[str] = mapped_column(String(16), server_default=text("'pending'"))
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    next_attempt_at: Mapped[dt.datetime]
    window_start: Mapped[dt.datetime]  # retries go on until window_start + the retry window
    last_attempt_at: Mapped[dt.datetime | None]
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime]


metadata = Base.metadata


class ClusterProcessRow(Base):
    """One running ``proxy serve`` process (issue 21): its role and address, refreshed by heartbeats."""

    __tablename__ = "cluster_processes"
    __table_args__ = (Index("ix_cluster_processes_heartbeat_at", "heartbeat_at"),)

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    host: Mapped[str] = mapped_column(String(255))
    port: Mapped[int] = mapped_column(Integer)
    #: What the process claims (still written for readers older than migration 0008, which
    #: trust it); the listing now asks the lease row instead (``holder``).
    leads: Mapped[bool] = mapped_column(Boolean, server_default=false())
    epoch: Mapped[int | None] = mapped_column(BigInteger)
    #: This process's holder id for ``leases`` (``None``: a worker, which never campaigns).
    holder: Mapped[str | None] = mapped_column(String(200))
    started_at: Mapped[dt.datetime]
    heartbeat_at: Mapped[dt.datetime]


class WebSubSubscriptionRow(Base):
    """A WebSub subscription of a feed at its hub (issue 44; :mod:`proxy.store._websub`).

    ``feed_id`` has no foreign key on purpose: a deleted feed's row must outlive it until the
    hub has verified the unsubscription. ``callback_id`` is the random path segment of the
    callback URL (never the feed id); ``secret`` the HMAC key given to the hub.
    """

    __tablename__ = "websub_subscriptions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    feed_id: Mapped[int] = mapped_column(Integer, index=True)
    hub: Mapped[str] = mapped_column(Text)
    topic: Mapped[str] = mapped_column(Text)
    callback_id: Mapped[str] = mapped_column(String(64), unique=True)
    secret: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(16), server_default=text("'pending'"))
    lease_seconds: Mapped[int | None] = mapped_column(Integer)
    lease_expires_at: Mapped[dt.datetime | None]
    requested_at: Mapped[dt.datetime | None]
    next_attempt_at: Mapped[dt.datetime | None]
    failures: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    reason: Mapped[str | None] = mapped_column(Text)
    last_notification_at: Mapped[dt.datetime | None]
    notifications: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    rejected: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    created_at: Mapped[dt.datetime]
