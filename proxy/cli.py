"""The ``proxy`` command line: one Typer app, one sub-app per layer.

Sub-apps live beside the code they drive and import their heavy dependencies
inside the commands, so ``proxy --help`` stays fast.
"""

from __future__ import annotations

import typer

from proxy import __version__
from proxy.bench.cli import bench_app
from proxy.service.cli import register as register_service
from proxy.service.demo_cli import register_demo
from proxy.sim.cli import sim_app
from proxy.sim.farm_cli import farm_app
from proxy.store.cli import db_app, users_app

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


if __name__ == "__main__":
    main()
