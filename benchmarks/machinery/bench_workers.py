"""Probes per second through NATS JetStream with 1, 2 and 4 ``proxy serve --role worker`` processes.

The set-up of a scaled-out proxy, minus the decision: a private nats-server
(JetStream, its own store directory and port), the feed farm in a child process
serving ``--feeds`` RSS feeds of ``--entries`` entries (so each probe is a full
200 document to decompress and parse: CPU-bound), and the scheduler's side,
:class:`proxy.cluster.BrokerProber`, in this process, keeping ``--inflight``
probes in flight (per-host limits off: one farm host). For each worker count
the workers are started, warmed up with ``--warmup`` probes, then ``--probes``
probes are timed; probes/s and the scaling efficiency (rate / (n × rate with
one worker)) are reported. The job round trip (publish, a worker takes it,
probes, publishes the result, the scheduler applies it) is all included.

The machine has 2 cores, shared with other engineers' test runs while this
ran, and the farm and this process use CPU too: expect at most ~2× and read
the figures as a lower bound. Writes the "Workers" section of docs/scale.md
(between its ``<!-- bench-workers -->`` markers).

Run:  .venv/bin/python benchmarks/machinery/bench_workers.py [--workers 1,2,4] [--probes 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from _procs import (  # beside this script: a child may already be gone
    kill,
    signal_process,
    stop,
    wait_exit,
)

from proxy.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "scale.md"
BEGIN, END = "<!-- bench-workers -->", "<!-- /bench-workers -->"



async def _wait_port(port: int, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


async def _ready(port: int, within: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + within
    async with httpx.AsyncClient(timeout=2) as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"worker on {port} not ready")


async def _run(args: argparse.Namespace, base: str, tmp: Path) -> list[tuple[int, float, int]]:
    from proxy.cluster import BrokerProber, BrokerSettings
    from proxy.feeds import AddressPolicy, FeedState, NothingKnown, Ok
    from proxy.store import upgrade_database

    nats_bin = shutil.which("nats-server") or "/usr/sbin/nats-server"
    nats_port = free_port()
    store_dir = tmp / "js"
    store_dir.mkdir()
    nats = await asyncio.create_subprocess_exec(
        nats_bin, "-js", "-a", "127.0.0.1", "-p", str(nats_port), "-sd", str(store_dir),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    db = f"sqlite+aiosqlite:///{tmp / 'proxy.sqlite3'}"
    await upgrade_database(db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    env.update({"PROXY_DATABASE_URL": db, "PROXY_BROKER_URL": f"nats://127.0.0.1:{nats_port}",
                "PROXY_ALLOW_PRIVATE_NETWORKS": "true", "PROXY_LOG_LEVEL": "WARNING",
                "PROXY_WORKER_CONCURRENCY": str(args.concurrency),
                "PROXY_RESPECT_CACHE_HINTS": "false"})
    urls = [f"{base}/feeds/{i}.xml" for i in range(args.feeds)]
    out: list[tuple[int, float, int]] = []
    try:
        await _wait_port(nats_port)
        settings = BrokerSettings(f"nats://127.0.0.1:{nats_port}", job_timeout=120,
                                  per_host_concurrency=10_000, per_host_min_delay=0.0)
        async with BrokerProber(settings, AddressPolicy(allow_private_networks=True)) as prober:
            now = dt.datetime.now(dt.UTC)
            counter = iter(range(10**9))

            async def probe_many(n: int) -> int:
                ok = 0
                todo = iter(range(n))

                async def lane() -> None:
                    nonlocal ok
                    for _ in todo:
                        url = urls[next(counter) % len(urls)]
                        result = await prober.probe(FeedState(url), NothingKnown(), now=now)
                        ok += isinstance(result, Ok)

                await asyncio.gather(*(lane() for _ in range(args.inflight)))
                return ok

            for n in args.workers:
                procs, ports = [], [free_port() for _ in range(n)]
                for port in ports:
                    procs.append(await asyncio.create_subprocess_exec(
                        sys.executable, "-m", "proxy.cli", "serve", "--role", "worker", "--port",
                        str(port), env=env, stdout=asyncio.subprocess.DEVNULL,
                        stderr=asyncio.subprocess.DEVNULL))
                try:
                    for port in ports:  # every worker connected before anything is timed
                        await _ready(port)
                    await probe_many(args.warmup)
                    began = time.perf_counter()
                    ok = await probe_many(args.probes)
                    seconds = time.perf_counter() - began
                finally:
                    for p in procs:
                        signal_process(p, signal.SIGTERM)  # one may have exited by itself
                    for p in procs:  # all signalled first: they shut down side by side
                        if await wait_exit(p, 30) is None:
                            await kill(p)
                out.append((n, args.probes / seconds, ok))
                print(f"{n} worker(s): {args.probes / seconds:.0f} probes/s ({ok} ok)", flush=True)
    finally:
        await stop(nats, signal.SIGTERM, grace=30)
    return out


def _load() -> str:
    try:
        one, five, _ = os.getloadavg()
        return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"
    except OSError:
        return "load average unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--feeds", type=int, default=500)
    parser.add_argument("--entries", type=int, default=20)
    parser.add_argument("--probes", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--inflight", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.workers = [int(w) for w in args.workers.split(",")]

    from proxy.farm import FarmProcess

    load_before = _load()
    farm_args = ["--feeds", str(args.feeds), "--entries", str(args.entries),
                 "--prefill", str(args.entries)]
    with FarmProcess(farm_args) as farm, tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(_run(args, farm.url.rstrip("/"), Path(tmp)))
    load_after = _load()
    base = rows[0][1] if rows and rows[0][0] == 1 else None
    lines = [
        BEGIN,
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC with "
        f"`.venv/bin/python benchmarks/machinery/bench_workers.py --workers "
        f"{','.join(map(str, args.workers))} --probes {args.probes} --feeds {args.feeds}` "
        f"({args.entries}-entry RSS documents, every probe a full 200 parse, "
        f"{args.inflight} jobs in flight, {args.concurrency} probes per worker). "
        f"Machine: 2 cores **shared with other engineers' test runs** "
        f"(before: {load_before}; after: {load_after}); the farm and the scheduler's "
        "side run on the same cores.",
        "",
        "| workers | probes/s | scaling efficiency |",
        "|---|---|---|",
    ]
    for n, rate, _ok in rows:
        eff = f"{rate / (n * base):.0%}" if base else "–"
        lines.append(f"| {n} | {rate:,.0f} | {eff} |")
    lines.append(END)
    block = "\n".join(lines)
    print(block)
    if args.no_write:
        return
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    DOC.write_text(text[:start] + block + text[end:], encoding="utf-8")


if __name__ == "__main__":
    main()
