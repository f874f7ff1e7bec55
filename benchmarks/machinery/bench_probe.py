"""Probe pipeline throughput (fetch + parse + new-entry detection, no database) against the farm.

The feed farm runs in a child process (``FarmProcess``) serving ``--feeds``
RSS feeds of 20 entries on ``--hosts`` loopback addresses (127.0.0.1, .2, …:
feed ``i`` is fetched from host ``i mod hosts``, as feeds live on many hosts).
For each layout in ``--processes`` the pipeline probes them from
``--concurrency`` coroutines: ``0`` is one :class:`proxy.feeds.Fetcher` in
this process (one shared client), ``N`` a :class:`proxy.feeds.ProbePool` of N
worker processes (what ``PROXY_PROBE_PROCESSES=N`` runs):

* **changed**: every probe is sent without validators, so every answer is a
  full 200 document that is decompressed, parsed and split into known/new
  entries (each feed's ``MemoryKnownEntries`` is filled on its first probe);
* **not modified**: every probe carries the validators learned above, so
  every answer is a 304.

RSS of this process (plus the pool's workers) is sampled after 10k and after
``--probes`` probes of the changed phase: the known-entry sets are complete
after the first pass over the feeds, so growth after that point is the fetch
layer's.

Then the ``reader`` library (PyPI ``reader``) updates ``--reader-feeds`` of the
same farm's feeds with ``update_feeds(workers=…)``, first pass (200s, parse,
store) and second pass (304s), as a peer; the ratio is reported.

Writes ``docs/bench-probe.md``.

Run:  .venv/bin/python benchmarks/machinery/bench_probe.py [--feeds 10000] [--probes 100000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from proxy import aio

DOC = Path(__file__).resolve().parents[2] / "docs" / "bench-probe.md"


def make_rss(base: str, feed: int, n: int, version: int = 0) -> bytes:
    """A 20-entry-style RSS 2.0 document, ~300 bytes per entry; ``version`` shifts the entries."""
    items = []
    for i in range(version, version + n):
        items.append(
            f"<item><title>Feed {feed} post {i} &amp; more</title>"
            f"<link>{base}f/{feed}/p/{i}</link>"
            f'<guid isPermaLink="false">urn:feed:{feed}:post:{i}</guid>'
            f"<pubDate>Mon, 01 Jun 2026 {i % 24:02d}:{i % 60:02d}:00 GMT</pubDate>"
            f"<description>Summary of post {i} with &lt;b&gt;markup&lt;/b&gt; and a little text "
            f"to make the document about the size of a real one.</description></item>"
        )
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel>'
        f"<title>Feed {feed}</title><link>{base}f/{feed}</link><description>d</description>"
        + "".join(items)
        + "</channel></rss>"
    ).encode()


def rss_mib(pids: list[int] | None = None) -> float:
    """Resident memory of this process (and of ``pids``), MiB."""
    total = 0.0
    for pid in pids or ["self"]:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    layout: str
    name: str
    probes: int
    seconds: float
    outcomes: Counter[str]
    parsers: Counter[str]
    client_cpu: float = 0.0
    farm_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.probes / self.seconds

    @property
    def client_us(self) -> float:
        return self.client_cpu / self.probes * 1e6

    @property
    def farm_us(self) -> float:
        return self.farm_cpu / self.probes * 1e6

    @property
    def capacity(self) -> float:
        """Probes/s two idle cores would sustain: 2 / (client + farm CPU per probe)."""
        return 2 / ((self.client_cpu + self.farm_cpu) / self.probes)


def host_addresses(n: int) -> list[str]:
    return [f"127.0.0.{1 + i}" for i in range(n)]


def feed_urls(port: int, feeds: int, hosts: int) -> list[str]:
    addrs = host_addresses(hosts)
    return [f"http://{addrs[i % hosts]}:{port}/feeds/{i}.xml" for i in range(feeds)]


async def run_fetcher(
    args: argparse.Namespace, port: int, farm_pid: int, processes: int
) -> tuple[list[Phase], dict[int, float]]:
    from proxy.feeds import FeedState, Fetcher, FetcherSettings, MemoryKnownEntries, Ok, ProbePool

    settings = FetcherSettings(
        allow_private_networks=True,
        per_host_concurrency=args.concurrency,  # no politeness delay against our own farm
        per_host_min_delay=0,
        max_connections=args.concurrency,
        parse_threads=args.parse_threads,
        parse_processes=args.parse_processes,
    )
    urls = feed_urls(port, args.feeds, args.hosts)
    known = [MemoryKnownEntries() for _ in urls]
    states: list[FeedState] = [FeedState(u) for u in urls]
    memory: dict[int, float] = {}
    phases: list[Phase] = []
    now = datetime.now(UTC)
    layout = f"ProbePool, {processes} worker processes" if processes else "one Fetcher in one process"
    prober = ProbePool(settings, processes=processes) if processes else Fetcher(settings)

    async with prober as fetcher:

        async def phase(name: str, total: int, conditional: bool) -> Phase:
            outcomes: Counter[str] = Counter()
            parsers: Counter[str] = Counter()
            counter = iter(range(total))

            async def worker() -> None:
                for i in counter:
                    k = i % len(urls)
                    state = states[k] if conditional else FeedState(urls[k])
                    result = await fetcher.probe(state, known[k], now=now)
                    outcomes[result.outcome] += 1
                    if isinstance(result, Ok):
                        parsers[result.parser] += 1
                        if result.new:
                            known[k].add(e.identity for e in result.new)
                        states[k] = result.state
                    done = i + 1
                    if not conditional and done in (10_000, total):
                        memory[done] = rss_mib(["self", *_worker_pids(fetcher)])

            workers = [os.getpid(), *_worker_pids(fetcher)]
            cpu0 = sum(cpu_seconds(p) for p in workers)
            farm0 = cpu_seconds(farm_pid)
            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
            seconds = time.perf_counter() - t0
            workers = [os.getpid(), *_worker_pids(fetcher)]
            return Phase(
                layout, name, total, seconds, outcomes, parsers,
                client_cpu=sum(cpu_seconds(p) for p in workers) - cpu0,
                farm_cpu=cpu_seconds(farm_pid) - farm0,
            )

        # Warm-up (not measured): connections, thread pool, imports, and one request
        # per feed, so that the farm renders and compresses every document before the
        # measured phases (a first render costs the farm ~300 µs; a cached one ~60 µs).
        await phase("warm-up", args.feeds, conditional=False)
        memory.clear()
        phases.append(await phase("changed (200, parse, detect)", args.probes, conditional=False))
        phases.append(await phase("not modified (304)", args.probes_304, conditional=True))
    return phases, memory


async def run_layers(args: argparse.Namespace, base: str) -> list[tuple[str, float, float]]:
    """304 requests through each HTTP layer: (name, requests/s, client CPU µs per request)."""
    import aiohttp
    import httpx
    from httpx_aiohttp import AiohttpTransport

    from proxy.feeds._transport import CookielessAsyncClient, LeanAiohttpTransport

    n, c = args.layer_requests, args.concurrency
    urls = [f"{base}/feeds/{i}.xml" for i in range(min(args.feeds, 1000))]
    async with aiohttp.ClientSession() as s:
        etags = {}
        for u in urls:
            async with s.get(u) as r:
                etags[u] = r.headers["etag"]

    async def drive(fetch: Callable[[str], Awaitable[None]]) -> tuple[float, float]:
        it = iter(range(n))

        async def worker() -> None:
            for i in it:
                await fetch(urls[i % len(urls)])

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(c)))
        return n / (time.perf_counter() - t0), (time.process_time() - cpu0) / n * 1e6

    out: list[tuple[str, float, float]] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c)) as s:

        async def raw(u: str) -> None:
            async with s.get(u, headers={"If-None-Match": etags[u]}) as r:
                await r.read()

        await drive(raw)
        out.append(("aiohttp alone (reference)", *await drive(raw)))

    clients: list[tuple[str, Callable[[], httpx.AsyncClient]]] = [
        ("httpx, default transport, pool sized to concurrency",
         lambda: httpx.AsyncClient(limits=httpx.Limits(max_connections=c, max_keepalive_connections=c))),
        ("httpx + httpx-aiohttp transport",
         lambda: httpx.AsyncClient(transport=AiohttpTransport(
             client=aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c))))),
        ("httpx (cookie-less) + our lean aiohttp transport (shipped)",
         lambda: CookielessAsyncClient(transport=LeanAiohttpTransport(
             aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c), auto_decompress=False)))),
    ]
    for name, make in clients:
        async with make() as client:

            async def via(u: str, client: httpx.AsyncClient = client) -> None:
                r = await client.get(u, headers={"If-None-Match": etags[u]})
                assert r.status_code == 304

            await drive(via)
            out.append((name, *await drive(via)))
    return out


def _worker_pids(fetcher: object) -> list[int]:
    """The pool's probe workers, or the fetcher's parse worker processes."""
    from concurrent.futures import ProcessPoolExecutor

    from proxy.feeds import ProbePool

    if isinstance(fetcher, ProbePool):
        return fetcher.worker_pids()
    executor = getattr(fetcher, "_executor", None)
    if isinstance(executor, ProcessPoolExecutor):
        return [p.pid for p in (executor._processes or {}).values() if p.pid is not None]
    return []


def run_reader(args: argparse.Namespace, base: str) -> list[tuple[str, int, float]]:
    from reader import make_reader

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        reader = make_reader(os.path.join(tmp, "reader.sqlite"))
        for i in range(args.reader_feeds):
            reader.add_feed(f"{base}/feeds/{i}.xml")
        for name in ("first update (200, parse, store)", "second update (304)"):
            t0 = time.perf_counter()
            reader.update_feeds(scheduled=False, workers=args.reader_workers)
            out.append((name, args.reader_feeds, time.perf_counter() - t0))
        entries = reader.get_entry_counts().total
        reader.close()
    if entries != args.reader_feeds * 20:
        raise SystemExit(f"reader stored {entries} entries, expected {args.reader_feeds * 20}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--feeds", type=int, default=10_000)
    ap.add_argument("--hosts", type=int, default=8, help="loopback addresses the feeds are spread over")
    ap.add_argument("--processes", default="0,2",
                    help="layouts to measure: 0 = Fetcher in this process, N = ProbePool of N workers")
    ap.add_argument("--probes", type=int, default=100_000)
    ap.add_argument("--probes-304", type=int, default=50_000)
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--parse-threads", type=int, default=1)
    ap.add_argument("--parse-processes", type=int, default=0)
    ap.add_argument("--reader-feeds", type=int, default=1000)
    ap.add_argument("--reader-workers", type=int, default=16)
    ap.add_argument("--layer-requests", type=int, default=10_000)
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default=None,
                    help="event loop of the client and the farm (default: proxy.aio's choice)")
    ap.add_argument("--out", type=Path, default=DOC)
    args = ap.parse_args()
    if not 1 <= args.hosts <= 254:
        ap.error(f"--hosts must be 1..254, got {args.hosts}")
    layouts = [int(x) for x in args.processes.split(",") if x]
    if not layouts or min(layouts) < 0:
        ap.error(f"--processes must list numbers >= 0, got {args.processes!r}")
    if args.loop:
        os.environ["PROXY_EVENT_LOOP"] = args.loop  # the farm child process inherits it

    from proxy.farm import FarmProcess

    farm_args = ["--feeds", str(args.feeds), "--entries", "20", "--prefill", "20"]
    for addr in host_addresses(args.hosts)[1:]:
        farm_args += ["--also-host", addr]
    phases: list[Phase] = []
    memory: dict[str, dict[int, float]] = {}
    with FarmProcess(farm_args) as farm:
        base = farm.url.rstrip("/")
        assert farm.proc is not None
        layers = aio.run(run_layers(args, base))
        for processes in layouts:
            got, mem = aio.run(run_fetcher(args, farm.port, farm.proc.pid, processes))
            phases += got
            memory[got[0].layout] = mem
        reader_rows = run_reader(args, base)

    load = os.getloadavg()
    cmd = (
        f".venv/bin/python benchmarks/machinery/bench_probe.py --feeds {args.feeds} --hosts {args.hosts} "
        f"--processes {args.processes} --probes {args.probes} "
        f"--probes-304 {args.probes_304} --concurrency {args.concurrency} "
        f"--parse-threads {args.parse_threads} --parse-processes {args.parse_processes} "
        f"--reader-feeds {args.reader_feeds} --reader-workers {args.reader_workers} "
        f"--layer-requests {args.layer_requests}"
    )
    lines = [
        f"`{cmd}`",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; load average after the run "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (the machine is shared; figures move with it). "
        f"The farm (`proxy farm serve`, {args.feeds} RSS feeds x 20 entries, gzip) runs in a "
        f"child process on {args.hosts} loopback address(es); the probes go through one cookie-less "
        "httpx client per process over the lean aiohttp transport of `proxy.feeds._transport`.",
        "",
        "| layout | phase | probes | seconds | probes/s (measured) | client CPU µs/probe "
        "| farm CPU µs/probe | capacity of 2 idle cores, probes/s | outcomes | parser |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in phases:
        lines.append(
            f"| {p.layout} | {p.name} | {p.probes} | {p.seconds:.1f} | **{p.rate:,.0f}** "
            f"| {p.client_us:.0f} | {p.farm_us:.0f} | {p.capacity:,.0f} | {dict(p.outcomes)} "
            f"| {dict(p.parsers) or '-'} |"
        )
    lines += [
        "",
        "Client CPU counts this process and the pool's workers (all threads). 'Capacity' is "
        "2 / (client + farm CPU seconds per probe): what the pipeline and the farm together would "
        "sustain on this 2-core machine if nothing else ran. The measured rate is lower whenever "
        "other jobs share the cores (see the load average above).",
    ]
    lines += [
        "",
        f"### HTTP layer alone: {args.layer_requests} conditional GETs answered 304, "
        f"{args.concurrency} concurrent",
        "",
        "| client | requests/s (measured) | client CPU µs/request |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {rps:,.0f} | {us:.0f} |" for name, rps, us in layers]
    lines += [
        "",
        "Memory (RSS of the benchmark process and the pool's workers: fetchers + known-entry "
        "sets, which are complete after the first pass):",
        "",
    ]
    for layout, mem in memory.items():
        lines += [f"- {layout}, after {n:,} probes: {mib:.1f} MiB" for n, mib in sorted(mem.items())]
    lines += [
        "",
        f"### Peer: `reader` {__import__('reader').__version__} on the same farm",
        "",
        f"`update_feeds(scheduled=False, workers={args.reader_workers})` over {args.reader_feeds} "
        "feeds, SQLite storage in a temporary directory.",
        "",
        "| pass | feeds | seconds | feeds/s | "
        + " | ".join(f"{layout}: probes/s / reader's" for layout in memory) + " |",
        "|---|---|---|---|" + "---|" * len(memory),
    ]
    for k, (name, n, secs) in enumerate(reader_rows):
        ratios = " | ".join(
            f"**{[p for p in phases if p.layout == layout][k].rate / (n / secs):.1f}x**"
            for layout in memory
        )
        lines.append(f"| {name} | {n} | {secs:.1f} | {n / secs:,.0f} | {ratios} |")
    lines.append("")
    text = "\n".join(lines)
    write_between_markers(args.out, text)
    print(text)


START, END = "<!-- figures:start -->", "<!-- figures:end -->"


def write_between_markers(path: Path, figures: str) -> None:
    """Replace the text between the figure markers of ``path``, keeping the prose around them."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if START in old and END in old:
        head, rest = old.split(START, 1)
        tail = rest.split(END, 1)[1]
    else:
        head, tail = "# Probe pipeline benchmark\n\n", "\n"
    path.write_text(f"{head}{START}\n{figures}\n{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    main()
