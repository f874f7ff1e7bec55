"""The HTTP API: where it listens, what it accepts, who reads /metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from proxy.settings._base import HOUR, MIN_TIMEOUT, SettingsGroup


class ApiSettings(SettingsGroup):
    """The HTTP API: the HTTP API: where it listens, what it accepts, who reads /metrics."""

    host: str = Field(
        default="127.0.0.1", min_length=1, description="Address the HTTP API binds to."
    )
    port: int = Field(default=8000, ge=1, le=65535, description="TCP port of the HTTP API.")
    max_request_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        le=1024 * 1024 * 1024,
        description="Largest API request body; a longer one answers 413 before it is read whole.",
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        description=(
            "If set, `/metrics` answers 401 unless the request sends "
            "`Authorization: Bearer <token>` (Prometheus: `authorization.credentials_file`). "
            "`/metrics` is meant for an internal network either way."
        ),
    )

    metrics_token_file: str | None = Field(
        default=None,
        description=(
            "File holding the metrics token (its first line), instead of `PROXY_METRICS_TOKEN`: "
            "a compose or Kubernetes secret such as `/run/secrets/metrics_token`. Setting both "
            "is refused."
        ),
    )

    @field_validator("metrics_token")
    @classmethod
    def _no_empty_token(cls, value: SecretStr | None) -> SecretStr | None:
        # An empty PROXY_METRICS_TOKEN= line means "no token", not "the empty token".
        return value if value is not None and value.get_secret_value().strip() else None

    @model_validator(mode="before")
    @classmethod
    def _token_from_file(cls, data: Any) -> Any:
        """``metrics_token_file``'s first line becomes ``metrics_token``, read once at start."""
        if not isinstance(data, dict) or not data.get("metrics_token_file"):
            return data
        path = Path(str(data["metrics_token_file"]))
        if str(data.get("metrics_token") or "").strip():
            raise ValueError(
                "set PROXY_METRICS_TOKEN or PROXY_METRICS_TOKEN_FILE, not both")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ValueError(
                f"PROXY_METRICS_TOKEN_FILE={path}: cannot read it ({exc.strerror or exc})") from None
        token = lines[0].strip() if lines else ""
        if not token:
            raise ValueError(f"PROXY_METRICS_TOKEN_FILE={path} is empty: its first line is the token")
        return {**data, "metrics_token": token}
    sse_keepalive_seconds: float = Field(
        default=15.0, ge=MIN_TIMEOUT, le=HOUR,
        description="Idle time after which `GET /api/v1/events` sends a keep-alive comment.",
    )

    ping_rate_per_minute: float = Field(
        default=30.0, ge=0.01, le=60_000,
        description=(
            "Pings accepted per feed per minute, on average (a token bucket per feed: anyone who "
            "registered the feed knows its token); more answer 429 with `Retry-After`."
        ),
    )
    ping_burst: int = Field(
        default=10, ge=1, le=10_000,
        description="Pings one feed may send at once before `PROXY_PING_RATE_PER_MINUTE` applies.",
    )

    api_concurrency: int = Field(
        default=4, ge=1, le=10_000,
        description=(
            "Most API requests in progress at once; more wait their turn (the event stream and "
            "health endpoints excepted). Low: fewer requests switching on the API's event loop "
            "serve more per second, and with PROXY_LOOP_THREAD=false busy clients cannot crowd "
            "the chronon loop's probes out of the event loop they share "
            "(docs/bench-api-load.md)."
        ),
    )
    docs_site: str = Field(
        default="site",
        description=(
            "Folder of the built documentation site (`make docs` writes `site/`), served at "
            "`/docs/guide/` when it holds an `index.html` (relative paths: from the working "
            "directory). Empty: never served."
        ),
    )
