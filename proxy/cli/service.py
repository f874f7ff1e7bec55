"""``proxy serve`` and ``proxy demo`` (the demo itself is :mod:`proxy.service.demo`).

They live here, not in ``proxy/service``, because importing that package loads
FastAPI, SQLAlchemy and the fetcher: the commands import them when they run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from fastapi import FastAPI

    from proxy.settings import Settings


def register(app: typer.Typer) -> None:
    """Add the service's top-level commands to the main app."""

    @app.command()
    def serve(
        host: Annotated[str | None, typer.Option(help="Bind address; overrides PROXY_HOST.")] = None,
        port: Annotated[int | None, typer.Option(help="TCP port; overrides PROXY_PORT.")] = None,
        root_path: Annotated[str, typer.Option(
            "--root-path", help="The path prefix a reverse proxy serves this under (e.g. /proxy): "
                                "links of the web interface (/ui) start with it.")] = "",
        role: Annotated[str, typer.Option(
            help="all (one process does everything), scheduler, worker or api (docs/scale.md).",
        )] = "all",
    ) -> None:
        """Run the proxy: REST API, chronon loop and housekeeping (settings from PROXY_* env).

        With PROXY_BROKER_URL set, --role scheduler, worker and api run the parts in separate
        processes, any number of each (docs/scale.md); --role all is the one-process default.

        Migrates the database on start unless PROXY_MIGRATE_ON_START=false.
        Invalid settings print the offending variable and exit with status 2; a port
        that cannot be listened on (taken, not allowed) prints one line and exits
        with status 1 before anything else starts.
        """
        from proxy.errors import SettingsError
        from proxy.settings import load_settings

        overrides: dict[str, object] = {}
        if host is not None:
            overrides["host"] = host
        if port is not None:
            overrides["port"] = port
        from proxy.aio import loop_name

        try:
            settings = load_settings(**overrides)
            loop = loop_name()
        except (SettingsError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(code=2) from None

        from proxy.ports import bind_problem

        problem = bind_problem(settings.host, settings.port)
        if problem is not None:
            # Before migrating or starting the loop (issue 23): nothing happens on a taken port.
            typer.echo(f"error: {problem} (another proxy running? set PROXY_PORT or --port)", err=True)
            raise typer.Exit(code=1)

        from proxy.api.roles import ROLES, make_role_app
        from proxy.service.logs import configure_logging

        if role not in ROLES:
            typer.echo(f"error: --role: {role!r} is not one of {', '.join(ROLES)}", err=True)
            raise typer.Exit(code=2)
        configure_logging(settings.log_level, settings.log_format)
        try:
            app_ = make_role_app(settings, role)
        except SettingsError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(code=2) from None
        _serve(app_, settings, loop, root_path.rstrip("/"))


def _serve(app_: FastAPI, settings: Settings, loop: str, root_path: str = "") -> None:
    """uvicorn, with the shutdown the proxy promises: the first SIGTERM (or SIGINT) drains
    the writer's backlog within ``PROXY_DRAIN_SECONDS``; a second one of either exits at
    once (uvicorn alone forces only on a second SIGINT)."""
    import asyncio
    import contextlib
    import types

    import uvicorn

    service = getattr(app_.state, "service", None)  # a worker has no service: nothing to drain

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: types.FrameType | None) -> None:
            if self.should_exit and service is not None:  # the second signal: stop waiting
                with contextlib.suppress(RuntimeError):  # no loop any more: nothing to cut short
                    asyncio.get_running_loop().call_soon_threadsafe(service.stop_now)
            if self.should_exit:
                self.force_exit = True
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app_, host=settings.host, port=settings.port, log_level=settings.log_level.lower(),
        access_log=False, lifespan="on", loop=loop, root_path=root_path,
        # None: uvicorn's records go through configure_logging's renderer (JSON when asked).
        log_config=None,
        # Open connections (event streams) must not hold the drain up for ever.
        timeout_graceful_shutdown=max(1, round(settings.drain_seconds)),
    )
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises a captured SIGINT: done, exit 0
        Server(config).run()


def register_demo(app: typer.Typer) -> None:
    """Add ``proxy demo`` to the main app."""

    @app.command()
    def demo(
        port: Annotated[int, typer.Option(help="Port of the demo's API server; a free one if it is taken.")] = 8000,
        seconds: Annotated[float, typer.Option(help="How long to run.")] = 45.0,
        chronon: Annotated[float, typer.Option(help="Chronon length in seconds.")] = 0.5,
        budget: Annotated[int, typer.Option(help="Probes per chronon.")] = 2,
        policy: Annotated[str, typer.Option(help="Scheduling policy.")] = "mrsf-p",
        database: Annotated[Path | None, typer.Option(help="SQLite file to keep (default: a temp file).")] = None,
        seed: Annotated[int, typer.Option(help="Seed of the demo's publications.")] = 1,
    ) -> None:
        """Start a local feed farm and the proxy with a short chronon, register the main paper's
        motivating example and AuctionWatch profiles, and print what the proxy decides."""
        import asyncio

        from proxy.service.demo import run_demo

        asyncio.run(run_demo(port=port, seconds=seconds, chronon=chronon, budget=budget,
                             policy=policy, database=database, seed=seed))
