"""Where the proxy keeps its data, and how it writes it."""

from __future__ import annotations

from pydantic import Field, field_validator

from proxy.settings._base import DRIVER_FOR_DIALECT, SettingsGroup


class StoreSettings(SettingsGroup):
    """The database: where the proxy keeps its data, and how it writes it."""

    database_url: str = Field(
        default="sqlite+aiosqlite:///./data/proxy.sqlite3",
        description=(
            "SQLAlchemy URL of the database: `sqlite+aiosqlite:///path` (the file's directory "
            "is created on start) or `postgresql+asyncpg://user:pass@host/db`. "
            "`sqlite://` and `postgresql://` are mapped to these async drivers."
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
    migrate_on_start: bool = Field(
        default=True, description="Apply pending database migrations when the service starts."
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

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, value: str) -> str:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(value)
        except ArgumentError as exc:
            raise ValueError(f"not a database URL ({exc})") from None
        driver = DRIVER_FOR_DIALECT.get(url.drivername)
        if driver is None:
            raise ValueError(
                f"unsupported database {url.drivername!r}; use sqlite+aiosqlite:// or postgresql+asyncpg://"
            )
        if driver.startswith("sqlite") and not url.database:
            raise ValueError(
                "SQLite needs a file path, e.g. sqlite+aiosqlite:///./data/proxy.sqlite3"
            )
        return url.set(drivername=driver).render_as_string(hide_password=False)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")
