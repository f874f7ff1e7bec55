"""Opening the database: async engines with the connection settings each backend needs.

SQLite gets WAL (readers do not block the writer), ``foreign_keys=ON`` (off by
default in SQLite, and our cascades rely on it) and a ``busy_timeout`` so a
second writer waits instead of failing at once. The SQLite file's directory is
created if missing, so the default ``./data/proxy.sqlite3`` works on a fresh
checkout.

This module does not run migrations (:mod:`proxy.store.migrate` does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from proxy.errors import StorageError

log = structlog.get_logger("proxy.store")

__all__ = ["PG_KEEPALIVES_SQL", "SQLITE_BUSY_TIMEOUT_MS", "make_engine", "sqlite_path"]

SQLITE_BUSY_TIMEOUT_MS = 5_000


def sqlite_path(url: str | URL) -> Path | None:
    """The file of a SQLite URL (``None`` for other backends and in-memory databases)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _sqlite_pragmas(*, foreign_keys: bool) -> Any:
    def set_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode=WAL")
            # NORMAL is durable across application crashes in WAL mode (sqlite.org/wal.html).
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    return set_pragmas


#: Session settings of every PostgreSQL connection: the server probes an idle connection after
#: a minute (its default is two hours), so a NAT or load balancer in between, whose idle
#: timeout is often four to ten minutes, does not forget a pooled or listening connection,
#: and a client that died is noticed in two minutes.
_PG_KEEPALIVES = {"tcp_keepalives_idle": "60", "tcp_keepalives_interval": "10",
                  "tcp_keepalives_count": "6"}
#: One statement (a prepared statement holds one), for the session (``is_local`` false).
PG_KEEPALIVES_SQL = "SELECT " + ", ".join(
    f"set_config('{name}', '{value}', false)" for name, value in _PG_KEEPALIVES.items())


def make_engine(
    url: str | URL, *, echo: bool = False, sqlite_foreign_keys: bool = True, **kwargs: Any
) -> AsyncEngine:
    """An :class:`AsyncEngine` for ``url`` (``sqlite+aiosqlite`` or ``postgresql+asyncpg``).

    ``sqlite_foreign_keys=False`` is for migrations only: Alembic's batch mode
    recreates SQLite tables, which foreign-key enforcement would break.

    Raises :class:`StorageError` if the SQLite directory cannot be created.
    """
    parsed = make_url(url)
    path = sqlite_path(parsed)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create the database directory {path.parent}: {exc}"
            ) from exc
    if parsed.get_backend_name() == "postgresql":
        # Liveness check on checkout: the service outlives PostgreSQL restarts.
        kwargs.setdefault("pool_pre_ping", True)
    engine = create_async_engine(parsed, echo=echo, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        event.listen(
            engine.sync_engine, "connect", _sqlite_pragmas(foreign_keys=sqlite_foreign_keys)
        )
    elif parsed.get_backend_name() == "postgresql":
        event.listen(engine.sync_engine, "connect", _pg_keepalives)
    return engine


def _pg_keepalives(dbapi_connection: Any, _record: Any) -> None:
    """The keepalive settings set by :data:`PG_KEEPALIVES_SQL`, not as startup parameters (a pooler such as
    PgBouncer refuses startup parameters it does not know); a refusal leaves the
    server's own settings."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(PG_KEEPALIVES_SQL)
    except Exception as exc:  # the server's defaults stay; the connection is fine
        log.warning("pg_keepalives_not_set", error=str(exc))
    finally:
        cursor.close()
