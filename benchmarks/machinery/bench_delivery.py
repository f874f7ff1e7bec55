"""Delivery of notifications (issue 19): latency under load and backlog drain; figures for docs/notifications.md.

1. *Latency*: CEIs are resolved at ``--rate`` per second for ``--seconds`` (each
   batch of 10 in one ``record_probe`` transaction, as the service's writer
   does, which writes the outbox rows too), the dispatcher woken after each
   batch; a healthy local receiver (aiohttp on 127.0.0.1) answers 204. Latency
   is ``delivered_at - event.created_at`` per delivery (resolution stored to 2xx
   received), read back from the database. Target: p99 under 1 s.
2. *Drain*: ``--backlog`` pending deliveries over ``--targets`` webhook targets
   are inserted at once, then the dispatcher (default concurrency settings)
   sends them all. Target: at least 500 deliveries/s.

SQLite file database in a temporary directory (the default deployment);
``--database-url`` for another (an empty, migrated database is expected).
The figures go into docs/notifications.md by hand, with the command and date.

Usage: .venv/bin/python benchmarks/machinery/bench_delivery.py [--rate 200] [--seconds 20] [--backlog 100000] [--targets 20]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from sqlalchemy import insert, select

from proxy.feeds import AddressPolicy
from proxy.notify.senders import WebhookSender
from proxy.service.dispatch import Dispatcher, RetryPolicy
from proxy.service.metrics import ServiceMetrics
from proxy.settings import Settings
from proxy.store import (
    CeiStateChange,
    NewEi,
    ProbeInput,
    RuleInput,
    Store,
    TargetInput,
    upgrade_database,
)
from proxy.store._models import DeliveryRow, NotificationEventRow


class Receiver:
    """Answers 204 to every POST, counting them."""

    def __init__(self) -> None:
        self.count = 0
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        async def handle(request: web.Request) -> web.Response:
            await request.read()
            self.count += 1
            return web.Response(status=204)

        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def _dispatcher(store: Store, metrics: ServiceMetrics) -> Dispatcher:
    s = Settings()
    return Dispatcher(
        store, WebhookSender(AddressPolicy(allow_private_networks=True), timeout=s.delivery_timeout_seconds),
        metrics, RetryPolicy(s.delivery_retry_base_seconds, s.delivery_retry_max_seconds,
                             s.delivery_retry_window_seconds),
        concurrency=s.delivery_concurrency, per_target=s.delivery_per_target_concurrency,
        poll=s.delivery_poll_seconds,
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def latency(url: str, rx: Receiver, rate: int, seconds: float) -> dict[str, Any]:
    store = Store.from_url(url)
    store.chronon_start = lambda t: dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=t)
    user, _ = await store.create_user("bench-latency")
    reg, _ = await store.register_feed_for(user, "http://127.0.0.1/feed.xml")
    feed = reg.feed.id
    target = TargetInput("webhook", f"http://127.0.0.1:{rx.port}/latency", ("captured",))
    profile = await store.create_profile(user, "p", [RuleInput("r", {}, (feed,))], notify=[target])
    rule = profile.rules[0].id
    total = int(rate * seconds)
    batch = 10
    for start in range(0, total, 500):
        await store.add_ceis([(f"r{rule}:{i}", profile.id, rule, 0, True, (NewEi(0, feed, 0, 10),))
                              for i in range(start, min(total, start + 500))])
    metrics = ServiceMetrics()
    dispatcher = _dispatcher(store, metrics)
    dispatcher.start()
    began = time.perf_counter()
    for b, start in enumerate(range(0, total, batch)):
        due = began + b * batch / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        await store.record_probe(
            ProbeInput(feed, dt.datetime.now(dt.UTC), "ok", chronon=b),
            cei_changes=[CeiStateChange(f"r{rule}:{i}", "captured", b)
                         for i in range(start, min(total, start + batch))])
        dispatcher.wake()
    produced = time.perf_counter() - began
    while await store.outbox_backlog() > 0:  # noqa: ASYNC110 (polling the database is the point)
        await asyncio.sleep(0.05)
    await dispatcher.stop()
    async with store.engine.connect() as conn:
        rows = (await conn.execute(
            select(DeliveryRow.delivered_at, NotificationEventRow.created_at)
            .join(NotificationEventRow, NotificationEventRow.id == DeliveryRow.event_id)
            .where(DeliveryRow.target_id == profile.new_targets[0].id))).all()
    await store.close()
    lat = []
    for delivered, created in rows:
        delivered = delivered if delivered.tzinfo else delivered.replace(tzinfo=dt.UTC)
        created = created if created.tzinfo else created.replace(tzinfo=dt.UTC)
        lat.append((delivered - created).total_seconds())
    return {"resolved": total, "rate": total / produced, "delivered": len(lat),
            "p50": statistics.median(lat), "p99": _pct(lat, 0.99), "max": max(lat)}


async def drain(url: str, rx: Receiver, backlog: int, targets: int) -> dict[str, Any]:
    store = Store.from_url(url)
    user, _ = await store.create_user("bench-drain")
    reg, _ = await store.register_feed_for(user, "http://127.0.0.1/drain.xml")
    hooks = [TargetInput("webhook", f"http://127.0.0.1:{rx.port}/drain/{i}", ("captured",))
             for i in range(targets)]
    profile = await store.create_profile(user, "drain", [RuleInput("r", {}, (reg.feed.id,))], notify=hooks)
    target_ids = [t.id for t in profile.new_targets]
    payload = '{"version":1,"type":"captured","event_id":0,"bench":"' + "x" * 600 + '"}'
    now = dt.datetime.now(dt.UTC)
    chunk = 5000
    async with store.engine.begin() as conn:
        for start in range(0, backlog, chunk):
            n = min(chunk, backlog - start)
            ids = list((await conn.execute(
                insert(NotificationEventRow).returning(NotificationEventRow.id, sort_by_parameter_order=True),
                [{"user_id": user, "profile_id": profile.id, "cei_id": f"drain:{start + i}",
                  "type": "captured", "payload": payload, "created_at": now} for i in range(n)])).scalars())
            await conn.execute(insert(DeliveryRow), [
                {"event_id": e, "target_id": target_ids[(start + i) % targets],
                 "msg_id": "msg_" + secrets.token_urlsafe(12), "state": "pending",
                 "next_attempt_at": now, "window_start": now, "created_at": now}
                for i, e in enumerate(ids)])
    before = rx.count
    metrics = ServiceMetrics()
    dispatcher = _dispatcher(store, metrics)
    began = time.perf_counter()
    dispatcher.start()
    while await store.outbox_backlog() > 0:  # noqa: ASYNC110 (polling the database is the point)
        await asyncio.sleep(0.25)
    elapsed = time.perf_counter() - began
    await dispatcher.stop()
    await store.close()
    return {"backlog": backlog, "targets": targets, "seconds": elapsed,
            "per_second": backlog / elapsed, "requests": rx.count - before}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'bench.sqlite3'}"
        await upgrade_database(url)
        rx = Receiver()
        await rx.start()
        try:
            lat = await latency(url, rx, args.rate, args.seconds)
            print(f"latency: {lat['resolved']} CEIs resolved at {lat['rate']:.0f}/s, "
                  f"{lat['delivered']} delivered; resolution→2xx p50 {lat['p50'] * 1000:.1f} ms, "
                  f"p99 {lat['p99'] * 1000:.1f} ms, max {lat['max'] * 1000:.1f} ms")
            dr = await drain(url, rx, args.backlog, args.targets)
            print(f"drain: {dr['backlog']} deliveries over {dr['targets']} targets in "
                  f"{dr['seconds']:.1f} s = {dr['per_second']:.0f}/s ({dr['requests']} requests)")
        finally:
            await rx.stop()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.2f}, {dt.datetime.now(dt.UTC):%Y-%m-%d}")


if __name__ == "__main__":
    asyncio.run(main())
