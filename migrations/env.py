"""Alembic environment: async (aiosqlite or asyncpg), configured from Python, not an .ini file.

Two ways in:

* ``proxy.store.migrate.upgrade_database(url)`` opens the connection itself and
  hands it over in ``config.attributes["connection"]`` (Alembic cookbook,
  "Programmatic API use (connection sharing) with asyncio"), so it works
  inside a running event loop;
* otherwise (``alembic -x`` style use, or tests) this file opens an async engine
  for ``sqlalchemy.url`` and runs the migrations in ``asyncio.run``.

SQLite gets ``render_as_batch`` because it cannot ALTER most things in place.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection

from proxy.store._engine import make_engine
from proxy.store._models import UTCDateTime, metadata

config = context.config
target_metadata = metadata


def render_item(type_: str, obj: Any, autogen_context: Any) -> str | Literal[False]:
    """Render our UTC-aware type as the plain column type it is, so scripts do not import the app."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        compare_server_default=False,
        render_item=render_item,
    )


def do_run_migrations(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations(url: str) -> None:
    engine = make_engine(url, poolclass=pool.NullPool, sqlite_foreign_keys=False)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(do_run_migrations)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_offline(url: str) -> None:
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    connection = config.attributes.get("connection")
    url = config.get_main_option("sqlalchemy.url") or ""
    if context.is_offline_mode():
        run_migrations_offline(url)
    elif connection is not None:
        do_run_migrations(connection)
    else:
        asyncio.run(run_async_migrations(url))


main()
