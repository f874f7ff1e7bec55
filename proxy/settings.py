"""The proxy's configuration: environment variables prefixed ``PROXY_``, optionally from ``.env``.

Every setting has a default that works on one machine (SQLite file under
``./data/``, 60 s chronons, 10 probes per chronon). Invalid values stop
start-up: :func:`load_settings` raises :class:`~proxy.errors.SettingsError`
whose message names the environment variable and the reason.

The README's configuration table is generated from this class by
:func:`settings_table_markdown`, so a field's ``description`` is its
documentation.

This module does not create the database or its directory; the store does
that when it opens an engine (:func:`proxy.store.make_engine`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from proxy import DEFAULT_USER_AGENT
from proxy.errors import SettingsError

__all__ = [
    "BROKER_JOB_MAX_SECONDS",
    "ENV_PREFIX",
    "SPEC_POLICY_NAMES",
    "Settings",
    "SettingsError",
    "env_name",
    "known_policy_names",
    "load_settings",
    "settings_table_markdown",
]

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

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Async drivers only: the store is asyncio end to end. Plain dialect names are
# accepted and mapped to the async driver, because that is what people type.
_DRIVER_FOR_DIALECT = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}


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


class Settings(BaseSettings):
    """All of the proxy's settings; see each field's description."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        validate_default=True,
        # NaN passes every ge/le bound; infinities are as much a typo as 1e12.
        allow_inf_nan=False,
    )

    database_url: str = Field(
        default="sqlite+aiosqlite:///./data/proxy.sqlite3",
        description=(
            "SQLAlchemy URL of the database: `sqlite+aiosqlite:///path` (the file's directory "
            "is created on start) or `postgresql+asyncpg://user:pass@host/db`. "
            "`sqlite://` and `postgresql://` are mapped to these async drivers."
        ),
    )
    chronon_seconds: float = Field(
        default=60.0, ge=MIN_CHRONON_SECONDS, le=DAY,
        description="Length of one chronon (scheduling step) in seconds: 0.01 (10 ms) to 86400 (a day)."
    )
    budget: int = Field(
        default=10, ge=1, le=MAX_BUDGET, description="Probes allowed per chronon (C): 1 to 100000."
    )
    policy: str = Field(
        default="adm-edf",
        description="Scheduling policy name, as in the workload spec (e.g. `mrsf-p`, `s-edf-np`, `wic`).",
    )
    discovery_predicted: Literal["off", "sup", "fbsup"] = Field(
        default="off",
        description=(
            "Predicted EIs for watched feeds that do not ping (paper 002): `sup` probes each "
            "feed's next expected update at the end of the window its rules ask, `fbsup` also "
            "re-predicts after a probe that found nothing, `off` leaves the spare budget to the "
            "background allocation alone (measured better: docs/discovery.md)."
        ),
    )
    unwatched_probe_interval_seconds: float = Field(
        default=HOUR, ge=0, le=WEEK,
        description=(
            "How often budget that no rule needs probes a registered feed that no rule reads "
            "(an OPML import, say): never-probed feeds first, then the stalest, each at most once "
            "per this many seconds, so their health and update models stay current and a rule "
            "made later starts from a learnt model. 0: never."
        ),
    )
    allow_private_networks: bool = Field(
        default=False,
        description=(
            "Allow feed URLs that resolve to private, loopback or link-local addresses "
            "(off by default: SSRF guard)."
        ),
    )
    host: str = Field(
        default="127.0.0.1", min_length=1, description="Address the HTTP API binds to."
    )
    port: int = Field(default=8000, ge=1, le=65535, description="TCP port of the HTTP API.")
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
    retention_days: int = Field(
        default=30,
        ge=0,
        le=36500,
        description=(
            "Probes and uncaptured entries older than this are purged, and so are notification "
            "deliveries settled (delivered or dead letters) longer ago, with their events; "
            "pending deliveries never are. 0 keeps everything."
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
    max_request_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        le=1024 * 1024 * 1024,
        description="Largest API request body; a longer one answers 413 before it is read whole.",
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
    log_level: str = Field(
        default="INFO",
        description="Least severity logged: DEBUG, INFO, WARNING, ERROR or CRITICAL.",
    )
    log_format: Literal["json", "console"] = Field(
        default="console", description="`json` (one object per line, for collectors) or `console`."
    )
    migrate_on_start: bool = Field(
        default=True, description="Apply pending database migrations when the service starts."
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
    write_buffer_bytes: int = Field(
        default=64 * 2**20, ge=16 * 2**10, le=2**40,
        description=(
            "Most memory (bytes, an estimate per batch) that decisions waiting for the database "
            "may hold; at the bound the loop decides and probes nothing more until writes "
            "resume, then goes on from the current chronon (docs/operations.md)."
        ),
    )
    write_buffer_batches: int = Field(
        default=20_000, ge=100,
        description=(
            "Most batches of decisions (one per probe or chronon) waiting for the database; "
            "whichever of this and `PROXY_WRITE_BUFFER_BYTES` is reached first pauses the loop."
        ),
    )
    write_lag_ready_seconds: float = Field(
        default=30.0, gt=0,
        description=(
            "`/readyz` answers 503 while the oldest decision not yet written is older than this."
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
    sse_keepalive_seconds: float = Field(
        default=15.0, ge=MIN_TIMEOUT, le=HOUR,
        description="Idle time after which `GET /api/v1/events` sends a keep-alive comment.",
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
    loop_thread: bool = Field(
        default=True,
        description=(
            "Run the chronon loop (ticks, probes, the writer) on a thread with its own event "
            "loop, so API handlers that keep the API's event loop busy do not delay its ticks "
            "(docs/bench-api-load.md); false runs it on the API's event loop."
        ),
    )

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

    @property
    def ack_wait_seconds(self) -> float:
        """The broker's redelivery delay: as set, or the whole-request timeout plus 10 s."""
        return self.broker_ack_wait_seconds or self.http_total_timeout_seconds + 10.0

    @field_validator("test_faults")
    @classmethod
    def _known_faults(cls, value: str) -> str:
        from proxy.faults import parse_faults

        parse_faults(value)
        return value

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, value: str) -> str:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(value)
        except ArgumentError as exc:
            raise ValueError(f"not a database URL ({exc})") from None
        driver = _DRIVER_FOR_DIALECT.get(url.drivername)
        if driver is None:
            raise ValueError(
                f"unsupported database {url.drivername!r}; use sqlite+aiosqlite:// or postgresql+asyncpg://"
            )
        if driver.startswith("sqlite") and not url.database:
            raise ValueError(
                "SQLite needs a file path, e.g. sqlite+aiosqlite:///./data/proxy.sqlite3"
            )
        return url.set(drivername=driver).render_as_string(hide_password=False)

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        names = known_policy_names()
        if value not in names:
            raise ValueError(f"unknown policy {value!r}; choose one of: {', '.join(names)}")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level(cls, value: Any) -> Any:
        if isinstance(value, str):
            upper = value.strip().upper()
            if upper not in _LOG_LEVELS:
                raise ValueError(
                    f"unknown log level {value!r}; choose one of: {', '.join(_LOG_LEVELS)}"
                )
            return upper
        return value

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


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


def settings_table_markdown() -> str:
    """A Markdown table of every setting: variable, default, description (for the README)."""
    lines = ["| Variable | Default | Description |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = str(default).lower() if isinstance(default, bool) else str(default)
        description = (field.description or "").replace("|", "\\|")
        lines.append(f"| `{env_name(name)}` | `{shown}` | {description} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # `python -m proxy.settings` prints the table for docs/configuration.md
    print(settings_table_markdown(), end="")
