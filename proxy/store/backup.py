"""Back up and restore the whole database: ``proxy db backup FILE`` and ``proxy db restore FILE``.

SQLite: Python's :meth:`sqlite3.Connection.backup` (SQLite's online backup API)
copies every page in one step under one read transaction, so the copy is the
database as of one commit even while the service writes (WAL: the writer is not
blocked). Never a file copy: under WAL the latest commits live in ``-wal``, and
a copy taken mid-checkpoint is torn. A restore runs the same API the other way,
into the target in one write transaction.

PostgreSQL: ``pg_dump --format=custom`` (one snapshot, consistent while the
service writes); a restore turns the archive into SQL with ``pg_restore`` and
runs it with ``psql --single-transaction`` after dropping the target's tables, so
a failed restore leaves the target as it was.

A backup file is told by its first bytes (SQLite's header or ``PGDMP``) and must
hold an ``alembic_version``: a file from the other backend, or no backup at all,
is refused before anything is written. A restore refuses a target that holds
rows (naming the tables) unless ``force``, and refuses even then while a
``proxy serve`` holds the chronon-loop lease on it.

This module does not migrate: a backup from an older release restores at its
own revision, and ``proxy db upgrade`` (or the service's start) takes it to head.
It does not move data between backends either.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, TypeVar

from alembic.script import ScriptDirectory
from sqlalchemy import inspect, pool, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import SQLAlchemyError

from proxy.errors import StorageError
from proxy.store._base import describe_driver_error
from proxy.store._engine import make_engine, sqlite_path
from proxy.store._models import UTCDateTime
from proxy.store.migrate import alembic_config

__all__ = [
    "BackupError",
    "BackupSummary",
    "backup_database",
    "backup_kind",
    "database_rows",
    "restore_database",
]

Backend = Literal["sqlite", "postgresql"]
T = TypeVar("T")

SQLITE_MAGIC = b"SQLite format 3\x00"
#: The first bytes of a pg_dump custom-format archive (pg_backup_archiver.c).
PGDUMP_MAGIC = b"PGDMP"
#: Not data: Alembic's bookkeeping and SQLite's AUTOINCREMENT counters.
_BOOKKEEPING = frozenset({"alembic_version", "sqlite_sequence"})
#: The tables a summary line names, in this order, when they hold rows.
SUMMARY_TABLES = ("users", "api_keys", "feeds", "profiles", "rules", "ceis", "probes", "entries")

INSTALL_CLIENT = (
    "install the PostgreSQL client tools, of the server's major version or newer "
    "(Debian/Ubuntu: apt-get install postgresql-client; Alpine: apk add postgresql-client; "
    "macOS: brew install libpq)"
)


class BackupError(StorageError):
    """A backup or restore refused or failed; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class BackupSummary:
    """What a backup file holds (or a restore put in place): backend, revision, rows per table.

    A PostgreSQL backup's rows are counted just before ``pg_dump`` takes its snapshot.
    """

    file: Path
    backend: Backend
    revision: str | None
    rows: Mapping[str, int]
    seconds: float

    def describe(self) -> str:
        """``revision 0007: 2 users, 5 feeds, …`` for a person."""
        shown = [f"{self.rows[t]} {t}" for t in SUMMARY_TABLES if self.rows.get(t)]
        return f"revision {self.revision or 'none'}: {', '.join(shown) or 'no rows'}"


def _backend(url: str | URL) -> Backend:
    name = make_url(url).get_backend_name()
    if name not in ("sqlite", "postgresql"):
        raise BackupError(f"cannot back up or restore a {name!r} database (SQLite or PostgreSQL only)")
    return "sqlite" if name == "sqlite" else "postgresql"


def _sqlite_file(url: str | URL) -> Path:
    path = sqlite_path(url)
    if path is None:
        raise BackupError("an in-memory SQLite database cannot be backed up or restored: "
                          "give a file (sqlite+aiosqlite:///path/proxy.sqlite3)")
    return path


def backup_kind(file: Path) -> Backend:
    """Which backend ``file`` is a backup of, from its first bytes; :class:`BackupError` if neither."""
    try:
        with file.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        raise BackupError(f"no backup file at {file}") from None
    except IsADirectoryError:
        raise BackupError(f"{file} is a directory, not a backup file") from None
    except OSError as exc:
        raise BackupError(f"cannot read the backup file {file}: {exc.strerror or exc}") from exc
    if head == SQLITE_MAGIC:
        return "sqlite"
    if head.startswith(PGDUMP_MAGIC):
        return "postgresql"
    raise BackupError(
        f"{file} is not a backup made by `proxy db backup`: neither a SQLite database nor a "
        "pg_dump custom-format archive" + (" (it is empty)" if not head else ""))


def _known_revision(revision: str | None, file: Path) -> None:
    if revision is None:
        raise BackupError(f"{file} is not a backup of the proxy's database: it has no "
                          "alembic_version (it was never migrated)")
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    try:
        script.get_revision(revision)
    except Exception as exc:  # alembic raises several kinds for an unknown id
        raise BackupError(
            f"{file} is at revision {revision!r}, which this release does not know: it was made "
            "by a newer release; restore it with that release") from exc


# --- SQLite ---------------------------------------------------------------------------------


def _sqlite_rows(conn: sqlite3.Connection) -> dict[str, int]:
    names = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    return {n: int(conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0])
            for n in sorted(names) if n not in _BOOKKEEPING}


def _sqlite_revision(conn: sqlite3.Connection) -> str | None:
    has = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                       "AND name = 'alembic_version'").fetchone()
    if not has:
        return None
    row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return None if row is None else str(row[0])


def _quick_check(conn: sqlite3.Connection, what: str) -> None:
    result = [r[0] for r in conn.execute("PRAGMA quick_check")]
    if result != ["ok"]:
        raise BackupError(f"{what} fails SQLite's quick_check: {'; '.join(result[:5])}")


def _open_backup_file(file: Path) -> sqlite3.Connection:
    # immutable: reading a backup takes no lock and leaves no -wal/-shm beside it.
    return sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro&immutable=1", uri=True)


def _whole(file: Path) -> None:
    """Refuse a SQLite file shorter or longer than its header says (a copy cut short).

    sqlite.org/fileformat2.html §1.3: bytes 16-17 are the page size (1 for 65536),
    28-31 the page count, valid when 92-95 equal the change counter at 24-27.
    SQLite itself reads a missing last page as zeros rather than failing.
    """
    with file.open("rb") as f:
        header = f.read(100)
    size = file.stat().st_size
    if len(header) < 100:
        raise BackupError(f"{file} is not a readable SQLite backup: {size} bytes, shorter "
                          "than SQLite's header")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if pages and header[92:96] == header[24:28] and size != pages * page_size:
        raise BackupError(f"{file} is not a readable SQLite backup: its header says "
                          f"{pages} pages of {page_size} bytes, the file has {size} bytes "
                          "(a copy cut short?)")


def _inspect_sqlite_backup(file: Path) -> tuple[str | None, dict[str, int]]:
    _whole(file)
    try:
        conn = _open_backup_file(file)
        try:
            _quick_check(conn, f"the backup file {file}")
            revision, rows = _sqlite_revision(conn), _sqlite_rows(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{file} is not a readable SQLite backup: {exc}") from exc
    _known_revision(revision, file)
    return revision, rows


def _partial(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.partial")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sqlite_backup(source: Path, target: Path) -> tuple[str | None, dict[str, int]]:
    if not source.is_file():
        raise BackupError(f"no SQLite database at {source}")
    partial = _partial(target)
    try:
        # mode=rw: never create the source; the timeout covers a WAL recovery in progress.
        src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=rw", uri=True, timeout=30)
        try:
            revision = _sqlite_revision(src)
            if revision is None:
                raise BackupError(f"{source} is not the proxy's database: it has no "
                                  "alembic_version (run `proxy db upgrade` first?)")
            dst = sqlite3.connect(partial)
            try:
                # pages=-1 (the default): every page in one step under one read transaction,
                # so the copy is one commit's snapshot; a stepwise copy would restart on every
                # write of the running service.
                src.backup(dst)
                # A self-contained file: no -wal beside it, whatever the source's mode.
                dst.execute("PRAGMA journal_mode=DELETE")
                _quick_check(dst, "the copy")
                revision, rows = _sqlite_revision(dst), _sqlite_rows(dst)
            finally:
                dst.close()
        finally:
            src.close()
        _fsync(partial)
        os.replace(partial, target)
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"backing up {source} failed: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return revision, rows


def _sqlite_restore(file: Path, target: Path) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        src = _open_backup_file(file)
        try:
            dst = sqlite3.connect(target, timeout=30)
            try:
                # One write transaction on the target: it holds the old data or the backup's.
                src.backup(dst)
                _quick_check(dst, f"the restored database {target}")
            finally:
                dst.close()
        finally:
            src.close()
    except (sqlite3.DatabaseError, OSError) as exc:
        raise BackupError(f"restoring {file} into {target} failed: {exc}") from exc


# --- PostgreSQL ----------------------------------------------------------------------------


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BackupError(f"{name} is not installed (or not on PATH), and on PostgreSQL "
                          f"`proxy db backup`/`restore` run it: {INSTALL_CLIENT}")
    return path


def _pg_env(url: str | URL) -> dict[str, str]:
    """libpq's environment for ``url``: the password goes here, never on a command line."""
    parsed = make_url(url)
    env = dict(os.environ)
    query = {k: v if isinstance(v, str) else v[-1] for k, v in parsed.query.items()}
    values = {
        "PGHOST": parsed.host or query.get("host"),
        "PGPORT": str(parsed.port) if parsed.port else query.get("port"),
        "PGUSER": parsed.username,
        "PGPASSWORD": parsed.password,
        "PGDATABASE": parsed.database,
        "PGSSLMODE": query.get("sslmode") or _sslmode(query.get("ssl")),
    }
    env.update({k: str(v) for k, v in values.items() if v})
    return env


def _sslmode(ssl: str | None) -> str | None:
    """asyncpg's ``ssl=`` as libpq's ``sslmode`` (``true`` is asyncpg's ``require``)."""
    if ssl is None:
        return None
    return {"true": "require", "1": "require", "false": "disable", "0": "disable"}.get(
        ssl.lower(), ssl)


def _run(args: list[str], env: Mapping[str, str], what: str) -> str:
    done = subprocess.run(args, env=dict(env), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BackupError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _archive_revision(file: Path, env: Mapping[str, str]) -> str | None:
    listing = _run([_tool("pg_restore"), "--list", str(file)], env, f"reading {file}")
    if " TABLE public alembic_version " not in listing:
        return None
    data = _run([_tool("pg_restore"), "--data-only", "--table=alembic_version", "--file=-",
                 str(file)], env, f"reading {file}")
    lines = data.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("COPY public.alembic_version"):
            value = lines[i + 1] if i + 1 < len(lines) else "\\."
            return None if value == "\\." else value.strip()
    return None


async def _pg_backup(url: str, target: Path) -> None:
    env = _pg_env(url)
    partial = _partial(target)
    try:
        await asyncio.to_thread(
            _run, [_tool("pg_dump"), "--format=custom", "--no-owner", f"--file={partial}"],
            env, "pg_dump")
        _fsync(partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _pg_restore(file: Path, url: str, drop: list[str]) -> None:
    """Drop ``drop`` and replay the archive, all in one transaction of psql's."""
    env = _pg_env(url)
    restore_args = [_tool("pg_restore"), "--no-owner", "--no-privileges", "--file=-", str(file)]
    psql_args = [_tool("psql"), "--no-psqlrc", "--quiet", "--set=ON_ERROR_STOP=1",
                 "--single-transaction", "--file=-"]
    prelude = "".join(f'DROP TABLE IF EXISTS public."{t}" CASCADE;\n' for t in drop)
    with tempfile.TemporaryFile() as restore_err, tempfile.TemporaryFile() as psql_err:
        psql = subprocess.Popen(psql_args, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=psql_err)
        reader = subprocess.Popen(restore_args, env=env, stdout=subprocess.PIPE, stderr=restore_err)
        assert psql.stdin is not None and reader.stdout is not None
        broken = False
        try:
            psql.stdin.write(prelude.encode())
            shutil.copyfileobj(reader.stdout, psql.stdin)
        except BrokenPipeError:
            broken = True  # psql stopped at an error: its standard error says which
        reader.stdout.close()  # a pg_restore still writing gets EPIPE and exits
        reader_rc = reader.wait()
        if broken or reader_rc != 0:
            # psql commits its --single-transaction at the end of its input: a script cut
            # short by pg_restore's failure must never reach that end.
            psql.kill()
            psql.wait()
            if broken:
                raise BackupError(f"psql failed, the database is unchanged: {_text(psql_err)}")
            raise BackupError(f"pg_restore failed (exit {reader_rc}), the database is unchanged: "
                              f"{_text(restore_err)}")
        with contextlib.suppress(BrokenPipeError):
            psql.stdin.close()
        if (psql_rc := psql.wait()) != 0:
            raise BackupError(f"psql failed (exit {psql_rc}), the database is unchanged: "
                              f"{_text(psql_err)}")


def _text(f: IO[bytes]) -> str:
    f.seek(0)
    return f.read().decode(errors="replace").strip()


# --- both -----------------------------------------------------------------------------------


async def database_rows(url: str) -> dict[str, int]:
    """Rows per table of the database at ``url`` (Alembic's and SQLite's bookkeeping left out).

    A SQLite file that does not exist yet has no tables (and is not created).
    """
    if _backend(url) == "sqlite" and not _sqlite_file(url).exists():
        return {}

    def count(sync: Connection) -> dict[str, int]:
        names = [n for n in inspect(sync).get_table_names() if n not in _BOOKKEEPING]
        return {n: int(sync.execute(text(f'SELECT count(*) FROM "{n}"')).scalar_one())
                for n in sorted(names)}

    return await _on(url, count, "cannot read the database's tables")


async def _table_names(url: str) -> list[str]:
    """Every table of the database (of PostgreSQL's default schema), bookkeeping included."""
    return await _on(url, lambda sync: sorted(inspect(sync).get_table_names()),
                     "cannot read the database's tables")


async def _live_lease(url: str) -> str | None:
    """Who holds a lease on ``url`` that has not expired, if anyone."""

    def read(sync: Connection) -> str | None:
        if "leases" not in inspect(sync).get_table_names():
            return None
        query = text("SELECT name, holder, expires_at FROM leases WHERE holder IS NOT NULL")
        now = dt.datetime.now(dt.UTC)
        for name, holder, expires in sync.execute(query.columns(expires_at=UTCDateTime())):
            if expires > now:
                return f"{name} lease held by {holder} until {expires:%Y-%m-%d %H:%M:%S}Z"
        return None

    return await _on(url, read, "cannot read the database's leases")


async def _on(url: str, work: Callable[[Connection], T], what: str) -> T:
    engine = make_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(work)
    except (SQLAlchemyError, OSError) as exc:
        raise BackupError(f"{what}: {describe_driver_error(exc)}") from exc
    finally:
        await engine.dispose()


def _described(rows: Mapping[str, int]) -> str:
    held = [f"{n}: {c} row{'s' if c != 1 else ''}" for n, c in rows.items() if c]
    return ", ".join(held[:8]) + (f", and {len(held) - 8} more table(s)" if len(held) > 8 else "")


def _new_file(file: Path) -> None:
    if file.exists():
        raise BackupError(f"{file} already exists: back up to a new file (a backup is never "
                          "written over another)")
    if not file.parent.is_dir():
        raise BackupError(f"no directory {file.parent} for the backup file")


async def backup_database(url: str, file: Path) -> BackupSummary:
    """Write a consistent backup of the database at ``url`` to ``file`` (which must not exist).

    Safe while the service runs. The file appears only once complete (written
    beside it, then renamed).
    """
    started = time.monotonic()
    backend = _backend(url)
    _new_file(file)
    if backend == "sqlite":
        revision, rows = await asyncio.to_thread(_sqlite_backup, _sqlite_file(url), file)
    else:
        _tool("pg_dump")
        rows = await database_rows(url)
        if "alembic_version" not in await _table_names(url):
            raise BackupError("the database is not the proxy's: it has no alembic_version "
                              "(run `proxy db upgrade` first?)")
        await _pg_backup(url, file)
        revision = await asyncio.to_thread(_archive_revision, file, _pg_env(url))
    return BackupSummary(file, backend, revision, rows, time.monotonic() - started)


async def restore_database(url: str, file: Path, *, force: bool = False) -> BackupSummary:
    """Restore ``file`` (made by :func:`backup_database`) into the database at ``url``.

    Refused, with nothing written: a file that is not such a backup or is one of
    the other backend; a target holding rows unless ``force`` (which replaces
    everything in it); a target some ``proxy serve`` holds a live lease on.
    """
    started = time.monotonic()
    backend = _backend(url)
    kind = backup_kind(file)
    if kind != backend:
        raise BackupError(
            f"{file} is a {kind} backup and the database is {backend}: a backup restores only "
            f"into a database of its own backend (set --database-url to a {kind} URL)")
    if backend == "sqlite":
        revision, rows = await asyncio.to_thread(_inspect_sqlite_backup, file)
    else:
        env = _pg_env(url)
        for tool in ("pg_restore", "psql"):
            _tool(tool)
        revision = await asyncio.to_thread(_archive_revision, file, env)
        _known_revision(revision, file)
    present = await database_rows(url)
    if any(present.values()) and not force:
        raise BackupError(
            f"the database is not empty ({_described(present)}); restore refuses to overwrite "
            "it: restore into a new database, or pass --force to replace everything in it")
    holder = await _live_lease(url) if present else None
    if holder is not None:
        raise BackupError(f"a `proxy serve` runs on the database ({holder}): stop it before "
                          "restoring (restoring under it would mix its memory with the backup); "
                          "if it was killed, the lease expires by itself at that time")
    if backend == "sqlite":
        await asyncio.to_thread(_sqlite_restore, file, _sqlite_file(url))
    else:
        await asyncio.to_thread(_pg_restore, file, url, await _table_names(url))
        rows = await database_rows(url)
    return BackupSummary(file, backend, revision, rows, time.monotonic() - started)
