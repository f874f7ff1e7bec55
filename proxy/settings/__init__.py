"""The proxy's configuration: environment variables prefixed ``PROXY_``, optionally from ``.env``.

Every setting has a default that works on one machine (SQLite file under
``./data/``, 60 s chronons, 10 probes per chronon). Invalid values stop
start-up: :func:`load_settings` raises :class:`~proxy.errors.SettingsError`
whose message names the environment variable and the reason.

The settings come in groups of one purpose, each a module of this package
(:data:`GROUPS`: scheduling, the store, fetching, the API, the web interface,
delivery, WebSub, operations, scale-out). :class:`Settings` inherits them all,
so every setting keeps its flat name: ``settings.budget``, ``PROXY_BUDGET``.

The configuration table (docs/configuration.md) is generated from these classes
by :func:`settings_table_markdown`, so a field's ``description`` is its
documentation.

This module does not create the database or its directory; the store does
that when it opens an engine (:func:`proxy.store.make_engine`).
"""

from __future__ import annotations

from typing import Any

import pydantic

from proxy.errors import SettingsError
from proxy.settings._base import (
    BROKER_JOB_MAX_SECONDS,
    CONFIG,
    ENV_PREFIX,
    SPEC_POLICY_NAMES,
    SettingsGroup,
    env_name,
    known_policy_names,
)
from proxy.settings.api import ApiSettings
from proxy.settings.cluster import ClusterSettings
from proxy.settings.delivery import DeliverySettings
from proxy.settings.fetching import FetchingSettings
from proxy.settings.operations import OperationsSettings
from proxy.settings.scheduling import SchedulingSettings
from proxy.settings.store import StoreSettings
from proxy.settings.ui import UiSettings
from proxy.settings.websub import WebSubSettings

__all__ = [
    "BROKER_JOB_MAX_SECONDS",
    "ENV_PREFIX",
    "GROUPS",
    "SPEC_POLICY_NAMES",
    "Settings",
    "SettingsError",
    "SettingsGroup",
    "env_name",
    "known_policy_names",
    "load_settings",
    "settings_by_group",
    "settings_table_markdown",
]

#: The groups, in the order the reference lists them: each one purpose, each its own module.
GROUPS: tuple[type[SettingsGroup], ...] = (
    SchedulingSettings,
    StoreSettings,
    FetchingSettings,
    ApiSettings,
    UiSettings,
    DeliverySettings,
    WebSubSettings,
    OperationsSettings,
    ClusterSettings,
)


class Settings(
    ClusterSettings,
    OperationsSettings,
    WebSubSettings,
    DeliverySettings,
    UiSettings,
    ApiSettings,
    FetchingSettings,
    StoreSettings,
    SchedulingSettings,
):
    """All of the proxy's settings: every group's, under their flat names."""

    model_config = CONFIG

    @property
    def ack_wait_seconds(self) -> float:
        """The broker's redelivery delay: as set, or the whole-request timeout plus 10 s
        (scale-out's setting, fetching's timeout: it needs both groups)."""
        return self.broker_ack_wait_seconds or self.http_total_timeout_seconds + 10.0


def _describe(error: Any) -> str:
    loc = error.get("loc") or ()
    field = str(loc[0]) if loc else "?"
    name = env_name(field) if field in Settings.model_fields else field
    message = str(error.get("msg", "invalid value"))
    # pydantic prefixes messages raised by our validators with "Value error, ".
    message = message.removeprefix("Value error, ")
    value = error.get("input")
    if not loc:  # a model-level check (e.g. PROXY_METRICS_TOKEN_FILE): its message names it
        return message
    shown = "" if value is None or isinstance(value, dict) else f" (got {value!r})"
    return f"{name}: {message}{shown}"


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment (and ``.env``), ``overrides`` taking precedence.

    Raises :class:`SettingsError` naming every invalid variable and why, e.g.
    ``PROXY_BUDGET: Input should be greater than or equal to 1 (got '0')``.
    """
    unknown = sorted(set(overrides) - set(Settings.model_fields))
    if unknown:
        raise SettingsError(f"unknown setting(s): {', '.join(unknown)}")
    try:
        return Settings(**overrides)
    except pydantic.ValidationError as exc:
        problems = "; ".join(_describe(error) for error in exc.errors())
        raise SettingsError(f"invalid settings: {problems}") from None


def group_title(group: type[SettingsGroup]) -> str:
    """A group's heading: its docstring up to the colon (``"Scheduling"``)."""
    return (group.__doc__ or group.__name__).split(":", 1)[0].strip()


def settings_table_markdown() -> str:
    """Markdown tables of every setting, one per group: variable, default, description."""
    out: list[str] = []
    for group in GROUPS:
        out += [f"### {group_title(group)}\n", "| Variable | Default | Description |", "|---|---|---|"]
        for name in _own_fields(group):
            field = Settings.model_fields[name]
            default = field.default
            shown = str(default).lower() if isinstance(default, bool) else str(default)
            description = (field.description or "").replace("|", "\\|")
            out.append(f"| `{env_name(name)}` | `{shown}` | {description} |")
        out.append("")
    return "\n".join(out)


def _own_fields(group: type[SettingsGroup]) -> list[str]:
    inherited = set(SettingsGroup.model_fields)
    return [name for name in group.model_fields if name not in inherited]


def settings_by_group() -> list[tuple[str, list[str]]]:
    """Each group's heading and its fields' names, in the reference's order."""
    return [(group_title(group), _own_fields(group)) for group in GROUPS]
