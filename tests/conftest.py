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

Parallel runs (issue 48, docs/test-suite.md). ``make test`` runs pytest-xdist:
``-n 3 --dist loadgroup`` (the Makefile's ``PYTEST_PARALLEL``); a plain ``pytest`` stays
serial. The tests of one file go to one worker together (their module fixtures are built
once), the heaviest files first. Tests that run beside others must therefore:

- take a database from ``postgres_url`` / ``fresh_postgres_url`` / ``database_url``
  (its own per worker or per test), never a fixed database name;
- take ports from ``proxy.ports.free_port()`` right before the child binds them, never
  a fixed number; the same for nats-server (``tests/cluster_support.py``);
- write under ``tmp_path``, never to a fixed path nor into the checkout;
- name anything shared on the machine uniquely (a compose project, a broker subject).

A file whose tests must not overlap others of their kind (kills timed against a lease,
Docker) joins a named group: an entry in ``SERIAL_GROUPS`` below, or
``pytestmark = pytest.mark.xdist_group("kills")`` in the file. A group's files run one after
another on one worker, started first (the other workers go on beside it).
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


# --- Parallel runs (pytest-xdist, `make test`): which tests share a worker, and in what order.


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup``, with each ungrouped test kept with the rest of its file.

    xdist's loadgroup sends every ungrouped test on its own, so a file's module fixtures
    (a docs build, a stand-in image) would be made on every worker; loadfile instead
    cannot gather files into one group. This does both. Without xdist, never called.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FilesAndGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)
            return nodeid.split("::", 1)[0] if scope == nodeid else scope

    # Work goes out in the collection's order, which pytest_collection_modifyitems below
    # makes heaviest first; xdist's own reordering (most tests first) would undo that.
    config.option.loadscopereorder = False
    return FilesAndGroups(config, log)


# Files whose tests must not run beside one another: each group's files run one after
# another on one worker, started first (docs/test-suite.md, "Running it in parallel").
SERIAL_GROUPS = {
    # Docker image builds and a whole deployment restarted and failed over: ~4 minutes.
    "test_deploy_compose.py": "docker",
    # Services killed at timed points, takeovers timed against lease TTLs, drain deadlines:
    # two of these at once would load the machine in the very seconds they measure.
    "test_e2e_crash.py": "kills",
    "test_e2e_sigkill.py": "kills",
    "test_e2e_delivery_sigkill.py": "kills",
    "test_e2e_lease.py": "kills",
    "test_e2e_cluster.py": "kills",
    "test_e2e_outage.py": "kills",
    "test_service_lease.py": "kills",
}


def _weight(item: pytest.Item) -> int:
    """0 for a test of a named xdist group, 1 for a ``slow`` one, 2 for the rest."""
    if item.get_closest_marker("xdist_group") is not None:
        return 0
    return 1 if item.get_closest_marker("slow") is not None else 2


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: the groups above, then the longest work first.

    A long file started last ends the run last, so the named groups go first, then the
    files with ``slow`` tests. The sort is stable: each file keeps its own order. A serial
    run is left as collected.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for item in items:
        group = SERIAL_GROUPS.get(item.path.name)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_weight)
