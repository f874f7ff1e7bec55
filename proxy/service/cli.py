"""``proxy serve`` (and, later, ``proxy demo`` from ``proxy/service/demo.py``)."""

from __future__ import annotations

from typing import Annotated

import typer


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

        import uvicorn

        from proxy.api import make_app
        from proxy.service.logs import configure_logging

        configure_logging(settings.log_level, settings.log_format)
        app_ = make_app(settings)
        uvicorn.run(app_, host=settings.host, port=settings.port, log_level=settings.log_level.lower(),
                    access_log=False, lifespan="on", loop=loop)
