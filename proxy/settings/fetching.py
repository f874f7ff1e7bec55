"""How feeds are fetched: politeness, limits, timeouts, identity."""

from __future__ import annotations

from pydantic import Field, field_validator

from proxy import DEFAULT_USER_AGENT
from proxy.settings._base import HOUR, MIN_TIMEOUT, SettingsGroup


class FetchingSettings(SettingsGroup):
    """Fetching feeds: how feeds are fetched: politeness, limits, timeouts, identity."""

    allow_private_networks: bool = Field(
        default=False,
        description=(
            "Allow feed URLs that resolve to private, loopback or link-local addresses "
            "(off by default: SSRF guard)."
        ),
    )
    per_host_concurrency: int = Field(
        default=2, ge=1, le=1000, description="Most simultaneous requests to one feed host."
    )
    per_host_min_delay_seconds: float = Field(
        default=1.0, ge=0, le=HOUR,
        description="Least time between two requests to the same feed host."
    )
    probe_processes: int = Field(
        default=0,
        ge=0,
        le=256,
        description=(
            "Worker processes that probe feeds (fetch and parse); 0 probes in the service's own "
            "process. Set it to the number of cores when probing is CPU-bound "
            "(docs/bench-probe.md)."
        ),
    )
    respect_cache_hints: bool = Field(
        default=True,
        description="Do not probe a feed before its Cache-Control max-age / Retry-After allows.",
    )
    max_body_bytes: int = Field(
        default=5 * 1024 * 1024,
        ge=1024,
        le=1024**3,
        description="Largest feed body read; longer bodies fail the probe.",
    )
    http_connect_timeout_seconds: float = Field(
        default=5.0, ge=MIN_TIMEOUT, le=HOUR, description="Timeout for opening a connection to a feed host."
    )
    http_read_timeout_seconds: float = Field(
        default=10.0, ge=MIN_TIMEOUT, le=HOUR, description="Timeout between two reads of a feed response."
    )
    http_total_timeout_seconds: float = Field(
        default=30.0, ge=MIN_TIMEOUT, le=HOUR, description="Timeout for a whole feed request, connection to last byte."
    )
    user_agent: str = Field(
        default=DEFAULT_USER_AGENT,
        min_length=1, max_length=512,
        description=(
            "The User-Agent of every feed request: the default names the project, its version and "
            "URL; operators add their own contact (a URL or an e-mail address) so feed hosts can "
            "reach them."
        ),
    )

    @field_validator("user_agent")
    @classmethod
    def _header_safe(cls, value: str) -> str:
        # RFC 9110 §5.5: a field value is visible ASCII and spaces; a newline would split headers.
        if not value.strip() or any(not (" " <= c <= "~") for c in value):
            raise ValueError("must be printable ASCII on one line (RFC 9110 §5.5), not empty")
        return value.strip()
