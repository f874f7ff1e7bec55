"""Probe pipeline throughput (fetch + parse + new-entry detection, no database) against the farm.

The feed farm runs in a child process (``FarmProcess``) serving ``--feeds``
RSS feeds of 20 entries.  One :class:`proxy.feeds.Fetcher` (one shared
client) probes them from ``--concurrency`` coroutines:

* **changed**: every probe is sent without validators, so every answer is a
  full 200 document that is decompressed, parsed and split into known/new
  entries (each feed's ``MemoryKnownEntries`` is filled on its first probe);
* **not modified**: every probe carries the validators learned above, so
  every answer is a 304.

RSS of this process is sampled after 10k and after ``--probes`` probes of the
changed phase: the known-entry sets are complete after the first pass over
the feeds, so growth after that point is the fetch layer's.

Then the ``reader`` library (PyPI ``reader``) updates ``--reader-feeds`` of the
same farm's feeds with ``update_feeds(workers=…)``, first pass (200s, parse,
store) and second pass (304s), as a peer; the ratio is reported.

Writes ``docs/bench-probe.md``.

Run:  .venv/bin/python benchmarks/bench_probe.py [--feeds 10000] [--probes 100000] [--concurrency 64]
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

DOC = Path(__file__).resolve().parent.parent / "docs" / "bench-probe.md"


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


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
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


async def run_fetcher(
    args: argparse.Namespace, base: str, farm_pid: int
) -> tuple[list[Phase], dict[int, float]]:
    from proxy.feeds import FeedState, Fetcher, FetcherSettings, MemoryKnownEntries, Ok

    settings = FetcherSettings(
        allow_private_networks=True,
        per_host_concurrency=args.concurrency,  # the whole farm is one host
        per_host_min_delay=0,
        max_connections=args.concurrency,
        parse_threads=args.parse_threads,
        parse_processes=args.parse_processes,
    )
    urls = [f"{base}/feeds/{i}.xml" for i in range(args.feeds)]
    known = [MemoryKnownEntries() for _ in urls]
    states: list[FeedState] = [FeedState(u) for u in urls]
    memory: dict[int, float] = {}
    phases: list[Phase] = []
    now = datetime.now(UTC)

    async with Fetcher(settings) as fetcher:

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
                        memory[done] = rss_mib()

            workers = [os.getpid(), *_parse_workers(fetcher)]
            cpu0 = sum(cpu_seconds(p) for p in workers)
            farm0 = cpu_seconds(farm_pid)
            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
            seconds = time.perf_counter() - t0
            workers = [os.getpid(), *_parse_workers(fetcher)]
            return Phase(
                name, total, seconds, outcomes, parsers,
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


def _parse_workers(fetcher: object) -> list[int]:
    from concurrent.futures import ProcessPoolExecutor

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
    ap.add_argument("--probes", type=int, default=100_000)
    ap.add_argument("--probes-304", type=int, default=50_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--parse-threads", type=int, default=1)
    ap.add_argument("--parse-processes", type=int, default=0)
    ap.add_argument("--reader-feeds", type=int, default=1000)
    ap.add_argument("--reader-workers", type=int, default=16)
    ap.add_argument("--layer-requests", type=int, default=10_000)
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default=None,
                    help="event loop of the client and the farm (default: proxy.aio's choice)")
    ap.add_argument("--out", type=Path, default=DOC)
    args = ap.parse_args()
    if args.loop:
        os.environ["PROXY_EVENT_LOOP"] = args.loop  # the farm child process inherits it

    from proxy.sim.feedfarm import FarmProcess

    farm_args = ["--feeds", str(args.feeds), "--entries", "20", "--prefill", "20"]
    with FarmProcess(farm_args) as farm:
        base = farm.url.rstrip("/")
        assert farm.proc is not None
        layers = aio.run(run_layers(args, base))
        phases, memory = aio.run(run_fetcher(args, base, farm.proc.pid))
        reader_rows = run_reader(args, base)

    load = os.getloadavg()
    cmd = (
        f".venv/bin/python benchmarks/bench_probe.py --feeds {args.feeds} --probes {args.probes} "
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
        "child process on 127.0.0.1; one `Fetcher` (one shared cookie-less httpx client over the "
        "lean aiohttp transport of `proxy.feeds._transport`) probes it.",
        "",
        "| phase | probes | seconds | probes/s (measured) | client CPU µs/probe | farm CPU µs/probe "
        "| capacity of 2 idle cores, probes/s | outcomes | parser |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in phases:
        lines.append(
            f"| {p.name} | {p.probes} | {p.seconds:.1f} | **{p.rate:,.0f}** | {p.client_us:.0f} "
            f"| {p.farm_us:.0f} | {p.capacity:,.0f} | {dict(p.outcomes)} | {dict(p.parsers) or '-'} |"
        )
    lines += [
        "",
        "'Capacity' is 2 / (client + farm CPU seconds per probe): what the pipeline and the farm "
        "together would sustain on this 2-core machine if nothing else ran. The measured rate "
        "is lower whenever other jobs share the cores (see the load average above).",
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
        "Memory (RSS of the benchmark process, fetcher + known-entry sets, which are "
        "complete after the first pass):",
        "",
    ]
    lines += [f"- after {n:,} probes: {mib:.1f} MiB" for n, mib in sorted(memory.items())]
    lines += [
        "",
        f"### Peer: `reader` {__import__('reader').__version__} on the same farm",
        "",
        f"`update_feeds(scheduled=False, workers={args.reader_workers})` over {args.reader_feeds} "
        "feeds, SQLite storage in a temporary directory.",
        "",
        "| pass | feeds | seconds | feeds/s | our probes/s / reader's |",
        "|---|---|---|---|---|",
    ]
    ours = [phases[0].rate, phases[1].rate]
    for (name, n, secs), mine in zip(reader_rows, ours, strict=True):
        lines.append(f"| {name} | {n} | {secs:.1f} | {n / secs:,.0f} | **{mine / (n / secs):.1f}x** |")
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
