"""HTTP client transports against the feed farm: requests/s at several concurrencies.

Compares plain ``httpx.AsyncClient`` (default pool and a pool sized to the
concurrency), httpx over ``httpx_aiohttp.AiohttpTransport``, and raw aiohttp,
for full 200 responses (20-entry RSS documents, gzip) and for 304s (a matching
If-None-Match).  The farm runs in a child process so that server and client
each get a core.  Writes the table between the figure markers of
``docs/bench-transport.md`` (the prose around them is kept).

Run:  .venv/bin/python benchmarks/machinery/bench_transport.py [--seconds 3] [--feeds 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from proxy.farm import FarmProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "bench-transport.md"
START, END = "<!-- figures:start -->", "<!-- figures:end -->"

Fetch = Callable[[str, dict[str, str]], Awaitable[int]]


@dataclass(frozen=True)
class Cell:
    client: str
    case: str
    concurrency: int
    rps: float
    errors: int
    bad_status: int
    client_us: float
    """Client process CPU time per request (µs): robust to a busy machine."""
    server_us: float
    """Farm process CPU time per request (µs)."""


class Client:
    """One way of sending GETs; ``fetch`` returns the status after reading the body."""

    def __init__(self, name: str, concurrency: int) -> None:
        self.name = name
        self.concurrency = concurrency
        self._httpx: httpx.AsyncClient | None = None
        self._aiohttp: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        n = self.concurrency
        timeout = httpx.Timeout(30.0)
        if self.name == "httpx default pool":
            self._httpx = httpx.AsyncClient(timeout=timeout)
        elif self.name == "httpx limits=c":
            limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
            self._httpx = httpx.AsyncClient(timeout=timeout, limits=limits)
        elif self.name == "httpx + AiohttpTransport":
            limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
            self._httpx = httpx.AsyncClient(
                timeout=timeout, transport=AiohttpTransport(limits=limits)
            )
        elif self.name == "raw aiohttp":
            self._aiohttp = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=n),
                timeout=aiohttp.ClientTimeout(total=30.0),
            )
        else:
            raise ValueError(f"unknown client {self.name!r}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._httpx is not None:
            await self._httpx.aclose()
        if self._aiohttp is not None:
            await self._aiohttp.close()

    async def fetch(self, url: str, headers: dict[str, str]) -> int:
        if self._httpx is not None:
            resp = await self._httpx.get(url, headers=headers)
            return resp.status_code  # .get() reads (and decodes) the body
        assert self._aiohttp is not None
        async with self._aiohttp.get(url, headers=headers) as r:
            await r.read()
            return r.status


CLIENTS = ["httpx default pool", "httpx limits=c", "httpx + AiohttpTransport", "raw aiohttp"]


async def etags(base: str, feeds: int) -> list[str]:
    """The current ETag of every feed (gzip representation, as the clients accept gzip)."""
    async with aiohttp.ClientSession() as s:

        async def one(i: int) -> str:
            async with s.get(f"{base}/feeds/{i}.xml", headers={"Accept-Encoding": "gzip"}) as r:
                await r.read()
                return r.headers["ETag"]

        return list(await asyncio.gather(*(one(i) for i in range(feeds))))


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    client_name: str,
    case: str,
    concurrency: int,
    base: str,
    tags: list[str],
    seconds: float,
    farm_pid: int,
) -> Cell:
    feeds = len(tags)
    expected = 304 if case == "304" else 200
    done = errors = bad = 0
    async with Client(client_name, concurrency) as client:
        # warm-up: open the connections before the clock starts
        await asyncio.gather(
            *(client.fetch(f"{base}/feeds/{i % feeds}.xml", {}) for i in range(concurrency))
        )
        deadline = time.perf_counter() + seconds

        async def worker(k: int) -> None:
            nonlocal done, errors, bad
            i = k
            while time.perf_counter() < deadline:
                feed = i % feeds
                i += concurrency
                headers = {"If-None-Match": tags[feed]} if case == "304" else {}
                try:
                    status = await client.fetch(f"{base}/feeds/{feed}.xml", headers)
                except (httpx.HTTPError, aiohttp.ClientError, OSError):
                    errors += 1
                    continue
                done += 1
                if status != expected:
                    bad += 1

        t0, c0, s0 = time.perf_counter(), time.process_time(), proc_cpu(farm_pid)
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - t0
        client_cpu, server_cpu = time.process_time() - c0, proc_cpu(farm_pid) - s0
    n = max(done, 1)
    return Cell(
        client_name,
        case,
        concurrency,
        done / elapsed,
        errors,
        bad,
        client_cpu / n * 1e6,
        server_cpu / n * 1e6,
    )


def table(cells: list[Cell], concurrencies: list[int]) -> list[str]:
    lines = []
    for case, title in (
        ("200", "200 with a 20-entry RSS body (gzip)"),
        ("304", "304 Not Modified"),
    ):
        lines.append(
            f"**{title}** — requests/s, and in brackets the client's CPU time per request "
            "in µs (median of repeats)\n"
        )
        lines.append("| client | " + " | ".join(f"c={c}" for c in concurrencies) + " |")
        lines.append("|---|" + "---:|" * len(concurrencies))
        for name in CLIENTS:
            row = []
            for c in concurrencies:
                got = [x for x in cells if (x.client, x.case, x.concurrency) == (name, case, c)]
                rps = statistics.median(x.rps for x in got)
                cpu = statistics.median(x.client_us for x in got)
                flag = "" if all(x.errors == 0 and x.bad_status == 0 for x in got) else " (!)"
                row.append(f"{rps:,.0f} ({cpu:,.0f} µs){flag}")
            lines.append(f"| {name} | " + " | ".join(row) + " |")
        lines.append("")
    lines.append(
        "**The farm itself** — its CPU time per request while raw aiohttp drives it "
        "(the busiest cells, so fixed per-wakeup costs are best amortised), and the rate "
        "one core could serve at that cost\n"
    )
    lines.append("| case | " + " | ".join(f"c={c}" for c in concurrencies) + " |")
    lines.append("|---|" + "---:|" * len(concurrencies))
    for case in ("200", "304"):
        row = []
        for c in concurrencies:
            us = statistics.median(
                x.server_us
                for x in cells
                if (x.client, x.case, x.concurrency) == ("raw aiohttp", case, c)
            )
            row.append(f"{us:,.0f} µs → {1e6 / us:,.0f}/s")
        lines.append(f"| {case} | " + " | ".join(row) + " |")
    lines.append("")
    return lines


def write_doc(lines: list[str]) -> None:
    block = "\n".join([START, *lines, END])
    text = DOC.read_text() if DOC.exists() else f"# HTTP transport benchmark\n\n{START}\n{END}\n"
    if START not in text or END not in text:
        text += f"\n{START}\n{END}\n"
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(head + block + tail)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per cell")
    parser.add_argument("--feeds", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=1, help="runs per cell (median is kept)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[5, 50, 200])
    parser.add_argument("--no-write", action="store_true", help="print only, leave the doc alone")
    args = parser.parse_args()

    cells: list[Cell] = []
    load_before = os.getloadavg()
    farm_args = ["--feeds", str(args.feeds), "--entries", "20", "--prefill", "20"]
    with FarmProcess(farm_args) as farm:
        tags = await etags(farm.url, args.feeds)
        for _ in range(args.repeats):
            for case in ("200", "304"):
                for c in args.concurrency:
                    for name in CLIENTS:
                        cell = await measure(
                            name, case, c, farm.url, tags, args.seconds, int(farm.info["pid"])
                        )
                        cells.append(cell)
                        print(
                            f"{name:26s} {case} c={c:<4d} {cell.rps:9,.0f} req/s"
                            f"  client {cell.client_us:5.0f} µs/req  farm {cell.server_us:4.0f} µs/req"
                            f"  errors={cell.errors} unexpected={cell.bad_status}",
                            flush=True,
                        )
        farm.stop()
    load_after = os.getloadavg()

    versions = ", ".join(
        f"{p} {metadata.version(p)}" for p in ("httpx", "httpx-aiohttp", "aiohttp")
    )
    lines = [
        "Command: `.venv/bin/python benchmarks/machinery/bench_transport.py "
        + f"--seconds {args.seconds:g} --feeds {args.feeds} --repeats {args.repeats}`",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, {versions}; "
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
        "(the machine is shared, so treat differences under ~20% as noise). "
        f"Farm: {args.feeds} feeds in a child process, 20 entries each "
        "(~9 KB plain, ~1.1 KB gzip: synthetic text compresses well); clients round-robin over the feeds; "
        "(!) marks cells with errors or unexpected statuses.",
        "",
        *table(cells, args.concurrency),
    ]
    print("\n".join(lines))
    if not args.no_write:
        write_doc(lines)
        print(f"wrote {DOC}")


if __name__ == "__main__":
    asyncio.run(main())
