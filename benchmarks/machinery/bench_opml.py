"""Time OPML import and export through the real API; write the figures into docs/ui.md.

An OPML document of ``--outlines`` feed outlines (default 10,000) in nested folders
(``--folders`` top folders, each with a sub-folder), one in ``--refused-every`` with an
``ftp:`` URL the SSRF guard refuses, is:

* parsed (defusedxml check + listparser), alone;
* imported with ``POST /api/v1/feeds/opml`` into an empty account (every URL added);
* imported again (every URL known);
* exported with ``GET /api/v1/feeds/opml``;

on SQLite (a file) and PostgreSQL (a throw-away database on
``$PROXY_TEST_POSTGRES_URL``, default ``postgresql+asyncpg://postgres@127.0.0.1:5432/test``;
skipped if unreachable). The service runs in process without its chronon loop; requests go
through the ASGI app (no socket), so the figures are the proxy's own work.

Usage: .venv/bin/python benchmarks/machinery/bench_opml.py [--outlines 10000] [--out docs/ui.md]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from proxy.api import make_app
from proxy.feeds.opml import parse_opml
from proxy.service import ProxyService
from proxy.settings import load_settings

BEGIN, END = "<!-- bench_opml:begin -->", "<!-- bench_opml:end -->"


def make_opml(outlines: int, folders: int, refused_every: int) -> bytes:
    per = max(outlines // folders, 1)
    parts = ['<?xml version="1.0" encoding="UTF-8"?>\n<opml version="2.0"><head><title>bench</title></head><body>']
    n = 0
    for f in range(folders):
        parts.append(f'<outline text="folder {f}"><outline text="sub {f}">')
        for _ in range(per if f < folders - 1 else outlines - n):
            scheme = "ftp" if refused_every and n % refused_every == refused_every - 1 else "http"
            parts.append(f'<outline type="rss" text="feed {n}" xmlUrl="{scheme}://127.0.0.1:9/feeds/{n}.xml"/>')
            n += 1
        parts.append("</outline></outline>")
    parts.append("</body></opml>\n")
    return "".join(parts).encode()


async def run_backend(url: str, document: bytes) -> dict[str, float | int]:
    settings = load_settings(database_url=url, allow_private_networks=True, retention_days=0)
    service = ProxyService(settings, run_loop=False, housekeeping=False)
    await service.start()
    try:
        _, key = await service.store.create_user("bench")
        app = make_app(settings, service=service, manage_service=False)
        auth = {"Authorization": f"Bearer {key}", "Content-Type": "text/x-opml"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench",
                                     timeout=3600) as client:
            t = time.perf_counter()
            first = await client.post("/api/v1/feeds/opml", content=document, headers=auth)
            import_s = time.perf_counter() - t
            assert first.status_code == 200, first.text[:300]
            t = time.perf_counter()
            again = await client.post("/api/v1/feeds/opml", content=document, headers=auth)
            again_s = time.perf_counter() - t
            t = time.perf_counter()
            export = await client.get("/api/v1/feeds/opml", headers={"Authorization": f"Bearer {key}"})
            export_s = time.perf_counter() - t
        body, body2 = first.json(), again.json()
        assert body2["added"] == 0 and body2["known"] == body["added"]
        return {"added": body["added"], "refused": body["refused"], "import_s": import_s,
                "again_s": again_s, "export_s": export_s, "export_bytes": len(export.content)}
    finally:
        await service.stop()


async def postgres_url() -> tuple[str, str] | None:
    import asyncpg

    base = os.environ.get("PROXY_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
    name = f"proxy_bench_{uuid.uuid4().hex[:8]}"
    dsn = base.replace("+asyncpg", "")
    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except (OSError, asyncpg.PostgresError):
        return None
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return base.rsplit("/", 1)[0] + "/" + name, name


async def drop_postgres(name: str) -> None:
    import asyncpg

    dsn = os.environ.get("PROXY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test").replace("+asyncpg", "")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outlines", type=int, default=10_000)
    ap.add_argument("--folders", type=int, default=100)
    ap.add_argument("--refused-every", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path("docs/ui.md"))
    args = ap.parse_args()

    document = make_opml(args.outlines, args.folders, args.refused_every)
    t = time.perf_counter()
    feeds = parse_opml(document)
    parse_s = time.perf_counter() - t
    assert len(feeds) == args.outlines

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("SQLite (file)", await run_backend(f"sqlite+aiosqlite:///{tmp}/bench.sqlite3", document)))
    pg = await postgres_url()
    if pg is not None:
        try:
            rows.append(("PostgreSQL", await run_backend(pg[0], document)))
        finally:
            await drop_postgres(pg[1])

    load = os.getloadavg()
    lines = [
        BEGIN,
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{os.cpu_count()} cores, load average {load[0]:.1f} (the machine was shared with other "
        "engineers' builds and tests: these are figures under load, not a quiet machine's), with",
        "",
        f"    .venv/bin/python benchmarks/machinery/bench_opml.py --outlines {args.outlines}",
        "",
        f"A document of {args.outlines:,} outlines in {args.folders} nested folders "
        f"({len(document) / 1e6:.1f} MB; one URL in {args.refused_every} is `ftp:` and refused). "
        f"Parsing alone (defusedxml check and listparser): **{parse_s:.2f} s**.",
        "",
        "| database | first import (all added) | per outline | import again (all known) | export (OPML 2.0) |",
        "|---|---|---|---|---|",
    ]
    for name, r in rows:
        per_ms = 1000 * float(r["import_s"]) / args.outlines
        lines.append(
            f"| {name} | {r['import_s']:.1f} s ({r['added']:,} added, {r['refused']} refused) | "
            f"{per_ms:.2f} ms | {r['again_s']:.1f} s | {r['export_s']:.2f} s ({int(r['export_bytes']) / 1e6:.1f} MB) |")
    if pg is None:
        lines.append("| PostgreSQL | skipped: server unreachable | | | |")
    lines.append(END)
    block = "\n".join(lines)
    print(block)
    text = args.out.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    args.out.write_text(head + block + tail, encoding="utf-8")


if __name__ == "__main__":
    asyncio.run(main())
