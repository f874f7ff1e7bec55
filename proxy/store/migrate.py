"""Schema migrations driven from Python: ``proxy db upgrade`` and the service's start-up.

The Alembic scripts live in ``migrations/`` at the repository root
(``Path(proxy.__file__).parents[1] / "migrations"``); the environment variable
``PROXY_MIGRATIONS_DIR`` points elsewhere (the Docker image sets it). There is
no ``alembic.ini``: the :class:`alembic.config.Config` is built here.

This module does not decide *whether* to migrate (``PROXY_MIGRATE_ON_START``
is the service's business).
"""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

import proxy
from proxy.errors import StorageError
from proxy.store._base import describe_driver_error
from proxy.store._engine import make_engine

__all__ = [
    "MIGRATIONS_DIR_ENV",
    "alembic_config",
    "current_revision",
    "downgrade_database",
    "head_revision",
    "migrations_dir",
    "upgrade_database",
]

MIGRATIONS_DIR_ENV = "PROXY_MIGRATIONS_DIR"


def migrations_dir() -> Path:
    """Where the Alembic scripts are: ``$PROXY_MIGRATIONS_DIR`` or ``<repo>/migrations``."""
    override = os.environ.get(MIGRATIONS_DIR_ENV)
    path = Path(override) if override else Path(proxy.__file__).resolve().parents[1] / "migrations"
    if not (path / "env.py").is_file():
        raise StorageError(
            f"no Alembic migrations at {path} (expected env.py there); set {MIGRATIONS_DIR_ENV}"
        )
    return path


def alembic_config(url: str) -> Config:
    """A programmatic Alembic config for ``url`` (no ini file)."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # ConfigParser interpolation: a literal '%' in a password must be doubled.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str | None:
    """The newest revision in the scripts directory."""
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


async def _run(url: str, action: str, revision: str) -> None:
    config = alembic_config(url)

    def run(connection: Connection) -> None:
        config.attributes["connection"] = connection
        if action == "upgrade":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)

    # NullPool: the migration connection is not kept once we are done, and
    # foreign keys stay off on SQLite so batch table rebuilds work.
    engine = make_engine(url, poolclass=pool.NullPool, sqlite_foreign_keys=False)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(run)
    except (SQLAlchemyError, OSError) as exc:
        raise StorageError(
            f"database migration ({action} to {revision}) failed: {describe_driver_error(exc)}"
        ) from exc
    finally:
        await engine.dispose()


async def upgrade_database(url: str, revision: str = "head") -> None:
    """Apply every pending migration up to ``revision``; a no-op on an up-to-date database."""
    await _run(url, "upgrade", revision)


async def downgrade_database(url: str, revision: str = "base") -> None:
    """Revert migrations down to ``revision`` (``base`` drops every table). For tests and rollbacks."""
    await _run(url, "downgrade", revision)


async def current_revision(url: str) -> str | None:
    """The revision the database is at (``None`` if it was never migrated)."""
    engine = make_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(
                lambda sync: MigrationContext.configure(sync).get_current_revision()
            )
    except (SQLAlchemyError, OSError) as exc:
        raise StorageError(
            f"cannot read the database's revision: {describe_driver_error(exc)}"
        ) from exc
    finally:
        await engine.dispose()
