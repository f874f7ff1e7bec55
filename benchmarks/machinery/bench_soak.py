"""Soak: ``proxy serve`` on its embedded default (SQLite) for 10,000 chronons, sampled every 30 s.

Writes nothing in ``docs/`` by itself: its figures go by hand into docs/operations.md
(section "Soak"), with the command and the date.

Setup (not measured): the feed farm runs as its own process (``proxy farm serve``,
``--feeds`` feeds publishing all the time, Poisson at ``--rate`` per feed per minute);
``proxy serve`` runs as a real subprocess in ``--workdir`` with no database URL set
(``./data/proxy.sqlite3``, the embedded default), chronons of ``--chronon`` seconds
(``PROXY_CHRONON_SECONDS``) and a budget of ``--budget``; a user is created with
``proxy users create`` and the feeds and ``--profiles`` watch profiles (one watch rule
over 2-3 random feeds, ``within`` ``--within``) are created over the REST API.

Sampled every ``--sample-seconds`` from the moment the profiles exist until the loop has
ticked ``--chronons`` chronons: the process's resident memory (``VmRSS`` of
``/proc/PID/status``), its open files (``/proc/PID/fd``), the database's size (the file
and its ``-wal``), the loop's counters from ``/metrics`` (chronon, probes started, budget
offered, probes, write backlog) and the API's latency (``--gets`` rounds of four GETs:
profiles, feeds, the metrics summary, one profile's status). Samples go to
``samples.csv`` and ``summary.json`` in the work directory.

The summary: the RSS slope over the second half of the run (least squares, MiB per
1,000 chronons: flat memory is below 1), probes started per chronon against the budget,
the API's p50 early and late, the database's growth per probe, and the size
``PROXY_RETENTION_DAYS`` holds the database to at the default 60 s chronon: growth per
probe × probes per day (1,440 chronons × the budget × the share spent here) × the days
kept. That is an upper bound for what the purge keeps: the purge deletes probes and
uncaptured entries older than the retention, while CEIs, captures and chronon rows stay
(a small share of the growth per probe), and SQLite reuses the freed pages without
shrinking the file.

    .venv/bin/python benchmarks/machinery/bench_soak.py            # the full soak (~20 min)
    .venv/bin/python benchmarks/machinery/bench_soak.py --chronons 600 --sample-seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import platform
import random
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from _procs import stop  # beside this script: a child may already be gone

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from proxy.farm import FarmProcess  # noqa: E402 -- after the path set-up above
from proxy.ports import free_port  # noqa: E402

DEFAULT_CHRONON_SECONDS = 60.0
"""The chronon the retention estimate is for (``PROXY_CHRONON_SECONDS``' default)."""


class SoakError(RuntimeError):
    """The service or the farm did not do what the soak needs."""


@dataclass(frozen=True)
class Sample:
    """One sampling of the running service."""

    seconds: float  # since the profiles were created
    chronon: int  # proxy_chronon
    rss_mib: float
    open_files: int
    db_bytes: int  # the SQLite file and its -wal
    used: int  # proxy_budget_used_probes_total: probes started
    offered: int  # proxy_budget_offered_probes_total
    probes: int  # proxy_probes_total: probes finished
    backlog: int  # proxy_write_backlog
    api_p50_ms: float
    api_max_ms: float


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SoakError(f"no VmRSS for process {pid}")


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def db_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


def metric(text: str, name: str) -> float:
    """The sum of a metric's samples (all labels); ``name`` exactly, not names it prefixes."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((f"{name} ", f"{name}{{")))


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs`` (nan with fewer than two distinct xs)."""
    if len(set(xs)) < 2:
        return float("nan")
    return statistics.linear_regression(xs, ys).slope


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(samples: list[Sample], budget: int, chronon: float, retention_days: int) -> dict[str, Any]:
    """The soak's figures from its samples (see the module's docstring)."""
    if len(samples) < 2:
        raise SoakError(f"{len(samples)} samples: too few to summarise (a longer run or a shorter --sample-seconds)")
    first, last = samples[0], samples[-1]
    chronons = last.chronon - first.chronon
    half = first.chronon + chronons / 2
    second = [s for s in samples if s.chronon >= half]
    rss_slope = slope([s.chronon for s in second], [s.rss_mib for s in second]) * 1000
    used = last.used - first.used
    offered = last.offered - first.offered
    spent = used / offered if offered else float("nan")
    probes = last.probes - first.probes
    growth = (last.db_bytes - first.db_bytes) / probes if probes else float("nan")
    third = max(1, len(samples) // 3)
    probes_per_day = 86_400 / DEFAULT_CHRONON_SECONDS * budget * spent
    return {
        "chronons": chronons,
        "samples": len(samples),
        "seconds": round(last.seconds - first.seconds, 1),
        "rss_mib_first": round(first.rss_mib, 1),
        "rss_mib_last": round(last.rss_mib, 1),
        "rss_mib_max": round(max(s.rss_mib for s in samples), 1),
        "rss_slope_mib_per_1000_chronons": round(rss_slope, 3),
        "rss_flat": rss_slope < 1.0,
        "open_files_first": first.open_files,
        "open_files_last": last.open_files,
        "open_files_max": max(s.open_files for s in samples),
        "budget": budget,
        "probes_per_chronon": round(used / chronons, 2) if chronons else float("nan"),
        "budget_spent": round(spent, 4),
        "backlog_max": max(s.backlog for s in samples),
        "api_p50_ms_early": round(statistics.median(s.api_p50_ms for s in samples[:third]), 1),
        "api_p50_ms_late": round(statistics.median(s.api_p50_ms for s in samples[-third:]), 1),
        "api_max_ms": round(max(s.api_max_ms for s in samples), 1),
        "db_bytes_first": first.db_bytes,
        "db_bytes_last": last.db_bytes,
        "probes": probes,
        "db_bytes_per_probe": round(growth, 1),
        "retention_days": retention_days,
        "probes_per_day_at_default_chronon": round(probes_per_day),
        "db_mib_under_retention": round(growth * probes_per_day * retention_days / 2**20, 1),
        "chronon_seconds": chronon,
    }


def watch_profile(i: int, feed_ids: list[int], rng: random.Random, within: str) -> dict[str, Any]:
    """A watch rule (AuctionWatch) over 2-3 random feeds: moved by their updates alone."""
    feeds = rng.sample(feed_ids, rng.choice((2, 3)))
    return {"name": f"soak {i}",
            "rules": [{"name": "w", "watch": {"feeds": [str(f) for f in feeds], "within": within}}]}


async def cli(env: dict[str, str], cwd: Path, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy.cli", *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise SoakError(f"proxy {' '.join(args)} failed: {err.decode()[-2000:]}")
    return out.decode()


@contextlib.asynccontextmanager
async def serving(env: dict[str, str], cwd: Path, port: int, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """``proxy serve`` as a subprocess; SIGTERM (then SIGKILL) on leaving if still alive."""
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy.cli", "serve", "--port", str(port), env=env, cwd=cwd,
            stdout=sink, stderr=sink)
    try:
        yield proc
    finally:
        await stop(proc, signal.SIGTERM, grace=60)  # nothing to do for one already gone


async def ready(api: httpx.AsyncClient, proc: asyncio.subprocess.Process, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise SoakError(f"proxy serve exited with {proc.returncode} before it was ready")
        with contextlib.suppress(httpx.TransportError):
            if (await api.get("/readyz")).status_code == 200:
                return
        await asyncio.sleep(0.2)
    raise SoakError(f"proxy serve not ready within {within} s")


async def gather_limited(n: int, coros: list[Any]) -> list[Any]:
    sem = asyncio.Semaphore(n)

    async def one(coro: Any) -> Any:
        async with sem:
            return await coro

    return list(await asyncio.gather(*(one(c) for c in coros)))


async def api_latencies(api: httpx.AsyncClient, profile_id: int, rounds: int) -> list[float]:
    """Milliseconds of ``rounds`` rounds of the four GETs, one after the other."""
    paths = ["/api/v1/profiles?limit=50", "/api/v1/feeds?limit=50", "/api/v1/metrics/summary",
             f"/api/v1/profiles/{profile_id}/status"]
    out = []
    for _ in range(rounds):
        for path in paths:
            began = time.perf_counter()
            r = await api.get(path)
            out.append((time.perf_counter() - began) * 1000)
            if r.status_code != 200:
                raise SoakError(f"GET {path} answered {r.status_code}: {r.text[:300]}")
    return out


def service_env(args: argparse.Namespace) -> dict[str, str]:
    """The service's environment: the defaults, but for the soak's chronon, budget and farm."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    env.update({
        "PROXY_CHRONON_SECONDS": str(args.chronon),
        "PROXY_BUDGET": str(args.budget),
        "PROXY_ALLOW_PRIVATE_NETWORKS": "true",  # the farm is on 127.0.0.1
        "PROXY_PER_HOST_CONCURRENCY": str(10 * args.budget),  # one host serves every feed
        "PROXY_PER_HOST_MIN_DELAY_SECONDS": "0",
        "PROXY_LOG_FORMAT": "json",
    })
    if args.retention_days is not None:
        env["PROXY_RETENTION_DAYS"] = str(args.retention_days)
    return env


def fresh_workdir(work: Path) -> tuple[Path, Path]:
    """The work directory without a previous run's database and log: (database, log)."""
    work.mkdir(parents=True, exist_ok=True)
    db = work / "data" / "proxy.sqlite3"  # the default PROXY_DATABASE_URL, relative to the cwd
    for p in db.parent.glob(db.name + "*"):
        p.unlink()
    log = work / "serve.log"
    log.unlink(missing_ok=True)
    return db, log


def errors_logged(log: Path) -> int:
    return sum(1 for line in log.read_text(errors="replace").splitlines() if '"level": "error"' in line)


async def soak(args: argparse.Namespace) -> tuple[list[Sample], dict[str, Any]]:
    work = Path(args.workdir)
    db, log = fresh_workdir(work)
    env = service_env(args)
    rng = random.Random(args.seed)
    farm_args = ["--feeds", str(args.feeds), "--entries", "20", "--rate", str(args.rate),
                 "--seconds-per-trace-unit", "60", "--seed", str(args.seed)]
    with FarmProcess(farm_args) as farm:
        key = (await cli(env, work, "users", "create", "soak")).strip().splitlines()[-1]
        port = free_port()
        async with serving(env, work, port, log) as proc, httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"},
                timeout=60) as api:
            await ready(api, proc, 60)
            t0 = time.monotonic()
            base = farm.url.rstrip("/")

            async def register(i: int) -> int:
                r = await api.post("/api/v1/feeds", json={"url": f"{base}/feeds/{i}.xml"})
                if r.status_code not in (200, 201):
                    raise SoakError(f"POST /api/v1/feeds answered {r.status_code}: {r.text[:300]}")
                return int(r.json()["id"])

            feed_ids = await gather_limited(4, [register(i) for i in range(args.feeds)])
            specs = [watch_profile(i, feed_ids, rng, args.within) for i in range(args.profiles)]

            async def create(spec: dict[str, Any]) -> int:
                r = await api.post("/api/v1/profiles", json=spec)
                if r.status_code != 201:
                    raise SoakError(f"POST /api/v1/profiles answered {r.status_code}: {r.text[:300]}")
                return int(r.json()["id"])

            profile_ids = await gather_limited(4, [create(s) for s in specs])
            print(f"{args.feeds} feeds and {args.profiles} profiles created over the API in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
            assert proc.pid is not None
            samples: list[Sample] = []
            began = time.monotonic()
            chronon0: int | None = None
            while True:
                if proc.returncode is not None:
                    raise SoakError(f"proxy serve exited with {proc.returncode} during the soak (log: {log})")
                text = (await api.get("/metrics")).text
                lat = await api_latencies(api, rng.choice(profile_ids), args.gets)
                s = Sample(
                    seconds=round(time.monotonic() - began, 2),
                    chronon=int(metric(text, "proxy_chronon")),
                    rss_mib=round(rss_mib(proc.pid), 2),
                    open_files=open_files(proc.pid),
                    db_bytes=db_bytes(db),
                    used=int(metric(text, "proxy_budget_used_probes_total")),
                    offered=int(metric(text, "proxy_budget_offered_probes_total")),
                    probes=int(metric(text, "proxy_probes_total")),
                    backlog=int(metric(text, "proxy_write_backlog")),
                    api_p50_ms=round(percentile(lat, 0.5), 2),
                    api_max_ms=round(max(lat), 2),
                )
                samples.append(s)
                chronon0 = s.chronon if chronon0 is None else chronon0
                print(json.dumps(asdict(s)), flush=True)
                if s.chronon - chronon0 >= args.chronons:
                    break
                await asyncio.sleep(args.sample_seconds)
    summary = summarize(samples, args.budget, args.chronon, args.retention_days or 30)
    summary["errors_logged"] = errors_logged(log)
    return samples, summary


def write(samples: list[Sample], summary: dict[str, Any], args: argparse.Namespace) -> None:
    work = Path(args.workdir)
    with (work / "samples.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(asdict(samples[0])))
        w.writeheader()
        w.writerows(asdict(s) for s in samples)
    meta = {"command": " ".join(["benchmarks/machinery/bench_soak.py", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "load_average_end": os.getloadavg()[0],
            "feeds": args.feeds, "profiles": args.profiles, "rate_per_feed_per_minute": args.rate,
            "within": args.within}
    (work / "summary.json").write_text(json.dumps(
        {"meta": meta, "summary": summary, "samples": [asdict(s) for s in samples]}, indent=1))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--chronons", type=int, default=10_000, help="chronons to run once sampling starts")
    p.add_argument("--chronon", type=float, default=0.1, help="PROXY_CHRONON_SECONDS")
    p.add_argument("--budget", type=int, default=20)
    p.add_argument("--feeds", type=int, default=500)
    p.add_argument("--profiles", type=int, default=1000)
    p.add_argument("--rate", type=float, default=2.0, help="publications per feed per minute")
    p.add_argument("--within", default="10s", help="the watch rules' window")
    p.add_argument("--sample-seconds", type=float, default=30.0)
    p.add_argument("--gets", type=int, default=3, help="rounds of the four GETs per sample")
    p.add_argument("--retention-days", type=int, default=None,
                   help="PROXY_RETENTION_DAYS for the service and the estimate (default: the default, 30)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default="/tmp/bench-soak")
    return p


def _interrupted(signum: int, _frame: object) -> None:
    # A background job ignores SIGINT: SIGTERM ends the soak the same way, its `proxy serve`
    # and farm stopped on the way out (asyncio.run cancels the soak's task).
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parser().parse_args(argv)
    if argv is None:  # run as a script, not from a test
        signal.signal(signal.SIGTERM, _interrupted)
    samples, summary = asyncio.run(soak(args))
    write(samples, summary, args)
    print(json.dumps(summary, indent=1))
    print(f"RSS slope over the second half: {summary['rss_slope_mib_per_1000_chronons']:+.2f} MiB per "
          f"1,000 chronons ({'flat' if summary['rss_flat'] else 'NOT flat'}); probes per chronon "
          f"{summary['probes_per_chronon']} of {summary['budget']} ({summary['budget_spent']:.0%} spent); "
          f"API p50 {summary['api_p50_ms_early']} ms early, {summary['api_p50_ms_late']} ms late; "
          f"{summary['db_bytes_per_probe']:.0f} bytes per probe, about "
          f"{summary['db_mib_under_retention']:.0f} MiB under {summary['retention_days']} days' retention "
          f"at {DEFAULT_CHRONON_SECONDS:.0f} s chronons", flush=True)
    return summary


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as exc:  # its `proxy serve` and farm are stopped by now
        sys.exit(f"bench_soak: interrupted ({exc})")
