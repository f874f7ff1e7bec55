"""``proxy farm …``: run the local feed farm.

``proxy farm serve`` prints one JSON line first, e.g.
``{"event": "listening", "url": "http://127.0.0.1:41234", "port": 41234, ...}``,
serves until SIGINT/SIGTERM (or ``--duration``), then prints a ``"stopped"``
line with request and publication counts and exits 0.  ``python -m
proxy.farm serve …`` does the same without loading the other layers'
commands (``proxy.farm.FarmProcess`` runs it that way).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from proxy.farm import FeedFarm

farm_app = typer.Typer(no_args_is_help=True)


@farm_app.callback()
def _group() -> None:
    """The local feed farm that tests and benchmarks poll."""
    # A callback keeps ``serve`` a subcommand when this app runs on its own.


def _parse_delay(raw: str) -> float | tuple[float, float]:
    lo, sep, hi = raw.partition(":")
    try:
        return (float(lo), float(hi)) if sep else float(lo)
    except ValueError:
        raise typer.BadParameter(f"{raw!r} is not SECONDS or LO:HI") from None


def _read_ping_map(path: Path | None) -> list[tuple[str, str, dict[str, str]]]:
    if path is None:
        return []
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}", param_hint="--ping-map") from None
    if not isinstance(data, dict):
        raise typer.BadParameter("must be a JSON object keyed by feed id", param_hint="--ping-map")
    out = []
    for feed_id, target in data.items():
        if not isinstance(target, dict) or not isinstance(target.get("url"), str):
            raise typer.BadParameter(f"feed {feed_id!r}: needs a 'url'", param_hint="--ping-map")
        headers = {str(k): str(v) for k, v in dict(target.get("headers") or {}).items()}
        out.append((str(feed_id), target["url"], headers))
    return out


@farm_app.command("serve")
def serve(
    feeds: Annotated[
        int | None,
        typer.Option(help="Number of feeds (ids 0..N-1); default 100, or the trace's feeds."),
    ] = None,
    feed: Annotated[
        list[str] | None,
        typer.Option(help="A feed id to serve (repeatable), e.g. --feed mish --feed cnn: "
                          "instead of --feeds N (the README's walk-through names its feeds)."),
    ] = None,
    entries: Annotated[int, typer.Option(help="Entries each feed shows (its last N).")] = 20,
    prefill: Annotated[
        int | None, typer.Option(help="Entries each feed has before the run; default --entries.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="rss, atom or mixed.")] = "rss",
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    also_host: Annotated[
        list[str] | None,
        typer.Option(help="Another address to serve on, same port (repeatable), e.g. 127.0.0.2: "
                          "feeds reachable under several host names, as in real deployments."),
    ] = None,
    port: Annotated[int, typer.Option(help="Port to bind; 0 picks a free one.")] = 0,
    rate: Annotated[
        float, typer.Option(help="Poisson publications per feed per trace unit (0: none).")
    ] = 0.0,
    trace: Annotated[
        Path | None, typer.Option(help="CSV 'feed_id,timestamp' trace to play instead of --rate.")
    ] = None,
    horizon: Annotated[
        float | None, typer.Option(help="Stop the schedule at this trace time.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the Poisson schedule.")] = 0,
    seconds_per_trace_unit: Annotated[
        float, typer.Option(help="Wall seconds per trace unit (0.05: a trace minute is 50 ms).")
    ] = 0.05,
    trace_unit_seconds: Annotated[
        float, typer.Option(help="Calendar seconds of one trace unit (dates in documents).")
    ] = 60.0,
    log: Annotated[
        Path | None, typer.Option(help="Publication log (.jsonl, else CSV); appended.")
    ] = None,
    request_log: Annotated[
        Path | None, typer.Option(help="Log of every request (JSONL: ms, feed, status, validators, "
                                       "bytes, User-Agent, kind); appended.")
    ] = None,
    ping_url: Annotated[
        str | None,
        typer.Option(help="POST a ping per publication; {feed_id}, {feed_url}, {entry_id} expand."),
    ] = None,
    ping_map: Annotated[
        Path | None,
        typer.Option(help='JSON {"feed id": {"url": …, "headers": {…}}}: per-feed ping targets.'),
    ] = None,
    ping_drop_rate: Annotated[float, typer.Option(help="Share of pings dropped.")] = 0.0,
    ping_delay: Annotated[str, typer.Option(help="Ping delay: SECONDS or LO:HI.")] = "0",
    ping_delay_rate: Annotated[
        float, typer.Option(help="Share of (undropped) pings that wait --ping-delay.")
    ] = 1.0,
    ping_seed: Annotated[int | None, typer.Option(help="Seed of ping drops and delays.")] = None,
    hub: Annotated[
        str | None,
        typer.Option(help="A WebSub hub: feeds advertise it and POST hub.mode=publish per entry."),
    ] = None,
    push_share: Annotated[
        float, typer.Option(help="Share of the feeds that advertise --hub (seeded by --push-seed).")
    ] = 1.0,
    push_seed: Annotated[int | None, typer.Option(help="Seed of the --push-share draw.")] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            help="FEED:MODE[:key=value,...] (repeatable), e.g. 3:rate_limited:retry_after=30."
        ),
    ] = None,
    duration: Annotated[
        float | None, typer.Option(help="Stop after this many seconds (default: until a signal).")
    ] = None,
    publisher_hints: Annotated[
        float | None,
        typer.Option(help="With --trace: each RSS feed states its mean update interval over the trace "
                          "(wall time), times exp(SIGMA * N(0,1)), as sy:updatePeriod/sy:updateFrequency "
                          "(issue 45; no real trace has hints)."),
    ] = None,
) -> None:
    """Serve synthetic RSS/Atom feeds on 127.0.0.1 until SIGINT/SIGTERM."""
    from datetime import timedelta

    from proxy.aio import loop_name, run
    from proxy.farm import (
        FeedFarm,
        TraceEvent,
        load_csv_trace,
        parse_fault_spec,
        poisson_schedule,
        trace_intervals,
    )

    if trace is not None and rate > 0:
        raise typer.BadParameter("give either --trace or --rate, not both")
    if feed and (feeds is not None or trace is not None):
        raise typer.BadParameter("give either --feed names or --feeds N / --trace, not both")
    unit = timedelta(seconds=trace_unit_seconds)
    feed_ids: list[str]
    schedule: list[TraceEvent] | None = None
    skipped = 0
    if trace is not None:
        csv_trace = load_csv_trace(trace, trace_unit=unit)
        skipped = csv_trace.skipped
        feed_ids = list(csv_trace.feed_ids)
        if feeds is not None:
            feed_ids += [str(i) for i in range(feeds) if str(i) not in set(feed_ids)]
        schedule = [e for e in csv_trace.events if horizon is None or e.trace_time < horizon]
    elif feed:
        feed_ids = list(feed)
    else:
        feed_ids = [str(i) for i in range(100 if feeds is None else feeds)]
    hints = None
    if publisher_hints is not None:
        if schedule is None:
            raise typer.BadParameter("--publisher-hints needs --trace (hints are the trace's own rates)")
        try:
            hints = trace_intervals(schedule, feed_ids, seconds_per_trace_unit, sigma=publisher_hints, seed=seed,
                                    horizon=horizon)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--publisher-hints") from None
    faults = []
    for spec in fault or []:
        try:
            faults.append(parse_fault_spec(spec))
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--fault") from None
    try:
        farm = FeedFarm(
            feed_ids,
            window=entries,
            prefill=entries if prefill is None else prefill,
            formats=fmt,
            seconds_per_trace_unit=seconds_per_trace_unit,
            trace_unit=unit,
            schedule=(
                schedule
                if schedule is not None
                else poisson_schedule(feed_ids, rate, seed=seed, horizon=horizon)
                if rate > 0
                else None
            ),
            log_path=log,
            request_log=request_log if request_log is not None else False,
            ping=ping_url,
            ping_drop_rate=ping_drop_rate,
            ping_delay=_parse_delay(ping_delay),
            ping_delay_rate=ping_delay_rate,
            ping_seed=ping_seed,
            hub=hub,
            push_share=push_share,
            push_seed=push_seed,
            hints=hints,
            host=host,
            also_hosts=also_host or (),
            port=port,
        )
        for feed_id, f, times in faults:
            farm.set_fault(feed_id, f.mode, times=times, **f.params)
        for feed_id, url, headers in _read_ping_map(ping_map):
            farm.set_ping_target(feed_id, url, headers)
        loop_name()  # a bad PROXY_EVENT_LOOP is a bad parameter too
    except (ValueError, LookupError) as exc:
        raise typer.BadParameter(str(exc)) from None
    run(_serve(farm, duration, skipped))


@farm_app.command("publish")
def publish(
    farm_url: Annotated[str, typer.Argument(help="The farm's base URL, e.g. http://127.0.0.1:8001.")],
    feed_id: Annotated[str, typer.Argument(help="The feed that publishes, e.g. mish.")],
    title: Annotated[str | None, typer.Option(help="The entry's title (default: filler text).")] = None,
    summary: Annotated[str | None, typer.Option(help="The entry's summary (default: filler text).")] = None,
) -> None:
    """Publish one entry on a running farm (``proxy farm serve``); prints its entry id.

    The farm's vocabulary is filler with no keyword on purpose: this is how a
    post about "oil" appears for the README's walk-through.
    """
    import httpx

    url = f"{farm_url.rstrip('/')}/_farm/feeds/{feed_id}/publish"
    body = {k: v for k, v in (("title", title), ("summary", summary)) if v is not None}
    try:
        r = httpx.post(url, json=body, timeout=10)
    except httpx.HTTPError as exc:
        typer.echo(f"error: no feed farm answers at {farm_url} ({exc})", err=True)
        raise typer.Exit(code=1) from None
    if r.status_code != 200:
        typer.echo(f"error: the farm at {farm_url} answered {r.status_code}: {r.text.strip()}", err=True)
        raise typer.Exit(code=1)
    typer.echo(r.json()["entry_id"])


@farm_app.command("hub")
def hub(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: a free one).")] = 0,
    data: Annotated[Path, typer.Option(help="Folder of the hub's subscriptions (hub.sqlite3).")] = Path("."),
) -> None:
    """Serve a real WebSub hub (flask-websub's, a test dependency) for ``serve --hub``.

    Prints ``{"event": "listening", "url": …}`` first and serves until SIGINT/SIGTERM:
    it verifies subscriptions and, at each ``hub.mode=publish``, fetches the topic and
    pushes it to its subscribers, signed with each one's secret (docs/websub.md).
    """
    import json
    import os
    import signal
    import threading

    from proxy.farm.hub import HubUnavailableError, serve_hub

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with serve_hub(data, port=port) as url:
            print(json.dumps({"event": "listening", "url": url, "pid": os.getpid()}), flush=True)
            stop.wait()
    except HubUnavailableError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    print(json.dumps({"event": "stopped"}), flush=True)


async def _serve(farm: FeedFarm, duration: float | None, skipped: int) -> None:
    import asyncio
    import contextlib
    import json
    import os
    import signal
    from collections import Counter

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with farm:
        line = {
            "event": "listening",
            "url": farm.base_url,
            "port": farm.port,
            "feeds": len(farm.feed_ids),
            "pid": os.getpid(),
            "trace_rows_skipped": skipped,
        }
        print(json.dumps(line), flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=duration)
        stats = farm.stats()
        summary = {
            "event": "stopped",
            "requests": stats.requests,
            "by_status": {str(k): v for k, v in sorted(stats.by_status.items())},
            "publications": len(farm.publications),
            "pings": dict(Counter(r.outcome for r in farm.pings)),
            "hub_publishes": dict(Counter(r.outcome for r in farm.hub_publishes)),
        }
    print(json.dumps(summary), flush=True)
