"""``proxy db …`` (upgrade, current, check, backup, restore) and ``proxy users …``.

They live here, not in ``proxy/store``, because importing that package loads
SQLAlchemy: the commands import the store when they run.

Both read the settings (``PROXY_*`` environment, ``.env``); ``--database-url``
overrides ``PROXY_DATABASE_URL``. ``users create`` migrates the database first,
so it works on a fresh checkout. Errors go to standard error with exit status 1.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

db_app = typer.Typer(no_args_is_help=True)
users_app = typer.Typer(no_args_is_help=True)

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="Database URL; overrides PROXY_DATABASE_URL.",
        show_default=False,
    ),
]


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=1)


def _database_url(override: str | None) -> str:
    from proxy.errors import SettingsError
    from proxy.settings import load_settings

    try:
        settings = load_settings(database_url=override) if override is not None else load_settings()
    except SettingsError as exc:
        _fail(str(exc))
    return settings.database_url


@db_app.command("upgrade")
def upgrade(database_url: DatabaseUrl = None) -> None:
    """Apply pending migrations (creates the schema on an empty database)."""
    from proxy.errors import ProxyError
    from proxy.store.migrate import current_revision, upgrade_database

    url = _database_url(database_url)

    async def run() -> str | None:
        await upgrade_database(url)
        return await current_revision(url)

    try:
        revision = asyncio.run(run())
    except ProxyError as exc:
        _fail(str(exc))
    typer.echo(f"database is at revision {revision}")


@db_app.command("current")
def current(database_url: DatabaseUrl = None) -> None:
    """Print the database's migration revision ("none" if never migrated)."""
    from proxy.errors import ProxyError
    from proxy.store.migrate import current_revision

    url = _database_url(database_url)
    try:
        revision = asyncio.run(current_revision(url))
    except ProxyError as exc:
        _fail(str(exc))
    typer.echo(revision or "none")


@db_app.command("check")
def check(
    database_url: DatabaseUrl = None,
    grace: Annotated[int, typer.Option(
        min=0, help="Chronons after a CEI's last window before pending counts as stuck.")] = 40,
    limit: Annotated[int, typer.Option(min=1, help="Violations listed per invariant at most.")] = 50,
) -> None:
    """Audit the database's invariants (crash consistency); exit 1 naming each violation.

    A captured CEI has every EI captured; a captured EI has its capture record and
    probe; a missed CEI has an EI not captured; no chronon has more probes than
    its budget; no CEI is pending after all its windows passed. Reads only.
    """
    from proxy.errors import ProxyError
    from proxy.store import INVARIANTS, AuditReport, Store

    url = _database_url(database_url)

    async def run() -> AuditReport:
        async with Store.from_url(url) as store:
            return await store.audit(grace=grace, limit=limit)

    try:
        report = asyncio.run(run())
    except ProxyError as exc:
        _fail(str(exc))
    typer.echo(f"checked {report.ceis} CEIs, {report.eis} EIs, {report.chronons} chronons "
               f"(last {report.last_chronon})")
    if not report.violations:
        typer.echo(f"ok: all {len(INVARIANTS)} invariants hold")
        return
    for name, meaning in INVARIANTS.items():
        found = [v for v in report.violations if v.invariant == name]
        if found:
            typer.echo(f"{name} ({meaning}): {len(found)} violation(s)", err=True)
            for v in found:
                typer.echo(f"  {v.detail}", err=True)
    typer.echo(f"error: {len(report.violations)} invariant violation(s)", err=True)
    raise typer.Exit(code=1)


@db_app.command("backup")
def backup(
    file: Annotated[Path, typer.Argument(help="The backup file to write (must not exist).",
                                         show_default=False)],
    database_url: DatabaseUrl = None,
) -> None:
    """Write a consistent backup of the database to FILE, safe while the service runs.

    SQLite: SQLite's online backup API (never a file copy). PostgreSQL: pg_dump
    --format=custom (the PostgreSQL client tools must be installed).
    """
    from proxy.errors import ProxyError
    from proxy.store.backup import backup_database

    url = _database_url(database_url)
    try:
        summary = asyncio.run(backup_database(url, file))
    except ProxyError as exc:
        _fail(str(exc))
    size = file.stat().st_size
    typer.echo(f"backed up the {summary.backend} database ({summary.describe()}) to {file} "
               f"({size / 1e6:.1f} MB) in {summary.seconds:.1f} s")


@db_app.command("restore")
def restore(
    file: Annotated[Path, typer.Argument(help="A file written by `proxy db backup`.",
                                         show_default=False)],
    force: Annotated[bool, typer.Option(
        "--force", help="Replace whatever the database holds (refused while a service runs on it).",
    )] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Restore FILE into an empty database (of the backend it was taken from).

    A database holding rows is refused, naming them, unless --force. Stop the
    service first; run `proxy db upgrade` after restoring a backup of an older release.
    """
    from proxy.errors import ProxyError
    from proxy.store.backup import restore_database
    from proxy.store.migrate import head_revision

    url = _database_url(database_url)
    try:
        summary = asyncio.run(restore_database(url, file, force=force))
    except ProxyError as exc:
        _fail(str(exc))
    typer.echo(f"restored {file} into the {summary.backend} database ({summary.describe()}) "
               f"in {summary.seconds:.1f} s")
    head = head_revision()
    if summary.revision != head:
        typer.echo(f"the backup is at revision {summary.revision}, this release's schema at {head}: "
                   "run `proxy db upgrade` (the service does at start unless "
                   "PROXY_MIGRATE_ON_START=false)")


@users_app.command("create")
def create_user(
    name: Annotated[str, typer.Argument(help="Unique user name.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Create a user and print its API key, alone on the last line (it is shown only once)."""
    from proxy.errors import ProxyError
    from proxy.store import Store
    from proxy.store.migrate import upgrade_database

    url = _database_url(database_url)

    async def run() -> tuple[int, str]:
        await upgrade_database(url)
        async with Store.from_url(url) as store:
            return await store.create_user(name)

    try:
        user_id, api_key = asyncio.run(run())
    except ProxyError as exc:
        _fail(str(exc))
    typer.echo(f"created user {name!r} (id {user_id}); its API key, shown only this once:")
    # Scripts take the key from the last line: keep it alone there.
    typer.echo(api_key)


def _run_store(url: str, work: Any) -> Any:
    """Run ``work(store)`` on a migrated database; ProxyError → error line, exit 1."""
    from proxy.errors import ProxyError
    from proxy.store import Store
    from proxy.store.migrate import upgrade_database

    async def run() -> Any:
        await upgrade_database(url)
        async with Store.from_url(url) as store:
            return await work(store)

    try:
        return asyncio.run(run())
    except ProxyError as exc:
        _fail(str(exc))


async def _user_named(store: Any, name: str) -> Any:
    user = await store.get_user_by_name(name)
    if user is None:
        from proxy.errors import NotFoundError

        raise NotFoundError("user", name)
    return user


@users_app.command("list")
def list_users(database_url: DatabaseUrl = None) -> None:
    """List users: id, name, created, and their active keys by prefix."""
    url = _database_url(database_url)

    async def work(store: Any) -> list[tuple[Any, list[Any]]]:
        return [(u, await store.list_api_keys(u.id)) for u in await store.list_users()]

    rows = _run_store(url, work)
    if not rows:
        typer.echo("no users (create one with: proxy users create NAME)")
    for user, keys in rows:
        active = [k.prefix + "…" for k in keys if k.revoked_at is None]
        typer.echo(f"{user.id}\t{user.name}\t{user.created_at:%Y-%m-%d %H:%M}Z\t"
                   f"{len(active)} active key(s): {', '.join(active) or '-'}")


@users_app.command("rotate")
def rotate_user_key(
    name: Annotated[str, typer.Argument(help="The user whose key to rotate.")],
    keep_old: Annotated[bool, typer.Option("--keep-old", help="Do not revoke the existing keys "
                                           "(revoke them later with DELETE /api/v1/keys/{id}).")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Give a user a new API key, printed alone on the last line; revoke its other keys
    (unless --keep-old). Web sessions signed in with a revoked key end too."""
    url = _database_url(database_url)

    async def work(store: Any) -> tuple[str, int]:
        user = await _user_named(store, name)
        old = [k for k in await store.list_api_keys(user.id) if k.revoked_at is None]
        key = await store.create_api_key(user.id)
        if not keep_old:
            for k in old:
                await store.revoke_api_key_id(user.id, k.id)
        return key, 0 if keep_old else len(old)

    key, revoked = _run_store(url, work)
    typer.echo(f"new API key for {name!r} ({revoked} old key(s) revoked), shown only this once:")
    typer.echo(key)


@users_app.command("delete")
def delete_user(
    name: Annotated[str, typer.Argument(help="The user to delete.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Delete a user with its keys, registrations and targets. Refused while it has profiles:
    delete those first through the API (DELETE /api/v1/profiles/{id}), so a running service
    drops their CEIs from its loop too."""
    url = _database_url(database_url)
    if not yes:
        typer.confirm(f"delete user {name!r} and everything it owns?", abort=True)

    async def work(store: Any) -> int:
        user = await _user_named(store, name)
        profiles = await store.list_profiles(user.id)
        if profiles:
            from proxy.errors import ConflictError

            raise ConflictError(
                f"user {name!r} still has {len(profiles)} profile(s) "
                f"({', '.join(repr(p.name) for p in profiles[:5])}): delete them through the "
                "API first (DELETE /api/v1/profiles/{id}) so the running service forgets their CEIs")
        await store.delete_user(user.id)
        return int(user.id)

    user_id = _run_store(url, work)
    typer.echo(f"deleted user {name!r} (id {user_id})")
