"""Scale-out over a NATS broker (docs/scale.md)."""

from __future__ import annotations

from pydantic import Field, field_validator

from proxy.settings._base import BROKER_JOB_MAX_SECONDS, SettingsGroup


class ClusterSettings(SettingsGroup):
    """Scale-out: scale-out over a NATS broker (docs/scale.md)."""

    # -- scale-out (issue 21; docs/scale.md) --------------------------------------------
    broker_url: str | None = Field(
        default=None,
        description=(
            "NATS JetStream URL (e.g. `nats://127.0.0.1:4222`). Needed by `proxy serve --role "
            "scheduler` (it sends probes to workers as jobs) and `--role worker`; unset, the "
            "default `--role all` probes in its own process."
        ),
    )
    broker_job_timeout_seconds: float = Field(
        default=60.0, gt=0, le=BROKER_JOB_MAX_SECONDS,
        description=(
            "How long a probe job lives on the broker: the scheduler counts it a network error "
            "after this, and workers drop it unprobed. At most 3600 (the broker drops jobs "
            "older than an hour by itself)."
        ),
    )
    broker_ack_wait_seconds: float = Field(
        default=0.0, ge=0,
        description=(
            "How long a worker may hold a job before the broker gives it to another worker (a "
            "worker that died mid-probe). 0: the whole-request timeout plus 10 s."
        ),
    )
    worker_concurrency: int = Field(
        default=64, ge=1, description="Probes one `--role worker` process runs at once."
    )
    heartbeat_seconds: float = Field(
        default=5.0, gt=0,
        description=(
            "How often each process refreshes its row for `GET /api/v1/cluster`; a process "
            "silent for three heartbeats is no longer listed."
        ),
    )

    @field_validator("broker_url")
    @classmethod
    def _nats_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        from urllib.parse import urlsplit

        scheme = urlsplit(value.strip()).scheme
        if scheme not in ("nats", "tls"):
            raise ValueError(
                f"{value!r}: the proxy's broker is NATS JetStream (nats://host:4222); "
                f"scheme {scheme!r} is not supported")
        return value.strip()
