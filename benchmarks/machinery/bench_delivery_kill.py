"""Delivery under ``kill -9`` (issue 19): no notification lost, duplicates only with the same id.

Writes the section between ``<!-- bench_delivery_kill:begin -->`` and
``<!-- bench_delivery_kill:end -->`` of docs/notifications.md (``--write``).

A real ``proxy serve`` subprocess (short chronons, a 1 s lease TTL so the
restarted process takes over quickly: it is a standby until the killed one's
lease expires) runs profiles whose rank-1 rules resolve a CEI every second on
each of ``--feeds`` feeds of the local feed farm, every resolution notifying two
webhooks on a receiver in this process. The receiver records every request's
``webhook-id`` and body, verifies its signature with the ``standardwebhooks``
package, answers after up to 0.2 s (so kills find requests on the wire), and
cycles through up (204), failing (500) and down (its listener stopped:
connection refused), a few seconds each. The service is killed with SIGKILL
``--kills`` times, at a random moment after it became ready (or, for a fifth
of the restarts, while it is still starting: importing, a standby waiting for
the lease, or restoring), and started again each time. Then, with the receiver up for good, the profiles are
replaced by ones that notify nobody (no new deliveries), the outbox drains, the
service is stopped, and the database is compared with what was received:

- *lost*: a delivery row for the webhooks whose ``webhook-id`` was never
  answered with a 2xx (a row still pending at the end counts as lost);
- *duplicates*: 2xx answers beyond the first for one ``webhook-id``; each must
  carry the same body (the row's event document, byte for byte);
- *other-id duplicates*: one CEI notified to one webhook under two ids (must be 0);
- every resolved CEI has its event (the outbox row written with the resolution).

Run it from the top of the checkout; ``--postgres ADMIN_URL`` also runs it on
a fresh PostgreSQL database (created and dropped here). The whole run stops by
itself (``--max-seconds``). tests/test_e2e_delivery_sigkill.py runs a short
version (SQLite, three kills).

Usage: .venv/bin/python benchmarks/machinery/bench_delivery_kill.py [--kills 10] [--postgres postgresql+asyncpg://postgres@127.0.0.1:5432/postgres] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import random
import shlex
import signal
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _procs import kill as kill_process  # beside this script: a child may already be gone
from _procs import stop as stop_process
from aiohttp import web
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from standardwebhooks.webhooks import Webhook

from proxy.farm import FeedFarm
from proxy.ports import free_port
from proxy.store._models import (
    CeiRow,
    ChrononMetricsRow,
    DeliveryRow,
    EiRow,
    NotificationEventRow,
    NotifyTargetRow,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "notifications.md"
BEGIN, END = "<!-- bench_delivery_kill:begin -->", "<!-- bench_delivery_kill:end -->"
HOOKS = ("a", "b")


class BenchError(RuntimeError):
    """The run could not go on (the service did not start, the drain timed out …)."""


@dataclass(frozen=True, slots=True)
class KillRun:
    """One run's settings."""

    database_url: str
    workdir: Path
    kills: int = 10
    feeds: int = 4
    #: Seconds between the service becoming ready and its kill: uniform in this range.
    kill_after: tuple[float, float] = (0.5, 6.0)
    #: Share of the restarts killed while starting (uniform in ``start_kill`` seconds after the
    #: spawn: importing, waiting for the lease as a standby, or restoring).
    early: float = 0.2
    start_kill: tuple[float, float] = (1.0, 3.5)
    #: Seconds each receiver phase (up, failing, down) lasts: uniform in this range.
    phase: tuple[float, float] = (1.5, 4.0)
    #: Seconds of steady running (receiver up and down) after the last restart, before the drain.
    settle: float = 3.0
    #: Most seconds the receiver waits before answering (uniform from 0).
    latency: float = 0.2
    drain_timeout: float = 60.0
    max_seconds: float = 300.0
    seed: int = 19


@dataclass(frozen=True, slots=True)
class Request:
    """One request the receiver got: its ``webhook-id``, body, answer and hook."""

    msg_id: str
    body: bytes
    status: int
    hook: str
    verified: bool


@dataclass
class PhasedReceiver:
    """Webhooks ``/hook/a`` and ``/hook/b`` on 127.0.0.1; answers per its phase: ``up``
    (204), ``failing`` (500), ``down`` (listener stopped: connection refused)."""

    port: int
    rng: random.Random
    #: Seconds before each answer: uniform in [0, latency] (a kill then often finds requests
    #: on the wire, whose rows are sent again after the restart).
    latency: float = 0.2
    secrets: dict[str, str] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    phase: str = "up"
    phases: int = 0
    _runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        hook = request.match_info["hook"]
        headers = {k.lower(): v for k, v in request.headers.items()}
        verified = False
        secret = self.secrets.get(hook)
        if secret is not None:
            with contextlib.suppress(Exception):  # any failure to verify is counted, not raised
                Webhook(secret).verify(body, headers)
                verified = True
        await asyncio.sleep(self.rng.uniform(0, self.latency))
        status = 204 if self.phase == "up" else 500
        self.requests.append(Request(headers.get("webhook-id", ""), body, status, hook, verified))
        return web.Response(status=status)

    async def listen(self) -> None:
        if self._runner is not None:
            return
        app = web.Application()
        app.router.add_post("/hook/{hook}", self._handle)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True).start()
        self._runner = runner

    async def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.phases += 1
        if phase == "down":
            await self.close()
        else:
            await self.listen()

    async def cycle(self, rng: random.Random, span: tuple[float, float]) -> None:
        """Up, failing, up, down, … until cancelled."""
        order = ("failing", "up", "down", "up")
        i = 0
        while True:
            await asyncio.sleep(rng.uniform(*span))
            await self.set_phase(order[i % len(order)])
            i += 1

    def url(self, hook: str) -> str:
        return f"http://127.0.0.1:{self.port}/hook/{hook}"


@dataclass(frozen=True, slots=True)
class Audit:
    """The database compared with what the receiver got."""

    backend: str
    kills: int
    early_kills: int
    seconds: float
    ceis_resolved: int
    events: int
    events_missing: int
    deliveries: int
    requests: int
    received: int
    duplicates: int
    body_mismatches: int
    other_id_duplicates: int
    unknown_ids: int
    unverified: int
    lost: int
    not_delivered: int
    stuck_ceis: int
    max_attempts: int
    phases: int

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.events_missing == 0 and self.body_mismatches == 0
                and self.other_id_duplicates == 0 and self.unknown_ids == 0
                and self.unverified == 0 and self.not_delivered == 0 and self.stuck_ceis == 0)



def service_env(database_url: str) -> dict[str, str]:
    """``proxy serve``'s environment: short chronons and lease, fast retries."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    env.update({
        "PROXY_DATABASE_URL": database_url,
        "PROXY_CHRONON_SECONDS": "0.1",
        "PROXY_BUDGET": "8",
        "PROXY_POLICY": "mrsf-p",
        "PROXY_ALLOW_PRIVATE_NETWORKS": "true",
        "PROXY_PER_HOST_CONCURRENCY": "50",
        "PROXY_PER_HOST_MIN_DELAY_SECONDS": "0",
        "PROXY_RESPECT_CACHE_HINTS": "false",
        "PROXY_RETENTION_DAYS": "0",
        "PROXY_LOG_FORMAT": "json",
        # The killed process never releases the lease: the restart waits as a standby until
        # it expires, so keep it short.
        "PROXY_LEASE_TTL_SECONDS": "1",
        "PROXY_DELIVERY_RETRY_BASE_SECONDS": "0.2",
        "PROXY_DELIVERY_RETRY_MAX_SECONDS": "2",
        "PROXY_DELIVERY_TIMEOUT_SECONDS": "2",
        "PROXY_DELIVERY_POLL_SECONDS": "0.5",
    })
    return env


async def _cli(env: dict[str, str], *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy.cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise BenchError(f"proxy {' '.join(args)} failed: {err.decode()[-2000:]}")
    return out.decode()


@contextlib.asynccontextmanager
async def serving(env: dict[str, str], port: int, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """``proxy serve`` as a subprocess; SIGTERM (then SIGKILL) on leaving if still alive."""
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy.cli", "serve", "--port", str(port), env=env,
            stdout=sink, stderr=sink)
    try:
        yield proc
    finally:
        await stop_process(proc, signal.SIGTERM, grace=15)  # nothing to do for one already gone


async def ready(api: httpx.AsyncClient, proc: asyncio.subprocess.Process, within: float) -> None:
    """Until ``/readyz`` answers 200 (the process leads: the killed one's lease expired)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise BenchError(f"proxy serve exited with {proc.returncode} before it was ready")
        with contextlib.suppress(httpx.TransportError):
            if (await api.get("/readyz")).status_code == 200:
                return
        await asyncio.sleep(0.1)
    raise BenchError(f"proxy serve not ready within {within} s")


def profile(feed: int, targets: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A rank-1 rule on ``feed`` every second (one CEI a second), notifying ``targets``."""
    return {
        "name": f"feed {feed}",
        "notify": targets or [],
        "rules": [{"name": "tick", "trigger": {"feed": str(feed), "every": "1s", "slack": "1s"},
                   "query": [{"feed": str(feed), "within": "1s"}]}],
    }


async def run(cfg: KillRun) -> Audit:
    """One run (see the module's docstring); stops by itself within ``cfg.max_seconds``."""
    return await asyncio.wait_for(_run(cfg), cfg.max_seconds)


async def _run(cfg: KillRun) -> Audit:
    rng = random.Random(cfg.seed)
    env = service_env(cfg.database_url)
    began = time.monotonic()
    key = (await _cli(env, "users", "create", "bench")).strip().splitlines()[-1]
    port = free_port()
    log = cfg.workdir / f"serve-{make_url(cfg.database_url).get_backend_name()}.log"
    rx = PhasedReceiver(free_port(), random.Random(rng.random()), cfg.latency)
    await rx.listen()
    names = [f"f{i}" for i in range(cfg.feeds)]
    hooks = [{"webhook": rx.url(h), "events": ["captured", "missed"]} for h in HOOKS]
    profiles: dict[int, int] = {}
    cycling: asyncio.Task[None] | None = None
    early = 0
    async with FeedFarm(names, prefill=2) as farm, httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}, timeout=10
    ) as api:
        try:
            for kill in range(cfg.kills + 1):
                async with serving(env, port, log) as proc:
                    if 0 < kill < cfg.kills and rng.random() < cfg.early:
                        await asyncio.sleep(rng.uniform(*cfg.start_kill))
                        early += 1
                        await kill_process(proc)
                        continue
                    await ready(api, proc, within=60)
                    if kill == 0:
                        for name in names:
                            feed = await _ok(api.post("/api/v1/feeds", json={"url": farm.url(name)}))
                            made = await _ok(api.post("/api/v1/profiles", json=profile(feed["id"], hooks)))
                            profiles[made["id"]] = feed["id"]
                            for target in made["new_targets"]:
                                rx.secrets[target["url"].rsplit("/", 1)[1]] = target["secret"]
                        cycling = asyncio.create_task(rx.cycle(rng, cfg.phase))
                    if kill == cfg.kills:
                        await asyncio.sleep(cfg.settle)
                        await _drain(api, rx, profiles, cycling, cfg.drain_timeout)
                        cycling = None
                        break
                    await asyncio.sleep(rng.uniform(*cfg.kill_after))
                    await kill_process(proc)  # SIGKILL: no shutdown code runs
        finally:
            if cycling is not None:
                cycling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await cycling
            await rx.close()
    return await audit(cfg, rx, time.monotonic() - began, early)


async def _ok(response: Any) -> Any:
    r = await response
    if r.status_code >= 300:
        raise BenchError(f"{r.request.method} {r.request.url} answered {r.status_code}: {r.text}")
    return r.json()


async def _drain(
    api: httpx.AsyncClient, rx: PhasedReceiver, profiles: dict[int, int],
    cycling: asyncio.Task[None] | None, within: float,
) -> None:
    """Receiver up for good; profiles replaced by ones that notify nobody (no new rows);
    until no delivery is pending."""
    if cycling is not None:
        cycling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await cycling
    await rx.set_phase("up")
    for pid, feed in profiles.items():
        await _ok(api.put(f"/api/v1/profiles/{pid}", json=profile(feed, None)))
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        pending = await _ok(api.get("/api/v1/deliveries", params={"state": "pending", "limit": 1}))
        if not pending["items"]:
            return
        await asyncio.sleep(0.25)
    raise BenchError(f"deliveries still pending {within} s after the receiver came up for good")


async def audit(cfg: KillRun, rx: PhasedReceiver, seconds: float, early: int = 0) -> Audit:
    """Read the database (the service is stopped) and compare it with the receiver's log."""
    engine = create_async_engine(cfg.database_url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(
                select(DeliveryRow.msg_id, DeliveryRow.state, DeliveryRow.attempts,
                       NotificationEventRow.cei_id, NotificationEventRow.payload,
                       NotifyTargetRow.url)
                .join(NotificationEventRow, NotificationEventRow.id == DeliveryRow.event_id)
                .join(NotifyTargetRow, NotifyTargetRow.id == DeliveryRow.target_id)
            )).all()
            resolved = (await conn.execute(
                select(func.count()).select_from(CeiRow)
                .where(CeiRow.state.in_(("captured", "missed"))))).scalar_one()
            missing = (await conn.execute(
                select(func.count()).select_from(CeiRow)
                .outerjoin(NotificationEventRow, NotificationEventRow.cei_id == CeiRow.id)
                .where(CeiRow.state.in_(("captured", "missed")),
                       NotificationEventRow.id.is_(None)))).scalar_one()
            # A CEI left pending long after its last window closed would never notify anyone.
            last = (await conn.execute(select(func.max(ChrononMetricsRow.chronon)))).scalar_one()
            windows = (
                select(EiRow.cei_id, func.max(EiRow.finish).label("finish"))
                .group_by(EiRow.cei_id).subquery())
            stuck = (await conn.execute(
                select(func.count()).select_from(CeiRow)
                .join(windows, windows.c.cei_id == CeiRow.id)
                .where(CeiRow.state == "pending", windows.c.finish < (last or 0) - 10)
            )).scalar_one()
    finally:
        await engine.dispose()
    by_id = {r.msg_id: r for r in rows}
    acked: dict[str, int] = defaultdict(int)
    bodies: dict[str, set[bytes]] = defaultdict(set)
    ids_per_cei: dict[tuple[str, str], set[str]] = defaultdict(set)
    for q in rx.requests:
        bodies[q.msg_id].add(q.body)
        if 200 <= q.status < 300:
            acked[q.msg_id] += 1
        with contextlib.suppress(ValueError, KeyError, TypeError):
            ids_per_cei[(q.hook, json.loads(q.body)["cei"]["id"])].add(q.msg_id)
    mismatched = sum(
        1 for m, seen in bodies.items()
        if len(seen) > 1 or (m in by_id and seen != {by_id[m].payload.encode()}))
    return Audit(
        backend=make_url(cfg.database_url).get_backend_name(),
        kills=cfg.kills,
        early_kills=early,
        seconds=seconds,
        ceis_resolved=resolved,
        events=len({r.cei_id for r in rows}),
        events_missing=missing,
        deliveries=len(rows),
        requests=len(rx.requests),
        received=len(acked),
        duplicates=sum(n - 1 for n in acked.values()),
        body_mismatches=mismatched,
        other_id_duplicates=sum(1 for ids in ids_per_cei.values() if len(ids) > 1),
        unknown_ids=sum(1 for m in bodies if m not in by_id),
        unverified=sum(1 for q in rx.requests if not q.verified),
        lost=sum(1 for m in by_id if m not in acked),
        not_delivered=sum(1 for r in rows if r.state != "delivered"),
        stuck_ceis=stuck,
        max_attempts=max((r.attempts for r in rows), default=0),
        phases=rx.phases,
    )


def describe(a: Audit) -> str:
    return (f"{a.backend}: {a.kills} kills ({a.early_kills} while starting) in {a.seconds:.0f} s, {a.phases} receiver phases; "
            f"{a.ceis_resolved} CEIs resolved, {a.events} events ({a.events_missing} without one), "
            f"{a.deliveries} deliveries; {a.requests} requests, {a.received} ids acknowledged, "
            f"{a.duplicates} duplicates ({a.body_mismatches} with another body, "
            f"{a.other_id_duplicates} under another id), {a.unknown_ids} unknown ids, "
            f"{a.unverified} unverified; lost {a.lost}, not delivered {a.not_delivered}, "
            f"{a.stuck_ceis} CEIs stuck pending; "
            f"max attempts {a.max_attempts}: {'OK' if a.ok else 'FAILED'}")


def table(audits: list[Audit], command: str) -> str:
    date = f"{dt.datetime.now(dt.UTC):%Y-%m-%d}"
    lines = [
        f"`{command}` ({date}, {platform.machine()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}):",
        "",
        "| database | kills (while starting) | run | CEIs resolved | events (without) | deliveries | requests "
        "| ids acknowledged | duplicates (other body / other id) | lost | max attempts |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {a.backend} | {a.kills} ({a.early_kills}) | {a.seconds:.0f} s | {a.ceis_resolved} | {a.events} "
        f"({a.events_missing}) | {a.deliveries} | {a.requests} | {a.received} | {a.duplicates} "
        f"({a.body_mismatches} / {a.other_id_duplicates}) | **{a.lost}** | {a.max_attempts} |"
        for a in audits
    ]
    return "\n".join(lines) + "\n"


def write(section: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    DOC.write_text(f"{before}{BEGIN}\n{section}{END}{after}", encoding="utf-8")


@contextlib.asynccontextmanager
async def postgres_database(admin_url: str) -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database for one run, dropped afterwards."""
    import asyncpg

    name = f"proxy_bench_kill_{uuid.uuid4().hex[:12]}"
    dsn = admin_url.replace("postgresql+asyncpg://", "postgresql://", 1)
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        conn = await asyncpg.connect(dsn, timeout=5)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--feeds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--postgres", metavar="ADMIN_URL", default=None,
                        help="also run on a fresh database created through this URL")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--write", action="store_true", help=f"write the section into {DOC.name}")
    args = parser.parse_args()
    audits: list[Audit] = []
    with tempfile.TemporaryDirectory(prefix="bench-kill-") as tmp:
        work = Path(tmp)
        urls: list[tuple[str, contextlib.AbstractAsyncContextManager[str] | None]] = []
        if not args.no_sqlite:
            urls.append((f"sqlite+aiosqlite:///{work / 'proxy.sqlite3'}", None))
        if args.postgres:
            urls.append(("", postgres_database(args.postgres)))
        for url, maker in urls:
            async with maker or contextlib.nullcontext(url) as database_url:
                cfg = KillRun(database_url, work, kills=args.kills, feeds=args.feeds,
                              seed=args.seed, max_seconds=args.max_seconds)
                a = await run(cfg)
            print(describe(a), flush=True)
            audits.append(a)
    argv = " ".join(shlex.quote(x) for x in sys.argv[1:] if x != "--write")
    command = f".venv/bin/python benchmarks/machinery/bench_delivery_kill.py {argv}".strip()
    if args.write:
        write(table(audits, command))
    print(table(audits, command))
    return 0 if all(a.ok for a in audits) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
