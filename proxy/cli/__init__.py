"""The ``proxy`` command line: one Typer app, one sub-app per layer.

Importing this package loads Typer and the command modules, nothing heavier:
every command imports what it uses when it runs, so ``proxy --help`` and
``proxy --version`` answer at once and ``proxy sim run`` never loads FastAPI,
SQLAlchemy or the fetcher (``tests/test_cli_imports.py``; figures in
``docs/cli.md``).  Sub-apps live beside the code they drive when that package
is light to import (``proxy.sim.cli``, ``proxy.farm.cli``, ``proxy.bench.cli``);
the service's and the store's commands live here, because importing
``proxy.service`` or ``proxy.store`` loads the whole service.
"""

from __future__ import annotations

from typing import Annotated

import typer

from proxy import __version__
from proxy.bench.cli import bench_app
from proxy.cli.plan import register as register_plan
from proxy.cli.service import register as register_service
from proxy.cli.service import register_demo
from proxy.cli.store import db_app, users_app
from proxy.farm.cli import farm_app
from proxy.sim.cli import sim_app

app = typer.Typer(
    name="proxy",
    help="A monitoring proxy that polls RSS/Atom feeds under a probe budget.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(sim_app, name="sim", help="Simulator: workloads, policies, optimum, experiments.")
app.add_typer(farm_app, name="farm", help="The local feed farm that tests and benchmarks poll.")
app.add_typer(db_app, name="db", help="Database migrations.")
app.add_typer(users_app, name="users", help="Users and API keys.")
app.add_typer(bench_app, name="bench", help="Live benchmark: service vs simulator vs plain readers.")
register_service(app)
register_demo(app)
register_plan(app)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"proxy {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """A monitoring proxy that polls RSS/Atom feeds under a probe budget."""


@app.command()
def version() -> None:
    """Print the proxy's version."""
    typer.echo(__version__)


def main() -> None:
    try:
        app()
    except ModuleNotFoundError as exc:  # scipy, matplotlib or tqdm without the `sim` extra
        from proxy.extras import missing_extra_message

        message = missing_extra_message(exc)
        if message is None:
            raise
        typer.echo(f"error: {message}", err=True)
        raise SystemExit(1) from None
