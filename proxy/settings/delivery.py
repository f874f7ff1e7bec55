"""Notification delivery: webhooks' timeouts, retries and concurrency."""

from __future__ import annotations

from pydantic import Field

from proxy.settings._base import DAY, HOUR, MIN_TIMEOUT, SettingsGroup


class DeliverySettings(SettingsGroup):
    """Notification delivery: notification delivery: webhooks' timeouts, retries and concurrency."""

    delivery_timeout_seconds: float = Field(
        default=10.0, ge=MIN_TIMEOUT, le=HOUR,
        description="Timeout of one notification delivery attempt (webhook POST or Apprise call).",
    )
    delivery_retry_base_seconds: float = Field(
        default=5.0, ge=MIN_TIMEOUT, le=DAY,
        description=(
            "Back-off before the first retry of a failed delivery; doubles per attempt "
            "(with jitter) up to `PROXY_DELIVERY_RETRY_MAX_SECONDS`. A longer `Retry-After` wins."
        ),
    )
    delivery_retry_max_seconds: float = Field(
        default=3600.0, ge=MIN_TIMEOUT, le=30 * DAY, description="Longest back-off between two delivery attempts."
    )
    delivery_retry_window_seconds: float = Field(
        default=86400.0, ge=MIN_TIMEOUT, le=365 * DAY,
        description=(
            "How long a delivery is retried before it becomes a dead letter "
            "(`GET /api/v1/deliveries?state=failed`); 24 h by default."
        ),
    )
    delivery_concurrency: int = Field(
        default=100, ge=1, le=10_000, description="Most delivery attempts in flight at once."
    )
    delivery_per_target_concurrency: int = Field(
        default=4, ge=1, le=1000, description="Most delivery attempts in flight to one target at once."
    )
    delivery_poll_seconds: float = Field(
        default=1.0, ge=MIN_TIMEOUT, le=HOUR,
        description=(
            "Longest time the dispatcher sleeps between looks at the outbox (it is also woken "
            "by every resolution)."
        ),
    )
    webhook_secret_overlap_seconds: float = Field(
        default=86400.0, ge=0, le=30 * DAY,
        description=(
            "After a webhook secret rotation, how long the previous secret still signs "
            "(a second signature), unless the request says otherwise."
        ),
    )
