"""The ``proxy bench peers`` command; heavy imports happen inside it."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from proxy.bench._options import WorkloadOptions, with_workload_options


@with_workload_options(workload="trace")
def peers(
    wl: WorkloadOptions,
    budget: Annotated[int, typer.Option(help="The proxy's budget C (probes per chronon).")] = 1,
    policy: Annotated[str, typer.Option(help="The proxy's policy.")] = "mrsf-p",
    chronon_seconds: Annotated[float, typer.Option(help="Chronon length of the proxy's run.")] = 0.3,
    phase: Annotated[float, typer.Option(help="When update u is published, in chronons from chronon u.")] = -0.1,
    ping_lag: Annotated[float, typer.Option(help="Chronons the farm holds every ping.")] = 0.2,
    ping_drop_rate: Annotated[float, typer.Option(
        help="Share of the proxy's pings the farm drops (1: the proxy polls blind, as the peers do).")] = 0.0,
    reader_orders: Annotated[int, typer.Option(min=1, help="Feed orders of the live bench's replicas.")] = 8,
    peer_list: Annotated[str, typer.Option(
        "--peers", help="Real readers to run, comma-separated: reader,changedetection,newsboat,rss2email.")
    ] = "reader,changedetection,newsboat,rss2email",
    out: Annotated[Path, typer.Option(help="Folder for the result JSON, request logs and peers' files.")] = Path(
        "bench-peers"),
) -> None:
    """Run the proxy, then each real feed reader, against the same farm and trace; score them alike.

    Each peer polls the rules' feeds by its own scheduler, tuned so that its feed
    GETs match the proxy's; one line per poller, and ``--out/{tag}-peers.json``
    with each one's figures, configuration and request log (``docs/peers.md``).
    """
    import asyncio

    from proxy.bench.live import LiveConfig
    from proxy.bench.peers._peers import get_peer
    from proxy.bench.peers._run import main

    try:
        chosen = [get_peer(p.strip()) for p in peer_list.split(",") if p.strip()]
        bw = wl.build()
        from proxy.core.policies import get_policy

        get_policy(policy)
    except (ValueError, LookupError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(bw.description)
    argv = sys.argv[sys.argv.index("peers"):] if "peers" in sys.argv else ["peers"]
    command = "proxy bench " + " ".join(shlex.quote(a) for a in argv)
    cfg = LiveConfig(policy=policy, budget=budget, chronon_seconds=chronon_seconds, seed=wl.seed, phase=phase,
                     ping_lag=ping_lag, reader_orders=reader_orders, ping_drop_rate=ping_drop_rate)
    past = "-history" if bw.history else ""
    drop = f"-drop{round(100 * ping_drop_rate)}" if ping_drop_rate else ""
    tag = f"{bw.name}-{policy}-C{budget}{drop}{past}"
    try:
        path = asyncio.run(main(bw, cfg, chosen, out, tag, command, typer.echo))
    except (KeyboardInterrupt, asyncio.CancelledError):
        typer.echo(f"interrupted; files so far are in {out}", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"wrote {path}")
