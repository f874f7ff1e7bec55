"""Running the service: logs, the leader lease, standby, shutdown, faults for tests."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from proxy.settings._base import DAY, LOG_LEVELS, SettingsGroup


class OperationsSettings(SettingsGroup):
    """Operations: running the service: logs, the leader lease, standby, shutdown, faults for tests."""

    log_level: str = Field(
        default="INFO",
        description="Least severity logged: DEBUG, INFO, WARNING, ERROR or CRITICAL.",
    )
    log_format: Literal["json", "console"] = Field(
        default="console", description="`json` (one object per line, for collectors) or `console`."
    )
    standby: Literal["wait", "exit"] = Field(
        default="wait",
        description=(
            "What `proxy serve` does when another process already runs the chronon loop on the "
            "same database: `wait` serves the API as a standby (`/readyz` answers 503 "
            "`standby`) and takes over when the other stops or dies; `exit` exits with status 3."
        ),
    )
    lease_ttl_seconds: float = Field(
        default=0.0,
        ge=0,
        le=DAY,
        description=(
            "How long the chronon loop's lease outlives its holder's last renewal (renewed every "
            "third of it): a standby takes over this long after a kill -9. 0: two chronons, "
            "at least 10 s (docs/operations.md)."
        ),
    )
    drain_seconds: float = Field(
        default=30.0, ge=0,
        description=(
            "On SIGTERM, how long the service keeps writing its backlog before it exits; a "
            "second SIGTERM (or SIGINT) exits at once."
        ),
    )
    test_faults: str = Field(
        default="",
        description=(
            "Tests only: `point=probability,…` kills the process (SIGKILL) at the writer's "
            "fault points (`writer.between_units`, `writer.before_commit`, "
            "`writer.after_commit`). Empty: off."
        ),
    )
    loop_thread: bool = Field(
        default=True,
        description=(
            "Run the chronon loop (ticks, probes, the writer) on a thread with its own event "
            "loop, so API handlers that keep the API's event loop busy do not delay its ticks "
            "(docs/bench-api-load.md); false runs it on the API's event loop."
        ),
    )

    @field_validator("test_faults")
    @classmethod
    def _known_faults(cls, value: str) -> str:
        from proxy.faults import parse_faults

        parse_faults(value)
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level(cls, value: Any) -> Any:
        if isinstance(value, str):
            upper = value.strip().upper()
            if upper not in LOG_LEVELS:
                raise ValueError(
                    f"unknown log level {value!r}; choose one of: {', '.join(LOG_LEVELS)}"
                )
            return upper
        return value
