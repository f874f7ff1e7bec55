"""What every group of settings shares: the prefix, the bounds, the base class."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "PROXY_"

# The policy names of shared/spec/workload-format.md; used only until the
# registry in proxy.core.policies exists (it is the single source of truth).
SPEC_POLICY_NAMES: tuple[str, ...] = (
    "s-edf-np",
    "s-edf-p",
    "mrsf-np",
    "mrsf-p",
    "m-edf-np",
    "m-edf-p",
    "wic",
    "round-robin",
)

# Bounds of numeric settings (issue 24.3): a value outside them is a typo or a unit mistake, and
# some are harmful (a 1 µs chronon spins a core and ignores SIGTERM), so start-up refuses them.
MIN_CHRONON_SECONDS = 0.01
MIN_TIMEOUT = 0.01  # seconds: shorter timeouts and periods cannot be honoured by the event loop
HOUR = 3600.0
DAY = 86400.0
WEEK = 7 * DAY
MAX_BUDGET = 100_000
#: The longest a probe job may live: the broker drops jobs older than this by itself.
BROKER_JOB_MAX_SECONDS = HOUR

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Async drivers only: the store is asyncio end to end. Plain dialect names are
# accepted and mapped to the async driver, because that is what people type.
DRIVER_FOR_DIALECT = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}

CONFIG = SettingsConfigDict(
    env_prefix=ENV_PREFIX,
    env_file=".env",
    env_file_encoding="utf-8",
    extra="ignore",
    frozen=True,
    validate_default=True,
    # NaN passes every ge/le bound; infinities are as much a typo as 1e12.
    allow_inf_nan=False,
)


def known_policy_names() -> tuple[str, ...]:
    """The policy names the core's registry accepts (the spec's list until the registry exists)."""
    try:
        # Imported lazily: settings must load even while core is being written,
        # and `proxy --help` should not import the engine.
        from proxy.core.policies import policy_names
    except ImportError:
        return SPEC_POLICY_NAMES
    return tuple(policy_names())


def env_name(field: str) -> str:
    """The environment variable that sets ``field`` (``budget`` → ``PROXY_BUDGET``)."""
    return ENV_PREFIX + field.upper()


class SettingsGroup(BaseSettings):
    """One purpose's settings. :class:`proxy.settings.Settings` inherits every group, so a
    setting keeps its flat name (``settings.budget``, ``PROXY_BUDGET``) whichever group holds it."""

    model_config = CONFIG
