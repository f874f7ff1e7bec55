"""``proxy demo``: the feed farm and the real service together, with a short chronon.

Within a minute a newcomer sees the proxy at work: the main paper's motivating
example (a blog probed every few seconds; when a post mentions "oil", two news
feeds probed within a window) and a few AuctionWatch-style profiles, with one
readable line per probe decision, per probe and per captured or missed CEI.
Everything is real: HTTP to a local feed farm, the REST API over uvicorn, an
SQLite file. The demo deliberately uses a short chronon and a small budget so
that some CEIs are missed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
import sys
import tempfile
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
import structlog
import uvicorn

from proxy.api import make_app
from proxy.farm import FeedFarm
from proxy.ports import listen_socket
from proxy.service import ProxyService
from proxy.settings import load_settings

BLOG_TOPICS = (
    ("Oil prices jump as supply tightens", "Crude oil rose 4% on Tuesday."),
    ("Housing starts slow again", "Builders report fewer permits."),
    ("Why the Fed will not cut yet", "Inflation stays above target."),
    ("Oil majors report record margins", "Refining margins keep widening."),
    ("Retail sales beat expectations", "Consumers keep spending."),
)
AUCTIONS = ("laptop-ibm", "laptop-dell", "laptop-intel", "camera-1", "camera-2")


@dataclass
class DemoPrinter:
    """Turns the service's structured log events into one readable line each."""

    names: dict[int, str] = field(default_factory=dict)
    rule_owners: dict[str, str] = field(default_factory=dict)
    out: TextIO = sys.stdout
    counts: dict[str, int] = field(default_factory=lambda: {"probes": 0, "captured": 0, "missed": 0})

    def name(self, feed_id: object) -> str:
        return self.names.get(int(str(feed_id)), f"feed {feed_id}") if str(feed_id).isdigit() else str(feed_id)

    def own_rules(self, profile: dict[str, Any]) -> None:
        for rule in profile["rules"]:
            self.rule_owners[f"r{rule['id']}"] = profile["name"]

    def cei(self, cei_id: object) -> str:
        """``r7:3`` → ``r7:3 (auction watcher 0)``: CEI ids are ``r{rule id}:{sequence}``."""
        text = str(cei_id)
        owner = self.rule_owners.get(text.split(":", 1)[0])
        return f"{text} ({owner})" if owner else text

    def __call__(self, _logger: Any, _method: str, event: MutableMapping[str, Any]) -> str:
        kind = event.get("event")
        line: str | None = None
        if kind == "selected" and event.get("feeds"):
            feeds = ", ".join(self.name(f) for f in event["feeds"])
            line = f"chronon {event['chronon']:>4}  decide  probe {feeds}  (budget {event.get('budget')})"
        elif kind == "probe":
            self.counts["probes"] += 1
            extra = f", {event['new_entries']} new" if event.get("new_entries") else ""
            caps = f", captured {event['captured_eis']} EI(s)" if event.get("captured_eis") else ""
            line = (f"chronon {event['chronon']:>4}  probe   {self.name(event['feed']):<14} "
                    f"{event['outcome']}{extra}{caps}")
        elif kind == "cei_captured":
            self.counts["captured"] += 1
            line = f"chronon {event['chronon']:>4}  CEI {self.cei(event['cei'])} captured"
        elif kind == "cei_missed":
            self.counts["missed"] += 1
            line = f"chronon {event['chronon']:>4}  CEI {self.cei(event['cei'])} MISSED"
        if line is not None:
            print(line, file=self.out, flush=True)
        raise structlog.DropEvent


def _configure_printer(printer: DemoPrinter) -> None:
    structlog.configure(
        processors=[structlog.processors.add_log_level, printer],
        wrapper_class=structlog.make_filtering_bound_logger(0),
        cache_logger_on_first_use=False,
    )


async def _publisher(farm: FeedFarm, rng: random.Random, period: float, stop: asyncio.Event) -> None:
    """Publish blog posts (some about oil), news items and auction bids at human-watchable pace."""
    i = 0
    while not stop.is_set():
        title, summary = BLOG_TOPICS[i % len(BLOG_TOPICS)]
        farm.publish("mish", title=title, summary=summary)
        for news in ("cnn", "money"):
            if rng.random() < 0.6:
                farm.publish(news, title=f"{news.upper()} headline {i}", summary="markets")
        for auction in AUCTIONS:
            if rng.random() < 0.5:
                farm.publish(auction, title=f"New bid on {auction}", summary=f"bid #{i}")
        i += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=period)


async def run_demo(*, port: int, seconds: float, chronon: float, budget: int, policy: str,
                   database: Path | None, seed: int, out: TextIO = sys.stdout) -> dict[str, int]:
    """Run the whole demo for ``seconds``; returns the printed counts (probes, captured, missed)."""
    printer = DemoPrinter(out=out)
    # Bind first (issue 23): when the port is taken (`make run` holds 8000), take a free one and say so.
    sock, moved = listen_socket("127.0.0.1", port)
    if moved:
        wanted, port = port, int(sock.getsockname()[1])
        print(f"port {wanted} is taken: the demo's API listens on port {port} instead", file=out, flush=True)
    _configure_printer(printer)
    tmp = tempfile.TemporaryDirectory(prefix="proxy-demo-")
    db_path = database or Path(tmp.name) / "demo.sqlite3"
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{db_path}", chronon_seconds=chronon, budget=budget,
        policy=policy, allow_private_networks=True, host="127.0.0.1", port=port,
        per_host_concurrency=64, per_host_min_delay_seconds=0.0,
    )
    feed_ids = ["mish", "cnn", "money", *AUCTIONS]
    base = f"http://127.0.0.1:{port}"

    def secs(chronons: int) -> str:
        """About ``chronons`` chronons as a rule duration (whole seconds, at least 1)."""
        return f"{max(1, round(chronons * chronon))}s"

    stop = asyncio.Event()
    try:
        # The farm's calendar is the service's: entries dated as they are published, so the feeds'
        # update models (GET /api/v1/feeds/{id}) learn the demo's pace. On the farm's default
        # calendar (2026-01-01, a trace minute per 0.05 s) a feed posting every few seconds read as
        # one posting a few times a year, months ago.
        async with FeedFarm(feeds=feed_ids, window=20, prefill=3, seconds_per_trace_unit=1.0,
                            trace_unit=dt.timedelta(seconds=1), epoch=dt.datetime.now(dt.UTC)) as farm:
            service = ProxyService(settings)
            app = make_app(settings, service=service)
            server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                   access_log=False, lifespan="on"))
            serve_task = asyncio.create_task(server.serve(sockets=[sock]))
            while not server.started:
                if serve_task.done():
                    serve_task.result()  # raises the start-up error (port in use …)
                    raise RuntimeError("the API server stopped during start-up")
                await asyncio.sleep(0.05)
            _user_id, key = await service.store.create_user("demo")
            print(f"API key: {key}", file=out)
            print(f"OpenAPI docs: {base}/docs   (Authorization: Bearer <key>)", file=out)
            print(f"policy {policy}, budget {budget} probes per chronon of {chronon:g} s\n", file=out, flush=True)
            headers = {"Authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as api:
                ids: dict[str, str] = {}
                for fid in feed_ids:
                    r = await api.post("/api/v1/feeds", json={"url": farm.url(fid)})
                    r.raise_for_status()
                    body = r.json()
                    ids[fid] = str(body["id"])
                    printer.names[int(body["id"])] = fid
                    # The farm plays the hub: each publication pings the feed's own route with its token.
                    farm.set_ping_target(fid, f"{base}/api/v1/feeds/{body['id']}/ping",
                                         {"X-Ping-Token": body["ping_token"]})
                analyst = {
                    "name": "business analyst",
                    "rules": [{"name": "oil news",
                               "trigger": {"feed": ids["mish"], "every": secs(6),
                                           "slack": secs(2), "when": {"contains": ["oil"]}},
                               "query": [{"feed": ids["cnn"], "within": secs(8)},
                                         {"feed": ids["money"], "within": secs(8)}]}],
                }
                r = await api.post("/api/v1/profiles", json=analyst)
                r.raise_for_status()
                printer.own_rules(r.json())
                print(f"profile 'business analyst' = {r.json()['id']}: probe mish every {secs(6)}; "
                      f"on 'oil', cnn and money within {secs(8)}", file=out)
                groups = (AUCTIONS[:3], AUCTIONS[2:], AUCTIONS[::2], AUCTIONS[1:4])
                for n, group in enumerate(groups):
                    watch = {"name": f"auction watcher {n}",
                             "rules": [{"name": f"watch {len(group)}",
                                        "watch": {"feeds": [ids[a] for a in group],
                                                  "within": secs(2)}}]}
                    r = await api.post("/api/v1/profiles", json=watch)
                    r.raise_for_status()
                    printer.own_rules(r.json())
                    print(f"profile 'auction watcher {n}' = {r.json()['id']}: AuctionWatch({len(group)}) "
                          f"over {', '.join(group)}", file=out)
                print(flush=True, file=out)
                publisher = asyncio.create_task(
                    _publisher(farm, random.Random(seed), period=3 * chronon, stop=stop))
                await asyncio.sleep(seconds)
                stop.set()
                await publisher
                summary = (await api.get("/api/v1/metrics/summary")).json() if seconds > 0 else {}
            server.should_exit = True
            await serve_task
    finally:
        sock.close()
        tmp.cleanup()
    print(f"\n{printer.counts['probes']} probes, {printer.counts['captured']} CEIs captured, "
          f"{printer.counts['missed']} missed.", file=out)
    if summary:
        print(f"metrics summary: {summary}", file=out)
    return printer.counts

