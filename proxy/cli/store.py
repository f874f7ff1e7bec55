"""``proxy db …`` and ``proxy users …``.

They live here, not in ``proxy/store``, because importing that package loads
SQLAlchemy: the commands import the store when they run.

Both read the settings (``PROXY_*`` environment, ``.env``); ``--database-url``
overrides ``PROXY_DATABASE_URL``. ``users create`` migrates the database first,
so it works on a fresh checkout. Errors go to standard error with exit status 1.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, NoReturn

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
