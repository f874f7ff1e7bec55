"""Crash consistency and database outages of ``proxy serve`` (issue 24.1, 24.2).

Writes the sections between ``<!-- bench_crash:begin -->`` / ``<!-- bench_crash:end -->``
and ``<!-- bench_outage:begin -->`` / ``<!-- bench_outage:end -->`` of docs/operations.md
(``--write``).

``kill``: a real ``proxy serve`` subprocess (budget ``--budget`` per ``--chronon``
seconds, ``mrsf-p``) probes ``--feeds`` feeds of the local feed farm, which publish
all the time; ``--profiles`` profiles each fire a two-feed rule every ``--every``,
and ``--one-rule`` more profiles hold one rank-1 rule each firing every
``--one-rule-every``. After ``--steady`` seconds of steady state (budget spent, the
writer's backlog sampled from ``/metrics``) the service is killed with SIGKILL
``--kills`` times, at a random moment 3 to 8 s after it became ready, and started
again each time; between kills a client creates two more profiles (acknowledged
= answered 201). At the end it is stopped with SIGTERM (its backlog drained) and
the database is audited:

- *refused*: ``persist_refused``, ``op_refused`` and ``writer_round_failed`` log lines
  (a firing the engine or the database refused: each is a firing dropped);
- *id gaps*: per rule, CEI ids that are not exactly ``0..n-1`` (an id handed out twice,
  or a CEI decided and lost);
- *violations*: ``Store.audit`` (``proxy db check``);
- *lost*: acknowledged profiles missing from the database;
- *back at budget*: for each restart, chronons from the first one the restarted process
  ticked (its ``loop_started`` log line) to the first whose probes **stored** in the
  database reach the steady state's median of stored probes per chronon (the budget when
  the rules' demand exceeds it, as with 1,500 one-rule profiles). Probes, not the chronon
  row's ``used``: a row can commit while its chronon's probes are still in flight, and a
  kill then loses them. A chronon the process did not tick, or whose rows a kill lost,
  counts as not at budget.

``outage``: the same service with ``--profiles`` profiles runs through a TCP proxy
(tests/fault_proxy.py) in front of PostgreSQL; the proxy cuts every connection for
``--seconds`` seconds and lets them through again. Sampled every 0.25 s: ``/readyz``
and ``/metrics``. Reported: the share of samples answering 503 during the cut, the
seconds from the end of the cut to ``/readyz`` 200, chronons ticked and probes made
during the cut and how many of them are in the database afterwards, the largest
backlog, and ``proxy db check``.

Run it from the top of the checkout; ``--postgres ADMIN_URL`` runs on a fresh
PostgreSQL database (created and dropped here), otherwise ``kill`` runs on SQLite.
The machine is shared: figures carry the load average at the start.

Usage:
  .venv/bin/python benchmarks/machinery/bench_crash.py kill [--kills 10] [--one-rule 1500] [--postgres URL] [--write]
  .venv/bin/python benchmarks/machinery/bench_crash.py outage --postgres postgresql+asyncpg://postgres@127.0.0.1:5432/postgres [--write]
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
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

# After the path set-up above: these two live beside this script.
from _procs import kill as kill_process  # noqa: E402 -- tolerates a child already gone
from bench_delivery_kill import (  # noqa: E402
    BenchError,
    _cli,
    free_port,
    postgres_database,
    serving,
)

from proxy.farm import FeedFarm  # noqa: E402
from proxy.store import Store  # noqa: E402
from proxy.store._models import CeiRow, ChrononMetricsRow, ProbeRow  # noqa: E402
from tests.fault_proxy import FaultProxy  # noqa: E402

DOC = ROOT / "docs" / "operations.md"


def env_for(url: str, chronon: float, budget: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    env.update({
        "PROXY_DATABASE_URL": url,
        "PROXY_CHRONON_SECONDS": str(chronon),
        "PROXY_BUDGET": str(budget),
        "PROXY_POLICY": "mrsf-p",
        "PROXY_ALLOW_PRIVATE_NETWORKS": "true",
        "PROXY_PER_HOST_CONCURRENCY": "200",
        "PROXY_PER_HOST_MIN_DELAY_SECONDS": "0",
        "PROXY_RESPECT_CACHE_HINTS": "false",
        "PROXY_RETENTION_DAYS": "0",
        "PROXY_LOG_FORMAT": "json",
        "PROXY_LEASE_TTL_SECONDS": "4",
    })
    return env


def metric(text: str, name: str) -> float:
    """The sum of a metric's samples (all labels); ``name`` exactly, not names it prefixes."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith((f"{name} ", f"{name}{{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def log_events(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def first_ticked(log: Path, offset: int) -> int:
    """The first chronon the process whose log starts at ``offset`` ticked (``loop_started``).

    Not ``/readyz``'s chronon: that is the current one when readiness is first seen, a
    chronon or more after the first tick under load, and the chronons between would not be
    counted."""
    with log.open("rb") as f:
        f.seek(offset)
        for line in f:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("event") == "loop_started":
                    return int(event["chronon"])
    raise BenchError("the restarted process logged no loop_started line")


async def ready(api: httpx.AsyncClient, proc: asyncio.subprocess.Process, within: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < within:
        if proc.returncode is not None:
            raise BenchError(f"proxy serve exited with {proc.returncode} before it was ready")
        with contextlib.suppress(httpx.TransportError):
            if (await api.get("/readyz")).status_code == 200:
                return time.monotonic() - began
        await asyncio.sleep(0.1)
    raise BenchError(f"proxy serve not ready within {within} s")


def two_feed(i: int, a: int, b: int, every: str) -> dict[str, Any]:
    return {"name": f"p{i}", "rules": [
        {"name": "tick", "trigger": {"feed": str(a), "every": every, "slack": every},
         "query": [{"feed": str(b), "within": every}]}]}


def one_rule(i: int, a: int, every: str) -> dict[str, Any]:
    return {"name": f"o{i}", "rules": [
        {"name": "tick", "trigger": {"feed": str(a), "every": every, "slack": every},
         "query": [{"feed": str(a), "within": every}]}]}


async def publisher(farm: FeedFarm, n: int, rng: random.Random, stop: asyncio.Event,
                    per_second: float) -> None:
    words = ["Oil up", "Rain", "Oil down", "Sun", "Markets"]
    while not stop.is_set():
        farm.publish(f"f{rng.randrange(n)}", title=rng.choice(words))
        await asyncio.sleep(1 / per_second)


async def sampler(api: httpx.AsyncClient, out: list[tuple[float, int, float, float, float]],
                  stop: asyncio.Event) -> None:
    """(time, /readyz status, chronon, probes_total, backlog) every 0.25 s."""
    while not stop.is_set():
        now = time.monotonic()
        try:
            status = (await api.get("/readyz")).status_code
            text = (await api.get("/metrics")).text
            out.append((now, status, metric(text, "proxy_chronon"),
                        metric(text, "proxy_probes_total"), metric(text, "proxy_write_backlog")))
        except httpx.TransportError:
            out.append((now, 0, 0.0, 0.0, 0.0))
        await asyncio.sleep(0.25)


@dataclass
class KillResult:
    backend: str
    feeds: int
    profiles: int
    one_rule: int
    budget: int
    chronon: float
    kills: int = 0
    ceis: int = 0
    refused: int = 0
    id_gaps: int = 0
    violations: int = 0
    acknowledged: int = 0
    lost: int = 0
    back_at_budget: list[int] = field(default_factory=list)
    ready_seconds: list[float] = field(default_factory=list)
    steady_spent: float = 0.0
    steady_backlog_max: float = 0.0
    steady_probes_per_s: float = 0.0
    steady_target: int = 0
    #: (chronon row's ``used`` or None without a row, probes stored) of each restart's first chronons
    after_restart: list[list[tuple[int | None, int]]] = field(default_factory=list)
    leases_lost: int = 0  # a process that lost its own lease (a renewal too late): a restore more


async def create_all(api: httpx.AsyncClient, bodies: list[dict[str, Any]]) -> list[int]:
    sem = asyncio.Semaphore(8)

    async def one(body: dict[str, Any]) -> int:
        async with sem:
            for _ in range(120):  # 503: the database was busy (SQLite's lock) or a lease lapsed
                r = await api.post("/api/v1/profiles", json=body)
                if r.status_code != 503:
                    break
                await asyncio.sleep(0.5)
            if r.status_code != 201:
                raise BenchError(f"profile refused: {r.status_code} {r.text[:300]}")
            return int(r.json()["id"])

    return list(await asyncio.gather(*(one(b) for b in bodies)))


async def kill_run(args: argparse.Namespace, url: str, workdir: Path) -> KillResult:
    rng = random.Random(args.seed)
    backend = make_url(url).get_backend_name()
    res = KillResult(backend, args.feeds, args.profiles, args.one_rule, args.budget, args.chronon)
    env = env_for(url, args.chronon, args.budget)
    key = (await _cli(env, "users", "create", "bench")).strip().splitlines()[-1]
    port = free_port()
    log = workdir / f"crash-{backend}-{args.one_rule}.log"
    acknowledged: set[int] = set()
    restarts: list[int] = []
    stop = asyncio.Event()
    async with FeedFarm([f"f{i}" for i in range(args.feeds)], prefill=2) as farm, httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    ) as api:
        pub = asyncio.create_task(publisher(farm, args.feeds, rng, stop, args.publish_per_second))
        feeds: list[int] = []
        try:
            for cycle in range(args.kills + 1):
                offset = log.stat().st_size if log.exists() else 0
                async with serving(env, port, log) as proc:
                    res.ready_seconds.append(await ready(api, proc, 120))
                    restarts.append(first_ticked(log, offset))
                    if not feeds:
                        feeds = [(await api.post("/api/v1/feeds", json={"url": farm.url(f"f{i}")}))
                                 .json()["id"] for i in range(args.feeds)]
                        bodies = [two_feed(i, feeds[i % len(feeds)], feeds[(i + 1) % len(feeds)],
                                           args.every) for i in range(args.profiles)]
                        bodies += [one_rule(i, feeds[i % len(feeds)], args.one_rule_every)
                                   for i in range(args.one_rule)]
                        acknowledged.update(await create_all(api, bodies))
                        samples: list[tuple[float, int, float, float, float]] = []
                        done = asyncio.Event()
                        task = asyncio.create_task(sampler(api, samples, done))
                        await asyncio.sleep(args.steady)
                        done.set()
                        await task
                        res.steady_backlog_max = max(s[4] for s in samples)
                        if len(samples) > 1:
                            res.steady_probes_per_s = (samples[-1][3] - samples[0][3]) / (
                                samples[-1][0] - samples[0][0])
                    for i in range(2):
                        with contextlib.suppress(httpx.TransportError):
                            r = await api.post("/api/v1/profiles", json=two_feed(
                                10_000 + cycle * 2 + i, feeds[rng.randrange(len(feeds))],
                                feeds[rng.randrange(len(feeds))], args.every))
                            if r.status_code == 201:
                                acknowledged.add(int(r.json()["id"]))
                    if cycle == args.kills:
                        await asyncio.sleep(5)
                        break
                    await asyncio.sleep(rng.uniform(3, 8))
                    await kill_process(proc)  # it may have died by itself meanwhile
                    res.kills += 1
        finally:
            stop.set()
            await pub
    events = log_events(log)
    res.refused = sum(e.get("event") in {"persist_refused", "op_refused", "writer_round_failed"}
                      for e in events)
    res.leases_lost = sum(e.get("event") == "lease_lost" for e in events)
    async with Store.from_url(url) as store:
        report = await store.audit()
        res.violations = len(report.violations)
        stored = {p.id for p in await store.all_profiles()}
        async with store.engine.connect() as conn:
            rows = (await conn.execute(select(CeiRow.id, CeiRow.rule_id))).all()
            used = dict((await conn.execute(
                select(ChrononMetricsRow.chronon, ChrononMetricsRow.used))).all())
            probed = dict((await conn.execute(
                select(ProbeRow.chronon, func.count()).group_by(ProbeRow.chronon))).all())
            cutoff = restarts[1] if len(restarts) > 1 else max(used, default=0) + 1
            steady = (await conn.execute(select(ChrononMetricsRow.used, ChrononMetricsRow.budget)
                                         .where(ChrononMetricsRow.chronon < cutoff))).all()
    res.ceis = len(rows)
    by_rule: dict[int | None, list[int]] = {}
    for cei_id, rule_id in rows:
        by_rule.setdefault(rule_id, []).append(int(cei_id.split(":")[1]))
    res.id_gaps = sum(len(set(range(len(s))) ^ set(s)) + len(s) - len(set(s))
                      for s in by_rule.values())
    res.acknowledged = len(acknowledged)
    res.lost = len(acknowledged - stored)
    res.steady_spent = (sum(u for u, _ in steady) / max(1, sum(b for _, b in steady)))
    # "Full budget": the probes the steady state stored per chronon (the median), at most the
    # budget: with few CEIs due, the rules' demand, not the budget, limits probing.
    steady_probed = sorted(probed.get(c, 0) for c in used if c < cutoff) or [args.budget]
    res.steady_target = min(args.budget, max(1, steady_probed[len(steady_probed) // 2]))
    top = max(used) if used else 0
    for first in restarts[1:]:
        t = next((c for c in range(first, top + 1) if probed.get(c, 0) >= res.steady_target), None)
        res.back_at_budget.append(-1 if t is None else t - first)
        # What each restart's first chronons spent and stored ("-": no row, lost in the next kill).
        res.after_restart.append([(used.get(c), probed.get(c, 0)) for c in range(first, first + 12)])
    if args.keep_log:
        await asyncio.to_thread(shutil.copyfile, log, args.keep_log)
    return res


@dataclass
class OutageResult:
    seconds: float
    feeds: int
    profiles: int
    budget: int
    chronon: float
    unready_share: float = 0.0
    ready_after: float = 0.0
    ticked: int = 0
    ticks_stored: int = 0
    probes: int = 0
    probes_stored: int = 0
    backlog_max: float = 0.0
    violations: int = 0
    dropped_lines: int = 0


async def outage_run(args: argparse.Namespace, url: str, workdir: Path) -> OutageResult:
    rng = random.Random(args.seed)
    res = OutageResult(args.seconds, args.feeds, args.profiles, args.budget, args.chronon)
    async with FaultProxy(("127.0.0.1", make_url(url).port or 5432)) as pg:
        through = make_url(url).set(host="127.0.0.1", port=pg.port).render_as_string(
            hide_password=False)
        env = env_for(through, args.chronon, args.budget)
        env["PROXY_LEASE_TTL_SECONDS"] = str(3 * args.seconds)  # the lease must outlive the cut
        key = (await _cli(env, "users", "create", "bench")).strip().splitlines()[-1]
        port = free_port()
        log = workdir / "outage.log"
        stop = asyncio.Event()
        async with FeedFarm([f"f{i}" for i in range(args.feeds)], prefill=2) as farm, \
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                  headers={"Authorization": f"Bearer {key}"}, timeout=10) as api, \
                serving(env, port, log) as proc:
            pub = asyncio.create_task(publisher(farm, args.feeds, rng, stop, args.publish_per_second))
            await ready(api, proc, 60)
            feeds = [(await api.post("/api/v1/feeds", json={"url": farm.url(f"f{i}")}))
                     .json()["id"] for i in range(args.feeds)]
            await create_all(api, [two_feed(i, feeds[i % len(feeds)], feeds[(i + 1) % len(feeds)],
                                            args.every) for i in range(args.profiles)])
            await asyncio.sleep(args.steady)
            samples: list[tuple[float, int, float, float, float]] = []
            done = asyncio.Event()
            task = asyncio.create_task(sampler(api, samples, done))
            await asyncio.sleep(1)
            cut_at = time.monotonic()
            pg.cut()
            await asyncio.sleep(args.seconds)
            pg.restore()
            back_at = time.monotonic()
            res.ready_after = await ready(api, proc, 120)
            while metric((await api.get("/metrics")).text, "proxy_write_backlog") > 0:  # noqa: ASYNC110 -- polling another process
                await asyncio.sleep(0.25)
            done.set()
            await task
            stop.set()
            await pub
        during = [s for s in samples if cut_at + 1 <= s[0] <= back_at]
        res.unready_share = sum(s[1] == 503 for s in during) / max(1, len(during))
        before = max((s for s in samples if s[0] < cut_at), key=lambda s: s[0])
        after = min((s for s in samples if s[0] >= back_at), key=lambda s: s[0])
        first, last = int(before[2]) + 1, int(after[2])
        res.ticked = last - first + 1
        res.probes = int(after[3] - before[3])
        res.backlog_max = max(s[4] for s in samples)
    async with Store.from_url(url) as store:
        res.violations = len((await store.audit()).violations)
        async with store.engine.connect() as conn:
            res.ticks_stored = len((await conn.execute(select(ChrononMetricsRow.chronon).where(
                ChrononMetricsRow.chronon >= first, ChrononMetricsRow.chronon <= last))).all())
            res.probes_stored = len((await conn.execute(select(ProbeRow.id).where(
                ProbeRow.chronon >= first, ProbeRow.chronon <= last))).all())
    res.dropped_lines = sum(e.get("event") in {"persist_failed", "writer_stopped_with_backlog"}
                            for e in log_events(log))
    return res


def header(command: str, load: float) -> str:
    """``load``: the one-minute load average when the run started (read then, not here: a
    table is rendered after its run, whose own processes weigh on the figure by then)."""
    return (f"Measured {dt.date.today().isoformat()} on {platform.node()} "
            f"({os.cpu_count()} cores shared with other engineers' runs; load average "
            f"{load:.1f} at the start) with\n`{command}`.\n")


def kill_table(results: list[KillResult], command: str, load: float) -> str:
    lines = [header(command, load),
             "| database | feeds | profiles (two-feed / one-rule) | budget | kills | CEIs | "
             "refused | id gaps | `db check` violations | acknowledged lost | chronons back at "
             "steady probing (max; per restart) | ready after start (max s) | steady: budget "
             "spent, probes/s, median probes per chronon, backlog max |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        back = max(r.back_at_budget) if r.back_at_budget else 0
        lines.append(
            f"| {r.backend} | {r.feeds} | {r.profiles} / {r.one_rule} | {r.budget} per "
            f"{r.chronon:g} s | {r.kills} | {r.ceis:,} | {r.refused} | {r.id_gaps} | "
            f"{r.violations} | {r.lost} of {r.acknowledged} | {back} "
            f"({', '.join(map(str, r.back_at_budget))}) | {max(r.ready_seconds):.1f} | "
            f"{r.steady_spent:.0%}, {r.steady_probes_per_s:.1f}, {r.steady_target}, "
            f"{r.steady_backlog_max:.0f} |")
    return "\n".join(lines) + "\n"


def outage_table(r: OutageResult, command: str, load: float) -> str:
    return header(command, load) + "\n" + "\n".join([
        "| cut | /readyz 503 during | /readyz 200 after | chronons ticked / stored | probes "
        "made / stored | backlog max | dropped | `db check` violations |",
        "|---|---|---|---|---|---|---|---|",
        f"| {r.seconds:g} s | {r.unready_share:.0%} of samples | {r.ready_after:.1f} s | "
        f"{r.ticked} / {r.ticks_stored} | {r.probes} / {r.probes_stored} | {r.backlog_max:.0f} "
        f"batches | {r.dropped_lines} | {r.violations} |",
    ]) + "\n"


def write(name: str, section: str) -> None:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    DOC.write_text(f"{head}{begin}\n{section}{end}{tail}", encoding="utf-8")


@contextlib.asynccontextmanager
async def database(args: argparse.Namespace, workdir: Path) -> AsyncIterator[str]:
    if args.postgres:
        async with postgres_database(args.postgres) as url:
            yield url
    else:
        yield f"sqlite+aiosqlite:///{workdir / 'proxy.sqlite3'}"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["kill", "outage"])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--feeds", type=int, default=200)
    parser.add_argument("--profiles", type=int, default=50)
    parser.add_argument("--every", default="3s")
    parser.add_argument("--one-rule", type=int, default=0)
    parser.add_argument("--one-rule-every", default="5s")
    parser.add_argument("--budget", type=int, default=10)
    parser.add_argument("--chronon", type=float, default=0.5)
    parser.add_argument("--steady", type=float, default=15.0)
    parser.add_argument("--seconds", type=float, default=30.0, help="outage: length of the cut")
    parser.add_argument("--publish-per-second", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--postgres", metavar="ADMIN_URL", default=None)
    parser.add_argument("--keep-log", metavar="PATH", default=None,
                        help="kill: copy the service's JSON log there")
    parser.add_argument("--write", action="store_true", help=f"write the section into {DOC.name}")
    args = parser.parse_args()
    command = shlex.join([".venv/bin/python", "benchmarks/machinery/bench_crash.py", *sys.argv[1:]])
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_crash_") as tmp:
        workdir = Path(tmp)
        async with database(args, workdir) as url:
            if args.mode == "kill":
                kill = await kill_run(args, url, workdir)
                text = kill_table([kill], command, load)
                name = f"bench_crash_{kill.backend}" + (f"_{args.one_rule}" if args.one_rule else "")
                print(f"leases lost by their own holder: {kill.leases_lost}")
                for n, spent in enumerate(kill.after_restart, 1):
                    print(f"restart {n}: its first chronons' probes made/stored "
                          + " ".join("-" if u is None else f"{u}/{p}" for u, p in spent))
            else:
                if not args.postgres:
                    raise SystemExit("outage needs --postgres (the cut is a TCP proxy)")
                text = outage_table(await outage_run(args, url, workdir), command, load)
                name = "bench_outage"
    print(text)
    if args.write:
        write(name, text)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
