"""WebSub push (docs/websub.md)."""

from __future__ import annotations

from pydantic import Field, field_validator

from proxy.settings._base import SettingsGroup


class WebSubSettings(SettingsGroup):
    """WebSub: webSub push (docs/websub.md)."""

    public_url: str | None = Field(
        default=None,
        description=(
            "The proxy's own URL as hubs reach it (e.g. `https://proxy.example`); WebSub "
            "callbacks are `<this>/websub/<id>`. Unset: no WebSub, every feed is polled "
            "(docs/websub.md)."
        ),
    )
    websub_lease_seconds: int = Field(
        default=10 * 86400, ge=60, le=365 * 86400,
        description=(
            "Lease asked of WebSub hubs (`hub.lease_seconds`); a subscription is renewed at 85% "
            "of the lease the hub grants."
        ),
    )

    @field_validator("public_url")
    @classmethod
    def _check_public_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")) or "?" in value or "#" in value:
            raise ValueError("must be an http(s) URL without query or fragment")
        return value
