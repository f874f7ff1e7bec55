"""The web interface's sessions."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from proxy.settings._base import SettingsGroup


class UiSettings(SettingsGroup):
    """The web interface: the web interface's sessions."""

    ui_secret: SecretStr | None = Field(
        default=None,
        description=(
            "Key that signs the web interface's session cookies (`/ui`). Unset: a random key per "
            "process, so sessions end at a restart; set the same value on every process behind "
            "one address."
        ),
    )
    ui_cookie_secure: bool = Field(
        default=True,
        description=(
            "Mark the `/ui` session cookie `Secure` (sent over HTTPS only; browsers also accept "
            "it from `http://localhost`). Turn off only to try the UI over plain HTTP on another host."
        ),
    )
    ui_session_hours: float = Field(
        default=12.0, gt=0, le=24 * 30,
        description="A `/ui` session ends this long after sign-in (or when its API key is revoked).",
    )

    @field_validator("ui_secret")
    @classmethod
    def _no_empty_ui_secret(cls, value: SecretStr | None) -> SecretStr | None:
        return value if value is not None and value.get_secret_value().strip() else None
