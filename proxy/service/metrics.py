"""Prometheus metrics the service exports at ``/metrics``.

The names here are a contract: the Grafana dashboard in ``deploy/grafana`` and
the docs query them, and ``tests/test_deploy_files.py`` checks that every
metric the dashboard uses is defined here.  Each service instance owns its own
registry so that several apps can live in one process (tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PROBE_OUTCOMES = (
    "ok", "not_modified", "redirected", "gone", "rate_limited", "timeout",
    "too_large", "http_error", "network_error", "parse_error", "refused",
)
CEI_STATES = ("pending", "captured", "missed")
# Outcomes of delivery attempts (proxy.service.dispatch): sent (2xx), will retry, given up
# (dead letter), 410 Gone (target disabled), not sent because the target is disabled.
DELIVERY_OUTCOMES = ("delivered", "retry", "failed", "gone", "target_disabled")


@dataclass
class ServiceMetrics:
    """All collectors of one service instance, registered in ``registry``."""

    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        r = self.registry
        self.probes = Counter("proxy_probes", "Probes finished, by outcome.", ["outcome"], registry=r)
        self.budget = Gauge("proxy_budget_per_chronon", "Probe budget C_t of the current chronon.", registry=r)
        self.budget_used = Gauge(
            "proxy_budget_used", "Probes started in the last completed chronon.", registry=r)
        self.budget_used_total = Counter(
            "proxy_budget_used_probes", "Probes started, over all chronons.", registry=r)
        self.background_total = Counter(
            "proxy_background_probes",
            "Probes started with budget no EI needed, to find updates of watched feeds.", registry=r)
        self.update_models = Gauge(
            "proxy_update_models", "Feeds by the kind of update model learnt for them.", ["kind"],
            registry=r)
        self.budget_offered_total = Counter(
            "proxy_budget_offered_probes", "Budget offered, summed over chronons.", registry=r)
        self.ceis = Gauge("proxy_ceis", "CEIs by state.", ["state"], registry=r)
        self.completeness = Gauge(
            "proxy_completeness", "Captured CEIs / resolved (captured + missed) CEIs.", registry=r)
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
        self.write_backlog = Gauge(
            "proxy_write_backlog", "Batches of decisions decided but not yet in the database.",
            registry=r)
        self.write_lag = Gauge(
            "proxy_write_lag_seconds",
            "Age of the oldest batch not yet in the database (0 when none): /readyz answers 503 "
            "past PROXY_WRITE_LAG_READY_SECONDS.", registry=r)
        self.write_buffer_full = Counter(
            "proxy_write_buffer_full_chronons",
            "Chronons that started no probe because PROXY_WRITE_BUFFER_BATCHES batches were "
            "waiting for the database.", registry=r)
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
        for outcome in PROBE_OUTCOMES:
            self.probes.labels(outcome=outcome)
        for state in CEI_STATES:
            self.ceis.labels(state=state)
        for outcome in DELIVERY_OUTCOMES:
            self.deliveries.labels(outcome=outcome)

    def exported_names(self) -> set[str]:
        """Every sample name this registry exposes (``_total``, ``_bucket`` … included)."""
        names: set[str] = set()
        for metric in self.registry.collect():
            for sample in metric.samples:
                names.add(sample.name)
        return names
