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
    ) -> None:
        """Run the proxy: REST API, chronon loop and housekeeping (settings from PROXY_* env).

        Migrates the database on start unless PROXY_MIGRATE_ON_START=false.
        Invalid settings print the offending variable and exit with status 2.
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

        from proxy.api import make_app
        from proxy.service.logs import configure_logging

        configure_logging(settings.log_level, settings.log_format)
        app_ = make_app(settings)
        _serve(app_, settings, loop)


def _serve(app_: FastAPI, settings: Settings, loop: str) -> None:
    """uvicorn, with the shutdown the proxy promises: the first SIGTERM (or SIGINT) drains
    the writer's backlog within ``PROXY_DRAIN_SECONDS``; a second one of either exits at
    once (uvicorn alone forces only on a second SIGINT)."""
    import asyncio
    import contextlib
    import types

    import uvicorn

    service = app_.state.service

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: types.FrameType | None) -> None:
            if self.should_exit:  # the second signal: stop waiting for anything
                self.force_exit = True
                with contextlib.suppress(RuntimeError):  # no loop any more: nothing to cut short
                    asyncio.get_running_loop().call_soon_threadsafe(service.stop_now)
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app_, host=settings.host, port=settings.port, log_level=settings.log_level.lower(),
        access_log=False, lifespan="on", loop=loop,
        # Open connections (event streams) must not hold the drain up for ever.
        timeout_graceful_shutdown=max(1, round(settings.drain_seconds)),
    )
    Server(config).run()


def register_demo(app: typer.Typer) -> None:
    """Add ``proxy demo`` to the main app."""

    @app.command()
    def demo(
        port: Annotated[int, typer.Option(help="Port of the demo's API server.")] = 8000,
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
