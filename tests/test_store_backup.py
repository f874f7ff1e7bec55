"""``proxy db backup`` and ``proxy db restore`` through the real CLI, on real SQLite files and PostgreSQL.

- a backup taken while another process commits is one commit's snapshot, and
  holds at least every commit made before it started (a file copy under WAL
  would miss those still in ``-wal``);
- a backup of a running ``proxy serve``, restored into a new database, passes
  ``proxy db check`` and a service started on it serves every feed, profile,
  key and CEI the first one had served before the backup;
- a restore refuses a database holding rows (naming them) unless ``--force``,
  and the refused database keeps what it held, as does one whose restore
  failed half-way; errors name what is wrong.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert, pool, text

from proxy.farm import FeedFarm
from proxy.ports import free_port
from proxy.store import Store, hash_api_key, make_engine, upgrade_database
from proxy.store._models import ApiKeyRow, UserRow
from proxy.store.migrate import head_revision
from tests.conftest import POSTGRES_ADMIN_URL, _create_database, _drop_database, _with_database
from tests.test_e2e_support import eventually, motivating

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


class Databases:
    """Fresh empty databases of one backend, made on demand and dropped at the end."""

    def __init__(self, backend: str, tmp_path: Path) -> None:
        self.backend = backend
        self.tmp_path = tmp_path
        self.made: list[str] = []  # SQLite file paths or PostgreSQL database names

    async def new(self) -> str:
        if self.backend == "sqlite":
            self.made.append(str(self.tmp_path / f"db{len(self.made)}.sqlite3"))
            return f"sqlite+aiosqlite:///{self.made[-1]}"
        # conftest's helper runs its own event loop: not in this test's thread.
        self.made.append(await asyncio.to_thread(_create_database))
        return _with_database(POSTGRES_ADMIN_URL, self.made[-1])

    def drop(self) -> None:
        if self.backend == "postgres":
            for name in self.made:
                _drop_database(name)


@pytest.fixture(params=BACKENDS)
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Databases]:
    if request.param == "postgres":
        request.getfixturevalue("_postgres_available")
    dbs = Databases(str(request.param), tmp_path)
    try:
        yield dbs
    finally:
        dbs.drop()


def _env(database_url: str, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    env.update({
        "PROXY_DATABASE_URL": database_url,
        "PROXY_CHRONON_SECONDS": "0.05",
        "PROXY_BUDGET": "4",
        "PROXY_POLICY": "mrsf-p",
        "PROXY_ALLOW_PRIVATE_NETWORKS": "true",
        "PROXY_PER_HOST_CONCURRENCY": "50",
        "PROXY_PER_HOST_MIN_DELAY_SECONDS": "0",
        "PROXY_RESPECT_CACHE_HINTS": "false",
        "PROXY_RETENTION_DAYS": "0",
        "PROXY_LOG_FORMAT": "json",
        "PROXY_LEASE_TTL_SECONDS": "1",
    })
    env.update(more)
    return env


async def cli(database_url: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``python -m proxy.cli ARGS --database-url URL`` as a process: exit status, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy.cli", *args, "--database-url", database_url,
        env=env or _env(database_url),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def ok(database_url: str, *args: str) -> str:
    code, out, err = await cli(database_url, *args)
    assert code == 0, f"proxy {' '.join(args)}: {err}"
    return out


async def scalar(url: str, sql: str) -> Any:
    engine = make_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(text(sql))).scalar_one()
    finally:
        await engine.dispose()


# --- a backup while another process writes ---------------------------------------------------

#: Each transaction adds a user with a key and sets the ``writer`` state to the number of
#: users. On SQLite the writer never checkpoints (as under a long-lived reader, which holds
#: checkpoints back): every commit stays in ``-wal``, so a copy of the database file would
#: miss them all, where the backup API reads them.
WRITER = r"""
import asyncio, datetime as dt, sys
from sqlalchemy import insert, update
from proxy.store import make_engine
from proxy.store._models import ApiKeyRow, ServiceStateRow, UserRow

async def main(url: str) -> None:
    engine = make_engine(url)
    now = dt.datetime.now(dt.UTC)
    state = ServiceStateRow.__table__
    async with engine.begin() as c:
        await c.execute(insert(state).values(key="writer", value={"n": 0}, updated_at=now))
    n = 0
    while True:
        n += 1
        async with engine.begin() as c:
            if c.dialect.name == "sqlite":
                await c.exec_driver_sql("PRAGMA wal_autocheckpoint=0")
            uid = (await c.execute(insert(UserRow.__table__).values(name=f"w{n}", created_at=now)
                                   .returning(UserRow.__table__.c.id))).scalar_one()
            await c.execute(insert(ApiKeyRow.__table__).values(
                user_id=uid, key_hash=f"{n:064d}", prefix="w", created_at=now))
            await c.execute(update(state).where(state.c.key == "writer")
                            .values(value={"n": n}, updated_at=now))

asyncio.run(main(sys.argv[1]))
"""


async def test_a_backup_while_another_process_writes_is_one_commits_snapshot(
    databases: Databases, tmp_path: Path
) -> None:
    source, target = await databases.new(), await databases.new()
    await upgrade_database(source)
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, source, stderr=asyncio.subprocess.PIPE)
    try:
        async def written() -> int:
            return int(await scalar(source, "SELECT count(*) FROM users"))

        await eventually(lambda: _at_least(written, 200), within=60, what="the writer's commits")
        for i in range(4):
            before = await written()
            file = tmp_path / f"backup{i}"
            await ok(source, "db", "backup", str(file))
            after = await written()
            await ok(target, "db", "restore", "--force", str(file))
            users = int(await scalar(target, "SELECT count(*) FROM users"))
            keys = int(await scalar(target, "SELECT count(*) FROM api_keys"))
            state = await scalar(target, "SELECT value FROM service_state WHERE key = 'writer'")
            n = (state if isinstance(state, dict) else json.loads(state))["n"]
            assert users == keys == n, "the backup holds half a transaction"
            assert before <= n <= after, f"commits before the backup lost: {n} < {before}"
            assert writer.returncode is None, "the writer stopped"
    finally:
        writer.send_signal(signal.SIGKILL)
        _, err = await writer.communicate()
    assert b"Error" not in err, err.decode()
    code, out, _ = await cli(target, "db", "check")
    assert code == 0 and "ok: all" in out


async def _at_least(count: Any, n: int) -> bool:
    return bool(await count() >= n)


# --- a running service's backup, restored and served ------------------------------------------


@asynccontextmanager
async def serving(database_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """``proxy serve`` on ``database_url`` until ready; stopped with SIGTERM at the end."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy.cli", "serve", "--port", str(port),
            env=_env(database_url), stdout=sink, stderr=sink)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            async def ready() -> bool:
                try:
                    return (await client.get("/readyz")).status_code == 200
                except httpx.TransportError:
                    assert proc.returncode is None, log.read_text()[-3000:]
                    return False

            try:
                await eventually(ready, within=120, what="proxy serve ready")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; its log ends:\n{log.read_text()[-3000:]}") from None
            yield client
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def _served(api: httpx.AsyncClient, key: str) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {key}"}

    async def items(path: str, **params: Any) -> list[dict[str, Any]]:
        r = await api.get(path, headers=auth, params={"limit": 1000, **params})
        assert r.status_code == 200, r.text
        body: list[dict[str, Any]] = r.json()["items"]
        return body

    profiles = await items("/api/v1/profiles")
    return {
        "feeds": {f["id"]: f["url"] for f in await items("/api/v1/feeds")},
        "profiles": {p["id"]: p["name"] for p in profiles},
        "ceis": {c["id"]: c["state"] for p in profiles
                 for c in await items(f"/api/v1/profiles/{p['id']}/ceis")},
    }


@pytest.mark.slow
async def test_a_running_services_backup_restores_and_serves_everything(
    databases: Databases, tmp_path: Path
) -> None:
    source, restored = await databases.new(), await databases.new()
    key = (await ok(source, "users", "create", "alice")).strip().splitlines()[-1]
    auth = {"Authorization": f"Bearer {key}"}
    file = tmp_path / "proxy.backup"
    async with FeedFarm(["mish", "cnn", "money"], prefill=2) as farm:
        async with serving(source, tmp_path) as api:
            ids = {n: (await api.post("/api/v1/feeds", json={"url": farm.url(n)}, headers=auth))
                   .json()["id"] for n in ("mish", "cnn", "money")}
            body = motivating(ids["mish"], ids["cnn"], ids["money"], every="1s", slack="1s")
            r = await api.post("/api/v1/profiles", json=body, headers=auth)
            assert r.status_code == 201, r.text

            async def decided() -> dict[str, Any] | None:
                seen = await _served(api, key)
                return seen if sum(s != "pending" for s in seen["ceis"].values()) >= 3 else None

            before = await eventually(decided, within=60, what="three decided CEIs")
            # The service goes on ticking and writing while the backup is taken.
            out = await ok(source, "db", "backup", str(file))
            assert f"to {file}" in out and "1 profiles" in out
        await ok(restored, "db", "restore", str(file))
        code, out, err = await cli(restored, "db", "check")
        assert code == 0, err
        assert "ok: all" in out
        async with Store.from_url(restored) as store:
            alice = await store.get_user_by_name("alice")
            assert alice is not None and await store.authenticate(key) == alice.id
        async with serving(restored, tmp_path) as api:
            after = await _served(api, key)
    assert after["feeds"] == before["feeds"]
    assert after["profiles"] == before["profiles"]
    assert set(before["ceis"]) <= set(after["ceis"])
    decided_before = {c: s for c, s in before["ceis"].items() if s != "pending"}
    assert {c: after["ceis"][c] for c in decided_before} == decided_before


# --- refusals -----------------------------------------------------------------------------------


async def _user(url: str, name: str) -> str:
    return (await ok(url, "users", "create", name)).strip().splitlines()[-1]


async def _authenticates(url: str, key: str) -> bool:
    async with Store.from_url(url) as store:
        return await store.authenticate(key) is not None


async def test_restore_refuses_a_database_holding_rows_unless_forced(
    databases: Databases, tmp_path: Path
) -> None:
    source, target = await databases.new(), await databases.new()
    alice = await _user(source, "alice")
    file = tmp_path / "alice.backup"
    await ok(source, "db", "backup", str(file))
    bob = await _user(target, "bob")

    code, out, err = await cli(target, "db", "restore", str(file))
    assert code == 1 and out == ""
    assert "not empty" in err and "users: 1 row" in err and "--force" in err
    assert await _authenticates(target, bob), "a refused restore changed the database"
    assert not await _authenticates(target, alice)

    out = await ok(target, "db", "restore", "--force", str(file))
    assert "restored" in out
    assert await _authenticates(target, alice)
    assert not await _authenticates(target, bob), "--force replaces what was there"
    assert await ok(target, "db", "current") == f"{head_revision()}\n"
    assert "ok: all" in await ok(target, "db", "check")


async def test_a_restore_that_fails_half_way_leaves_the_database_as_it_was(
    databases: Databases, tmp_path: Path
) -> None:
    source, target = await databases.new(), await databases.new()
    await _user(source, "alice")
    whole = tmp_path / "whole.backup"
    await ok(source, "db", "backup", str(whole))
    # Its last 300 bytes gone: on PostgreSQL pg_restore fails after psql has run part of
    # the script (dropped the tables, restored some); on SQLite the header tells.
    cut = _write(tmp_path / "cut.backup", whole.read_bytes()[:-300])
    bob = await _user(target, "bob")
    code, _, err = await cli(target, "db", "restore", "--force", str(cut))
    assert code == 1, "a truncated backup was restored"
    assert "the database is unchanged" in err or "cut short" in err, err
    assert await _authenticates(target, bob), "a failed restore changed the database"
    assert await _names(target) == ["bob"]


async def _names(url: str) -> list[str]:
    async with Store.from_url(url) as store:
        return [u.name for u in await store.list_users()]


async def test_a_migrated_but_empty_database_takes_a_restore(
    databases: Databases, tmp_path: Path
) -> None:
    source, target = await databases.new(), await databases.new()
    alice = await _user(source, "alice")
    await ok(source, "db", "backup", str(tmp_path / "b"))
    await ok(target, "db", "upgrade")
    await ok(target, "db", "restore", str(tmp_path / "b"))
    assert await _authenticates(target, alice)


async def test_a_backup_of_an_older_revision_restores_at_it_and_upgrades(
    databases: Databases, tmp_path: Path
) -> None:
    source, target = await databases.new(), await databases.new()
    await upgrade_database(source, "0004")
    engine = make_engine(source, poolclass=pool.NullPool)
    now = dt.datetime.now(dt.UTC)
    try:
        async with engine.begin() as conn:  # users and keys are the same at 0004 as at head
            await conn.execute(insert(UserRow), [{"id": 1, "name": "alice", "created_at": now}])
            await conn.execute(insert(ApiKeyRow), [{"user_id": 1, "key_hash": hash_api_key("k" * 40),
                                                    "prefix": "kkkk", "created_at": now}])
    finally:
        await engine.dispose()
    await ok(source, "db", "backup", str(tmp_path / "old.backup"))
    out = await ok(target, "db", "restore", str(tmp_path / "old.backup"))
    assert "revision 0004" in out and "run `proxy db upgrade`" in out
    assert await ok(target, "db", "current") == "0004\n"
    await ok(target, "db", "upgrade")
    assert await _authenticates(target, "k" * 40)
    assert "ok: all" in await ok(target, "db", "check")


async def test_restore_is_refused_while_a_service_holds_the_lease_even_forced(
    databases: Databases, tmp_path: Path
) -> None:
    source, target = await databases.new(), await databases.new()
    await _user(source, "alice")
    await ok(source, "db", "backup", str(tmp_path / "b"))
    await _user(target, "bob")
    async with serving(target, tmp_path):
        code, _, err = await cli(target, "db", "restore", "--force", str(tmp_path / "b"))
    assert code == 1
    assert "chronon-loop lease held by" in err and "stop it" in err


async def test_backup_refuses_to_write_over_a_file(databases: Databases, tmp_path: Path) -> None:
    url = await databases.new()
    await _user(url, "alice")
    file = tmp_path / "b"
    file.write_bytes(b"an older backup")
    code, _, err = await cli(url, "db", "backup", str(file))
    assert code == 1 and "already exists" in err
    assert file.read_bytes() == b"an older backup"
    code, _, err = await cli(url, "db", "backup", str(tmp_path / "no" / "such" / "dir" / "b"))
    assert code == 1 and "no directory" in err


def _sqlite_file(path: Path, *statements: str) -> Path:
    conn = sqlite3.connect(path)
    try:
        for sql in statements:
            conn.execute(sql)
        conn.commit()
    finally:
        conn.close()
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing", "no backup file at"),
        (lambda d: d, "is a directory"),
        (lambda d: _write(d / "empty", b""), "it is empty"),
        (lambda d: _write(d / "dump.sql", b"CREATE TABLE users (id int);\n"),
         "not a backup made by `proxy db backup`"),
        (lambda d: _sqlite_file(d / "other.sqlite3", "CREATE TABLE notes (body TEXT)"),
         "no alembic_version"),
        (lambda d: _sqlite_file(d / "newer.sqlite3", "CREATE TABLE alembic_version (version_num TEXT)",
                                "INSERT INTO alembic_version VALUES ('9999')"),
         "made by a newer release"),
        (lambda d: _write(d / "torn.sqlite3", b"SQLite format 3\x00" + b"\xff" * 200),
         "not a readable SQLite backup"),
    ],
    ids=["missing", "directory", "empty", "sql-text", "foreign-sqlite", "newer-revision", "torn"],
)
async def test_restore_names_what_is_wrong_with_the_file(
    tmp_path: Path, make: Any, message: str
) -> None:
    target = tmp_path / "target.sqlite3"
    url = f"sqlite+aiosqlite:///{target}"
    (tmp_path / "files").mkdir()
    file = make(tmp_path / "files")
    code, out, err = await cli(url, "db", "restore", str(file))
    assert code == 1 and out == ""
    assert message in err, err
    assert not target.exists(), "a refused restore created the database"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.postgres
async def test_a_backup_restores_only_into_its_own_backend(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    sqlite_url = f"sqlite+aiosqlite:///{tmp_path / 'a.sqlite3'}"
    await _user(sqlite_url, "alice")
    await _user(fresh_postgres_url, "alice")
    await ok(sqlite_url, "db", "backup", str(tmp_path / "sqlite.backup"))
    await ok(fresh_postgres_url, "db", "backup", str(tmp_path / "pg.backup"))
    empty_sqlite = f"sqlite+aiosqlite:///{tmp_path / 'empty.sqlite3'}"
    code, _, err = await cli(empty_sqlite, "db", "restore", str(tmp_path / "pg.backup"))
    assert code == 1 and "is a postgresql backup and the database is sqlite" in err
    code, _, err = await cli(fresh_postgres_url, "db", "restore", "--force",
                             str(tmp_path / "sqlite.backup"))
    assert code == 1 and "is a sqlite backup and the database is postgresql" in err
    assert await _authenticates(fresh_postgres_url,
                                (await ok(fresh_postgres_url, "users", "rotate", "alice")
                                 ).strip().splitlines()[-1])


@pytest.mark.postgres
async def test_without_pg_dump_the_postgresql_backup_says_how_to_install_it(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    await _user(fresh_postgres_url, "alice")
    no_client = _env(fresh_postgres_url, PATH=str(tmp_path))  # a PATH with nothing on it
    code, _, err = await cli(fresh_postgres_url, "db", "backup", str(tmp_path / "b"), env=no_client)
    assert code == 1
    assert "pg_dump is not installed" in err and "apt-get install postgresql-client" in err
    assert not (tmp_path / "b").exists()


async def test_a_missing_sqlite_database_is_not_backed_up_nor_created(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'none.sqlite3'}"
    code, _, err = await cli(url, "db", "backup", str(tmp_path / "b"))
    assert code == 1 and "no SQLite database at" in err
    assert not (tmp_path / "none.sqlite3").exists()
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql+asyncpg://proxy:p%40ss@db:5433/proxy",
         {"PGHOST": "db", "PGPORT": "5433", "PGUSER": "proxy", "PGPASSWORD": "p@ss",
          "PGDATABASE": "proxy"}),
        ("postgresql+asyncpg://u@h/d?ssl=true",
         {"PGHOST": "h", "PGUSER": "u", "PGDATABASE": "d", "PGSSLMODE": "require"}),
        ("postgresql+asyncpg://u@h/d?sslmode=verify-full",
         {"PGHOST": "h", "PGUSER": "u", "PGDATABASE": "d", "PGSSLMODE": "verify-full"}),
        ("postgresql+asyncpg://u@/d?host=/run/postgresql",
         {"PGHOST": "/run/postgresql", "PGUSER": "u", "PGDATABASE": "d"}),
    ],
)
def test_the_url_reaches_pg_dump_through_libpqs_environment(
    url: str, expected: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.store.backup import _pg_env

    for name in [n for n in os.environ if n.startswith("PG")]:
        monkeypatch.delenv(name)
    assert {k: v for k, v in _pg_env(url).items() if k.startswith("PG")} == expected
