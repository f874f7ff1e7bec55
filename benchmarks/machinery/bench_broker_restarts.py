"""The broker killed (SIGKILL) and restarted again and again under a connected worker: how long until probing goes on.

A private nats-server (JetStream, its own store directory and port), the feed
farm in a child process, one ``proxy serve --role worker`` process, and the
scheduler's side (:class:`proxy.cluster.BrokerProber`) in this process. Each
round waits a random 0 to ``--max-gap`` seconds (so the kill lands anywhere in
the worker's one-second fetch cycle), kills the broker with SIGKILL, starts it
again on the same port, then times ``--probes`` probes published at once until
all have their results: the **recovery**. Every ``--wipe-every``-th round the
store directory is deleted between kill and start (a broker back without its
volume: no streams, no consumers), so recovery includes making them again. A
round whose probes are not all answered within ``--timeout`` seconds is a
**stall** (before 2026-11-28, every wiped round stalled for good).

Reports recovery median, p90 and max (plain and wiped rounds apart), stalls,
and the worker's ``proxy_worker_consumer_repairs_total`` by kind. Writes the
"Broker restarts" section of docs/scale.md (between its
``<!-- bench-broker-restarts -->`` markers).

Run:  .venv/bin/python benchmarks/machinery/bench_broker_restarts.py [--rounds 100] [--wipe-every 10]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _procs import stop  # beside this script: a child may already be gone

from proxy.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.cluster_support, from wherever this runs
DOC = ROOT / "docs" / "scale.md"
BEGIN, END = "<!-- bench-broker-restarts -->", "<!-- /bench-broker-restarts -->"


async def _get(url: str, within: float = 60.0) -> str:
    import httpx

    deadline = time.monotonic() + within
    async with httpx.AsyncClient(timeout=2) as client:
        while time.monotonic() < deadline:
            try:
                r = await client.get(url)
                if r.status_code == 200:
                    return r.text
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not answer 200")


@dataclass
class _Outcome:
    plain: list[float]  # recovery, seconds, of the rounds that kept the store
    wiped: list[float]  # of the rounds that lost it
    stalls: list[int]  # rounds not answered in time
    repairs: dict[str, int]  # the worker's consumer repairs by kind


async def _run(args: argparse.Namespace, base: str, tmp: Path) -> _Outcome:
    from prometheus_client.parser import text_string_to_metric_families

    from proxy.cluster import BrokerProber, BrokerSettings
    from proxy.feeds import AddressPolicy, FeedState, NothingKnown, Ok
    from proxy.store import upgrade_database
    from tests.cluster_support import NatsServer

    rng = random.Random(args.seed)
    store = tmp / "js"
    store.mkdir()
    broker = NatsServer(store)  # the tests' own: a private nats-server with JetStream
    await broker.start()
    db = f"sqlite+aiosqlite:///{tmp / 'proxy.sqlite3'}"
    await upgrade_database(db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    env.update({"PROXY_DATABASE_URL": db, "PROXY_BROKER_URL": broker.url,
                "PROXY_ALLOW_PRIVATE_NETWORKS": "true", "PROXY_LOG_LEVEL": "WARNING",
                "PROXY_RESPECT_CACHE_HINTS": "false", "PROXY_BROKER_ACK_WAIT_SECONDS": "5"})
    port = free_port()
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy.cli", "serve", "--role", "worker", "--port", str(port),
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    urls = [f"{base}/feeds/{i}.xml" for i in range(args.probes)]
    plain: list[float] = []
    wiped: list[float] = []
    stalls: list[int] = []
    try:
        await _get(f"http://127.0.0.1:{port}/readyz")
        settings = BrokerSettings(broker.url, job_timeout=args.timeout + 30,
                                  per_host_concurrency=10_000, per_host_min_delay=0.0)
        async with BrokerProber(settings, AddressPolicy(allow_private_networks=True)) as prober:
            now = dt.datetime.now(dt.UTC)

            async def probe_all() -> bool:
                results = await asyncio.gather(*(
                    prober.probe(FeedState(u), NothingKnown(), now=now) for u in urls))
                return all(isinstance(r, Ok) for r in results)

            if not await probe_all():
                raise RuntimeError("probes failed before any restart")
            for i in range(1, args.rounds + 1):
                await asyncio.sleep(rng.uniform(0.0, args.max_gap))
                wipe = args.wipe_every > 0 and i % args.wipe_every == 0
                await broker.restart(wipe=wipe)
                began = time.perf_counter()
                try:
                    async with asyncio.timeout(args.timeout):
                        ok = await probe_all()
                except TimeoutError:
                    ok = False
                seconds = time.perf_counter() - began
                if not ok:
                    stalls.append(i)
                    print(f"round {i}: STALL ({'wiped' if wipe else 'plain'})", flush=True)
                    continue
                (wiped if wipe else plain).append(seconds)
                print(f"round {i}: {seconds:.2f} s{' (wiped)' if wipe else ''}", flush=True)
        exposition = await _get(f"http://127.0.0.1:{port}/metrics")
    finally:
        await stop(worker, signal.SIGTERM, grace=30)  # it may have exited by itself
        await broker.stop()
    repairs = {sample.labels["kind"]: int(sample.value)
               for family in text_string_to_metric_families(exposition)
               for sample in family.samples if sample.name == "proxy_worker_consumer_repairs_total"}
    return _Outcome(plain, wiped, stalls, repairs)


def _stats(xs: list[float]) -> str:
    if not xs:
        return "– | – | –"
    q = statistics.quantiles(xs, n=10, method="inclusive")[-1] if len(xs) > 1 else xs[0]
    return f"{statistics.median(xs):.2f} | {q:.2f} | {max(xs):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--wipe-every", type=int, default=10,
                        help="delete the broker's store every N-th round (0: never)")
    parser.add_argument("--probes", type=int, default=3, help="probes timed after each restart")
    parser.add_argument("--max-gap", type=float, default=1.2,
                        help="seconds, at most, between the last probe and the kill")
    parser.add_argument("--timeout", type=float, default=40.0,
                        help="seconds after which a round counts as a stall")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    from proxy.farm import FarmProcess

    with FarmProcess(["--feeds", str(max(args.probes, 1)), "--entries", "5", "--prefill", "5"]) as farm, \
            tempfile.TemporaryDirectory() as tmp:
        out = asyncio.run(_run(args, farm.url.rstrip("/"), Path(tmp)))
    plain, wiped, stalls, repairs = out.plain, out.wiped, out.stalls, out.repairs
    lines = [
        BEGIN,
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC with "
        f"`.venv/bin/python benchmarks/machinery/bench_broker_restarts.py --rounds {args.rounds} "
        f"--wipe-every {args.wipe_every} --probes {args.probes} --seed {args.seed}`: one worker "
        f"process, the broker killed with SIGKILL 0 to {args.max_gap:g} s after the last probe "
        f"and started again, then {args.probes} probes timed until all are answered.",
        "",
        "| rounds | n | recovery median, s | p90, s | max, s |",
        "|---|---:|---:|---:|---:|",
        f"| broker restarted with its store | {len(plain)} | {_stats(plain)} |",
        f"| broker restarted without its store | {len(wiped)} | {_stats(wiped)} |",
        "",
        f"Stalls (not answered within {args.timeout:g} s): {len(stalls)}"
        f"{' (rounds ' + ', '.join(map(str, stalls)) + ')' if stalls else ''}. "
        f"The worker's consumer repairs: {repairs.get('recreated', 0)} recreated, "
        f"{repairs.get('resubscribed', 0)} resubscribed.",
        END,
    ]
    block = "\n".join(lines)
    print(block)
    if args.no_write:
        return
    text = DOC.read_text(encoding="utf-8")
    if BEGIN in text:
        start, end = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + block + text[end:]
    else:
        text = text.rstrip("\n") + "\n\n## Broker restarts\n\n" + block + "\n"
    DOC.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
