"""Prometheus metrics the service exports at ``/metrics``.

The names here are a contract: the Grafana dashboard in ``deploy/grafana`` and
the docs query them, and ``tests/test_deploy_files.py`` checks that every
metric the dashboard uses is defined here.  Each service instance owns its own
registry so that several apps can live in one process (tests).

Names follow Prometheus' conventions (issue 23): a unit suffix in the plural
base unit (``_seconds``, ``_probes``), ``_ratio`` for a share, ``_total`` for
counters; ``proxy_build_info`` and the ``process_*`` / ``python_*`` collectors
come with every registry; no ``_created`` series (they double the series count
and no dashboard reads them). Totals a user reads as totals (probes by outcome,
budget used and offered, CEIs captured and missed) start from what the database
holds when the process takes the loop (:meth:`ServiceMetrics.restore_totals`),
so a restart does not zero them.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from proxy import __version__

# The `_created` series of every counter and histogram: process-global in prometheus_client.
disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client

PROBE_OUTCOMES = (
    "ok", "not_modified", "redirected", "gone", "rate_limited", "timeout",
    "too_large", "http_error", "network_error", "parse_error", "refused",
)
CEI_STATES = ("pending", "captured", "missed")
# Outcomes of delivery attempts (proxy.service.dispatch): sent (2xx), will retry, given up
# (dead letter), 410 Gone (target disabled), not sent because the target is disabled.
PING_OUTCOMES = ("accepted", "rate_limited")
# WebSub (issue 44): a subscription's states, and what became of each content distribution.
WEBSUB_STATES = ("pending", "subscribed", "denied", "expired", "unsubscribing")
WEBSUB_OUTCOMES = ("accepted", "bad_signature", "unknown", "too_large", "not_subscribed", "rate_limited")
DELIVERY_OUTCOMES = ("delivered", "retry", "failed", "gone", "target_disabled")


@dataclass
class ServiceMetrics:
    """All collectors of one service instance, registered in ``registry``."""

    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))
    # CEIs resolved before this process took the loop (from the database): the engine counts
    # only its own, the gauges show both (restore_totals).
    resolved_before: dict[str, int] = field(default_factory=dict)
    _totals_restored: bool = False

    def __post_init__(self) -> None:
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        Info("proxy_build", "The proxy's version and the Python it runs on.", registry=r).info(
            {"version": __version__, "python": platform.python_version()})
        self.probes = Counter("proxy_probes", "Probes finished, by outcome.", ["outcome"], registry=r)
        self.budget = Gauge(
            "proxy_chronon_budget_probes", "Probe budget C_t of the current chronon, in probes.", registry=r)
        self.budget_used = Gauge(
            "proxy_chronon_used_probes", "Probes started in the last completed chronon.", registry=r)
        self.budget_used_total = Counter(
            "proxy_budget_used_probes", "Probes started, over all chronons.", registry=r)
        self.background_total = Counter(
            "proxy_background_probes",
            "Probes started with budget no EI needed, to find updates of watched feeds.", registry=r)
        self.predicted_total = Counter(
            "proxy_predicted_probes",
            "Probes started for the proxy's own predicted EIs (SUP/fbSUP, PROXY_DISCOVERY_PREDICTED); "
            "not counted in proxy_background_probes_total.", registry=r)
        self.unwatched_total = Counter(
            "proxy_unwatched_probes",
            "Probes started with budget no rule needed, of registered feeds no rule reads "
            "(PROXY_UNWATCHED_PROBE_INTERVAL_SECONDS).", registry=r)
        self.update_models = Gauge(
            "proxy_update_models", "Feeds by the kind of update model learnt for them.", ["kind"],
            registry=r)
        self.budget_offered_total = Counter(
            "proxy_budget_offered_probes", "Budget offered, summed over chronons.", registry=r)
        self.ceis = Gauge("proxy_ceis", "CEIs by state.", ["state"], registry=r)
        self.completeness = Gauge(
            "proxy_completeness_ratio", "Captured CEIs / resolved (captured + missed) CEIs.", registry=r)
        self.probe_duration = Histogram(
            "proxy_probe_duration_seconds", "Wall time of one probe (fetch + parse).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.tick_jitter = Histogram(
            "proxy_tick_jitter_seconds", "Lateness of a chronon tick behind its schedule.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1), registry=r)
        self.inflight = Gauge("proxy_inflight_probes", "Probes currently in flight.", registry=r)
        self.db_errors = Counter("proxy_db_errors", "Database errors seen by the service.", registry=r)
        self.writes_refused = Counter(
            "proxy_writes_refused",
            "Decisions the database refused to record (a conflict with what it holds, e.g. a CEI "
            "id that already exists): each is a bug or a second writer, never expected.", registry=r)
        self.ops_refused = Counter(
            "proxy_ops_refused",
            "Rule evaluator ops the engine refused (an op on a CEI it does not hold, a duplicate "
            "id): impossible by construction, so each is a bug; logged as op_refused.", registry=r)
        self.write_backlog = Gauge(
            "proxy_write_backlog", "Batches of decisions decided but not yet in the database.",
            registry=r)
        self.write_lag = Gauge(
            "proxy_write_lag_seconds",
            "Age of the oldest batch not yet in the database (0 when none): /readyz answers 503 "
            "past PROXY_WRITE_LAG_READY_SECONDS.", registry=r)
        self.write_backlog_bytes = Gauge(
            "proxy_write_backlog_bytes",
            "Estimated memory held by the batches not yet in the database (bounded by "
            "PROXY_WRITE_BUFFER_BYTES).", registry=r)
        self.write_buffer_full = Counter(
            "proxy_write_buffer_full_chronons",
            "Chronons the loop skipped (no decision, no probe) because the write buffer was "
            "full: PROXY_WRITE_BUFFER_BYTES or PROXY_WRITE_BUFFER_BATCHES waiting for the "
            "database.", registry=r)
        self.chronon = Gauge("proxy_chronon", "The current chronon number.", registry=r)
        self.leader = Gauge(
            "proxy_leader", "1 while this process holds the chronon loop's lease, 0 as a standby.",
            registry=r)
        self.lease_epoch = Gauge(
            "proxy_lease_epoch", "Epoch of the loop lease this process holds (0: none).", registry=r)
        self.leader_changes = Counter(
            "proxy_leader_changes", "Times this process took or lost the loop's lease.", registry=r)
        self.deliveries = Counter(
            "proxy_deliveries", "Notification delivery attempts, by outcome.", ["outcome"],
            registry=r)
        self.delivery_latency = Histogram(
            "proxy_delivery_latency_seconds",
            "From a CEI's resolution (stored) to its notification's 2xx, per delivery.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600, 86400),
            registry=r)
        self.outbox_backlog = Gauge(
            "proxy_outbox_backlog", "Pending notification deliveries (due or awaiting a retry).",
            registry=r)
        self.pings = Counter(
            "proxy_pings",
            "Authenticated pings (update notifications), by outcome: accepted, or rate_limited "
            "(over the feed's PROXY_PING_RATE_PER_MINUTE / PROXY_PING_BURST, answered 429).",
            ["outcome"], registry=r)
        for outcome in PING_OUTCOMES:
            self.pings.labels(outcome=outcome)
        self.websub_subscriptions = Gauge(
            "proxy_websub_subscriptions",
            "WebSub subscriptions by state (pending, subscribed, denied, expired, unsubscribing), "
            "as last counted by the leader.", ["state"], registry=r)
        for state in WEBSUB_STATES:
            self.websub_subscriptions.labels(state=state)
        self.websub_notifications = Counter(
            "proxy_websub_notifications",
            "WebSub content distributions received, by outcome: accepted (heard as an update), "
            "bad_signature, unknown (no such callback), too_large, not_subscribed; all but "
            "accepted are answered 2xx and ignored (WebSub §8).", ["outcome"], registry=r)
        for outcome in WEBSUB_OUTCOMES:
            self.websub_notifications.labels(outcome=outcome)
        for outcome in PROBE_OUTCOMES:
            self.probes.labels(outcome=outcome)
        for state in CEI_STATES:
            self.ceis.labels(state=state)
        for outcome in DELIVERY_OUTCOMES:
            self.deliveries.labels(outcome=outcome)

    def restore_totals(
        self,
        probes: Mapping[str, int],
        budget_used: int,
        budget_offered: int,
        ceis: Mapping[str, int],
        deliveries: Mapping[str, int] | None = None,
    ) -> None:
        """Start the totals from the database's (once per process: counters only go up).

        ``probes`` and ``deliveries`` by outcome and the budget sums go into the counters; resolved
        ``ceis`` by state become the base the CEI gauges and completeness add the
        engine's counts to. A second call (the lease lost and won again) changes
        nothing: this process's counters already hold what it did.
        """
        if self._totals_restored:
            return
        self._totals_restored = True
        for outcome, n in probes.items():
            if n > 0:
                self.probes.labels(outcome=outcome).inc(n)
        for outcome, n in (deliveries or {}).items():
            if n > 0:
                self.deliveries.labels(outcome=outcome).inc(n)
        if budget_used > 0:
            self.budget_used_total.inc(budget_used)
        if budget_offered > 0:
            self.budget_offered_total.inc(budget_offered)
        self.resolved_before = {s: n for s, n in ceis.items() if s != "pending"}
        self.show_ceis({})

    def show_ceis(self, engine_counts: Mapping[str, int]) -> None:
        """Set the CEI gauges and completeness: the database's resolved CEIs plus the engine's."""
        total = {s: engine_counts.get(s, 0) + self.resolved_before.get(s, 0) for s in CEI_STATES}
        for state, n in total.items():
            self.ceis.labels(state=state).set(n)
        resolved = total["captured"] + total["missed"]
        if resolved:
            self.completeness.set(total["captured"] / resolved)

    def exported_names(self) -> set[str]:
        """Every sample name this registry exposes (``_total``, ``_bucket`` … included)."""
        names: set[str] = set()
        for metric in self.registry.collect():
            for sample in metric.samples:
                names.add(sample.name)
        return names
