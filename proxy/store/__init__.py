"""Persistence: SQLAlchemy tables, the async :class:`Store` repository, Alembic migrations.

Public API::

    make_engine(url)                      # AsyncEngine with SQLite pragmas / PG pre-ping
    upgrade_database(url)                 # apply migrations (service start, `proxy db upgrade`)
    Store.from_url(url) / Store(engine)   # every query the service and API need
    records: User, ApiKey, ChrononFigures, Feed, Registration, RegisteredFeed, FeedHealth, Profile, Rule, Cei, Ei,
             Entry, CapturedEntry, Probe, MetricsSummary, ProfileCompleteness, PurgeResult,
             ProbeRecord, Lease (who runs the chronon loop: holder, epoch, expiry),
             ClusterProcess (a live process of a scaled-out deployment)
    fence_writes(lease, holder, epoch)   # this task's transactions commit only at that epoch
    inputs:  RuleInput, NewProfile, NewEi, NewEntry, ProbeInput, CaptureInput, CeiStateChange,
             FeedUpdate, ProbeItem (one probe's inputs to record_probes), TargetInput, AttemptOutcome
    outbox:  NotifyTarget, NotificationEvent, Delivery, DueDelivery (issue 19)

Nothing outside this package writes SQL. The store knows nothing of policies,
HTTP or rule semantics.
"""

from proxy.store._audit import INVARIANTS, AuditReport, Violation
from proxy.store._cluster import ClusterProcess, fence_writes
from proxy.store._engine import PG_KEEPALIVES_SQL, make_engine
from proxy.store._lease import Lease
from proxy.store._repository import Store, hash_api_key
from proxy.store._types import (
    CEI_STATES,
    TARGET_DISABLED_ERROR,
    ApiKey,
    AttemptOutcome,
    CapturedEntry,
    CaptureInput,
    Cei,
    CeiState,
    CeiStateChange,
    ChrononFigures,
    Delivery,
    DeliveryState,
    DueDelivery,
    Ei,
    Entry,
    Feed,
    FeedActivity,
    FeedHealth,
    FeedUpdate,
    MatchedRecord,
    MetricsSummary,
    MetricTotals,
    NewEi,
    NewEntry,
    NewProfile,
    NotificationEvent,
    NotifyTarget,
    Probe,
    ProbeInput,
    ProbeItem,
    ProbeRecord,
    Profile,
    ProfileCompleteness,
    PurgeResult,
    RegisteredFeed,
    Registration,
    Rule,
    RuleInput,
    TargetInput,
    User,
)
from proxy.store._websub import WEBSUB_STATES, WebSubSubscription
from proxy.store.migrate import current_revision, downgrade_database, upgrade_database

__all__ = [
    "CEI_STATES",
    "INVARIANTS",
    "PG_KEEPALIVES_SQL",
    "TARGET_DISABLED_ERROR",
    "WEBSUB_STATES",
    "ApiKey",
    "AttemptOutcome",
    "AuditReport",
    "CaptureInput",
    "CapturedEntry",
    "Cei",
    "CeiState",
    "CeiStateChange",
    "ChrononFigures",
    "ClusterProcess",
    "Delivery",
    "DeliveryState",
    "DueDelivery",
    "Ei",
    "Entry",
    "Feed",
    "FeedActivity",
    "FeedHealth",
    "FeedUpdate",
    "Lease",
    "MatchedRecord",
    "MetricTotals",
    "MetricsSummary",
    "NewEi",
    "NewEntry",
    "NewProfile",
    "NotificationEvent",
    "NotifyTarget",
    "Probe",
    "ProbeInput",
    "ProbeItem",
    "ProbeRecord",
    "Profile",
    "ProfileCompleteness",
    "PurgeResult",
    "RegisteredFeed",
    "Registration",
    "Rule",
    "RuleInput",
    "Store",
    "TargetInput",
    "User",
    "Violation",
    "WebSubSubscription",
    "current_revision",
    "downgrade_database",
    "fence_writes",
    "hash_api_key",
    "make_engine",
    "upgrade_database",
]
