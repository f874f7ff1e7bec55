"""Shared fixtures: database URLs for both backends, and a ready :class:`~proxy.store.Store`.

Fixtures (import-free: pytest finds them here):

``sqlite_url``        URL of a fresh, *empty* SQLite file under ``tmp_path``.
``postgres_url``      URL of an *empty* PostgreSQL database created for this
                      test session (``proxy_test_<uuid>``, dropped at the end),
                      so parallel runs never collide. Shared by the session:
                      tests must not assume it stays empty.
``fresh_postgres_url``  a new empty PostgreSQL database for one test (for
                      migration tests; slower).
``database_url``      parametrized over ``sqlite`` and ``postgres``: a
                      *migrated, empty* database (PostgreSQL tables are
                      truncated before each test).
``store``             a :class:`Store` on ``database_url``; at teardown it
                      asserts no connection is still checked out.

PostgreSQL is ``postgresql+asyncpg://postgres@127.0.0.1:5432/test`` (override
with ``PROXY_TEST_POSTGRES_URL``). If it is unreachable the PostgreSQL cases
are skipped, unless ``PROXY_REQUIRE_POSTGRES=1`` (CI), then they fail.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from proxy.store import Store

# A runner that starts the suite in the background without job control (`cmd &` in a script)
# leaves SIGINT ignored, and every child inherits that: the Ctrl-C tests' subprocesses would
# then never see their SIGINT. A handler, unlike SIG_IGN, is reset to the default in an
# exec'd child, so the children start as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

POSTGRES_ADMIN_URL = os.environ.get(
    "PROXY_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


def _asyncpg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


def _with_database(url: str, database: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=database).render_as_string(hide_password=False)


async def _admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_asyncpg_dsn(POSTGRES_ADMIN_URL), timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _postgres_unreachable_reason() -> str | None:
    try:
        asyncio.run(_admin("SELECT 1"))
    except Exception as exc:  # any failure to connect means "no server for us"
        return f"PostgreSQL at {POSTGRES_ADMIN_URL} unreachable: {exc!r}"
    return None


@pytest.fixture(scope="session")
def _postgres_available() -> None:
    reason = _postgres_unreachable_reason()
    if reason is None:
        return
    if os.environ.get("PROXY_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{reason} (PROXY_REQUIRE_POSTGRES=1)")
    pytest.skip(reason)


def _create_database() -> str:
    name = f"proxy_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    return name


def _drop_database(name: str) -> None:
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'proxy.sqlite3'}"


@pytest.fixture(scope="session")
def postgres_url(_postgres_available: None) -> Iterator[str]:
    name = _create_database()
    try:
        yield _with_database(POSTGRES_ADMIN_URL, name)
    finally:
        _drop_database(name)


@pytest.fixture
def fresh_postgres_url(_postgres_available: None) -> Iterator[str]:
    name = _create_database()
    try:
        yield _with_database(POSTGRES_ADMIN_URL, name)
    finally:
        _drop_database(name)


@pytest.fixture(scope="session")
def _migrated_postgres_url(postgres_url: str) -> str:
    from proxy.store import upgrade_database

    asyncio.run(upgrade_database(postgres_url))
    return postgres_url


async def _truncate_all(url: str) -> None:
    import asyncpg

    from proxy.store._models import metadata

    tables = ", ".join(f'"{table.name}"' for table in metadata.sorted_tables)
    conn = await asyncpg.connect(_asyncpg_dsn(url), timeout=5)
    try:
        await conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database on each backend."""
    from proxy.store import upgrade_database

    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'proxy.sqlite3'}"
        asyncio.run(upgrade_database(url))
        return url
    url = request.getfixturevalue("_migrated_postgres_url")
    asyncio.run(_truncate_all(url))
    return str(url)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    """A Store on ``database_url``; fails the test if a connection is left checked out."""
    from proxy.store import Store

    the_store = Store.from_url(database_url)
    try:
        yield the_store
        # apscheduler's contract tests do the same: every method must give its connection back.
        assert the_store.engine.pool.checkedout() == 0, "a connection was left checked out"
    finally:
        await the_store.close()
