"""``proxy demo`` (the command only; the demo itself is in :mod:`proxy.service.demo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


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
