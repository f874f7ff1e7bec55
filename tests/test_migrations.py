"""Migrations: the migrated schema equals the models, and upgrade → downgrade → upgrade works."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, pool, text

from proxy.errors import StorageError
from proxy.store import current_revision, downgrade_database, make_engine, upgrade_database
from proxy.store._models import metadata
from proxy.store.migrate import MIGRATIONS_DIR_ENV, head_revision, migrations_dir


async def _schema_diff(url: str) -> list[object]:
    engine = make_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(sync, opts={"compare_type": True}), metadata
                )
            )
    finally:
        await engine.dispose()


async def _tables(url: str) -> set[str]:
    engine = make_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
    finally:
        await engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest) -> str:
    fixture = "sqlite_url" if request.param == "sqlite" else "fresh_postgres_url"
    return str(request.getfixturevalue(fixture))


async def test_migrated_schema_equals_the_models(empty_url: str) -> None:
    assert await current_revision(empty_url) is None
    await upgrade_database(empty_url)
    assert await current_revision(empty_url) == head_revision()
    assert await _schema_diff(empty_url) == []


async def test_diff_check_can_fail(empty_url: str) -> None:
    await upgrade_database(empty_url)
    engine = make_engine(empty_url, poolclass=pool.NullPool)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE stray (id INTEGER PRIMARY KEY)"))
    finally:
        await engine.dispose()
    assert await _schema_diff(empty_url) != []


async def test_upgrade_downgrade_upgrade(empty_url: str) -> None:
    await upgrade_database(empty_url)
    await upgrade_database(empty_url)  # a no-op when up to date
    assert {t.name for t in metadata.sorted_tables} <= await _tables(empty_url)
    await downgrade_database(empty_url, "base")
    assert await current_revision(empty_url) is None
    assert await _tables(empty_url) <= {"alembic_version"}
    await upgrade_database(empty_url)
    assert await _schema_diff(empty_url) == []


async def test_sqlite_tables_never_reuse_ids(sqlite_url: str) -> None:
    # Autogenerate does not compare sqlite_autoincrement, so check the DDL itself.
    await upgrade_database(sqlite_url)
    engine = make_engine(sqlite_url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            ddl = dict(
                (
                    await conn.execute(
                        text("SELECT name, sql FROM sqlite_master WHERE type='table'")
                    )
                ).all()
            )
    finally:
        await engine.dispose()
    for table in metadata.sorted_tables:
        if table.kwargs.get("sqlite_autoincrement"):
            assert "AUTOINCREMENT" in ddl[table.name], table.name


async def test_upgrade_creates_the_sqlite_directory(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'deep' / 'er' / 'proxy.sqlite3'}"
    await upgrade_database(url)
    assert (tmp_path / "deep" / "er" / "proxy.sqlite3").is_file()


def test_migrations_dir_defaults_to_the_repository_and_can_be_overridden(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(MIGRATIONS_DIR_ENV, raising=False)
    default = migrations_dir()
    assert (default / "env.py").is_file()
    assert default == Path(__file__).resolve().parents[1] / "migrations"
    monkeypatch.setenv(MIGRATIONS_DIR_ENV, str(tmp_path))
    with pytest.raises(StorageError, match=MIGRATIONS_DIR_ENV):
        migrations_dir()
    monkeypatch.setenv(MIGRATIONS_DIR_ENV, str(default))
    assert migrations_dir() == default


async def test_unreachable_database_fails_with_storage_error() -> None:
    with pytest.raises(StorageError, match="migration"):
        await upgrade_database("postgresql+asyncpg://nobody@127.0.0.1:1/none")
