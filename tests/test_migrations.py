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


async def _execute(url: str, *statements: tuple[str, dict[str, object]]) -> None:
    engine = make_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.begin() as conn:
            for sql, params in statements:
                await conn.execute(text(sql), params)
    finally:
        await engine.dispose()


async def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    engine = make_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            return [tuple(row) for row in (await conn.execute(text(sql))).all()]
    finally:
        await engine.dispose()


async def test_0002_back_fills_registrations_for_the_users_whose_rules_read_each_feed(
    empty_url: str,
) -> None:
    """Data written at revision 0001: feed 1 read by Alice and Bob, feed 2 by Alice only,
    feed 3 by nobody, feed 4 deleted (its id must not come back)."""
    import datetime as dt

    from proxy.store import Store

    await upgrade_database(empty_url, "0001")
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    feed = (
        "INSERT INTO feeds (id, url, url_normalised, resource, ping_token, consecutive_errors,"
        " disabled, created_at) VALUES (:id, :url, :norm, :res, :token, 0, false, :t)"
    )
    await _execute(
        empty_url,
        ("INSERT INTO users (id, name, created_at) VALUES (1, 'alice', :t), (2, 'bob', :t),"
         " (3, 'carol', :t)", {"t": t0}),
        *((feed, {"id": i, "url": f"http://h/{i}?secret=s{i}", "norm": f"http://h/{i}?secret=s{i}",
                 "res": i, "token": f"token-{i}", "t": t0})
          for i in (1, 2, 3, 4)),
        ("DELETE FROM feeds WHERE id = 4", {}),
        ("INSERT INTO profiles (id, user_id, name, created_at, updated_at) VALUES"
         " (1, 1, 'a', :t, :t), (2, 2, 'b', :t, :t), (3, 1, 'a2', :t, :t)", {"t": t0}),
        ("INSERT INTO rules (id, profile_id, name, position, spec) VALUES"
         " (1, 1, 'r', 0, '{}'), (2, 1, 'r2', 1, '{}'), (3, 2, 'r', 0, '{}'), (4, 3, 'r', 0, '{}')", {}),
        ("INSERT INTO rule_feeds (rule_id, feed_id) VALUES (1, 1), (2, 2), (3, 1), (4, 1)", {}),
    )
    if empty_url.startswith("postgresql"):  # explicit ids leave the sequence behind; 0001 code did not
        await _execute(empty_url, ("SELECT setval('feeds_id_seq', 4)", {}))

    await upgrade_database(empty_url)
    assert await _rows(
        empty_url, "SELECT user_id, feed_id, url, ping_token FROM feed_registrations ORDER BY id"
    ) == [
        (1, 1, "http://h/1?secret=s1", "token-1"),
        (2, 1, "http://h/1?secret=s1", "token-1"),
        (1, 2, "http://h/2?secret=s2", "token-2"),
    ]
    assert await _schema_diff(empty_url) == []

    async with Store.from_url(empty_url) as store:
        # Old tokens keep working, for the users who had the feed, until each rotates.
        assert await store.ping_users(1, "token-1") == [1, 2]
        await store.rotate_ping_token(2, 1)
        assert await store.ping_users(1, "token-1") == [1]
        assert [r.feed.id for r in await store.list_registered_feeds(1)] == [1, 2]
        assert await store.list_registered_feeds(3) == []
        # The rules keep reading their feeds under the new scoping.
        assert [r.feed_ids for r in (await store.get_profile(1, 1)).rules] == [(1,), (2,)]
        # Feed 3 had no reader, hence no owner: the service's start-up collects it.
        assert await store.collect_unregistered_feeds() == [3]
        new, _ = await store.register_feed_for(3, "http://h/new")
        assert new.feed.id == 5, "a deleted feed's id is never handed out again"

    await downgrade_database(empty_url, "0001")
    assert await _rows(empty_url, "SELECT id, ping_token FROM feeds WHERE id < 5 ORDER BY id") == [
        (1, "token-1"), (2, "token-2")]
    assert await _tables(empty_url) >= {"feeds"} and "feed_registrations" not in await _tables(empty_url)
