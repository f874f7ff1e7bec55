"""Time the store's hot paths on SQLite and PostgreSQL; write docs/bench-store.md.

* record_probe: one transaction per probe with ``--entries`` parsed entries of
  which a quarter are new, one EI capture and a feed health update — what the
  live loop does for every probe;
* known_identities: "which of these 50 entries have we seen?" on a feed whose
  history holds ``--history`` entries (one indexed query, UNIQUE (feed_id, identity));
* pending_ceis_with_eis: restoring ``--ceis`` pending CEIs (3 EIs each) at start-up;
* metrics_summary of a user with those CEIs over the last 60 chronons.

PostgreSQL runs in a throw-away database (``proxy_bench_<uuid>``) on
``$PROXY_TEST_POSTGRES_URL`` (default ``postgresql+asyncpg://postgres@127.0.0.1:5432/test``)
and is skipped if unreachable.

Usage: .venv/bin/python benchmarks/machinery/bench_store.py [--probes 300] [--history 50000] [--out docs/bench-store.md]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from proxy.store import (
    CaptureInput,
    Cei,
    CeiStateChange,
    FeedUpdate,
    NewEi,
    NewEntry,
    ProbeInput,
    ProbeItem,
    RuleInput,
    Store,
    upgrade_database,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ADMIN = os.environ.get("PROXY_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")


async def _timed(fn: Callable[[], Awaitable[object]], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return samples


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{1000 * statistics.median(ordered):.2f} ms (p95 {1000 * p95:.2f} ms)"


async def bench_backend(url: str, args: argparse.Namespace) -> dict[str, str]:
    await upgrade_database(url)
    rows: dict[str, str] = {}
    async with Store.from_url(url) as store:
        user_id, _ = await store.create_user("bench")
        feeds = [
            (await store.register_feed_for(user_id, f"http://bench.example/{i}"))[0].feed.id
            for i in range(10)
        ]
        profile = await store.create_profile(user_id, "p", [RuleInput("r", {}, tuple(feeds))])

        # A long history on feed 0, written in big probes (not timed).
        hist_feed = feeds[0]
        batch = 2000
        for start in range(0, args.history, batch):
            await store.record_probe(
                ProbeInput(hist_feed, T0, "ok"),
                [NewEntry(f"h{i}", title=f"t{i}") for i in range(start, min(args.history, start + batch))],
            )

        if store.engine.dialect.name == "postgresql":
            # A bulk-loaded table has no statistics until autovacuum's ANALYZE runs;
            # without them the planner filters a feed's whole history instead of
            # probing the (feed_id, identity) index. A live database gets analysed
            # as it grows, so measure that state.
            async with store.engine.connect() as conn:
                await conn.exec_driver_sql("ANALYZE entries")

        # record_probe as in the live loop.
        async def make_ceis(prefix: str) -> list[Cei]:
            return [
                await store.add_cei(f"{prefix}{i}", profile.id, i, [NewEi(0, feeds[1 + i % 9], i, i + 5)])
                for i in range(args.probes)
            ]

        def probe_item(n: int, ceis: list[Cei], base: int, resolve: bool) -> ProbeItem:
            feed = feeds[1 + n % 9]
            # The feed's window slides by a quarter per visit: a quarter of its entries are new.
            visit_base = base + (n // 9) * (args.entries // 4)
            at = T0 + dt.timedelta(seconds=n)
            return (
                ProbeInput(feed, at, "ok", finished_at=at, chronon=n, http_status=200, bytes=20_000),
                [NewEntry(f"e{visit_base + k}", title="x", summary="y" * 300) for k in range(args.entries)],
                [CaptureInput(ceis[n].eis[0].id, n)],
                [CeiStateChange(ceis[n].id, "captured", n)] if resolve else [],
                FeedUpdate(probed_at=at, outcome="ok", update_validators=True, etag=f'"{n}"'),
            )

        single_ceis = await make_ceis("c")
        counter = iter(range(10**9))

        async def one_probe() -> None:
            await store.record_probe(*probe_item(next(counter), single_ceis, 0, resolve=False))

        wall = time.perf_counter()
        samples = await _timed(one_probe, args.probes)
        wall = time.perf_counter() - wall
        rows["record_probe (20 entries, 1 capture)"] = f"{_ms(samples)}; {args.probes / wall:.0f} probes/s"

        # record_probes: the service's writer stores the probes that finished meanwhile
        # in one call (one transaction); probes like those above, --batch at a time.
        batch_ceis = await make_ceis("b")
        batch_counter = iter(range(10**9))

        async def one_batch() -> None:
            await store.record_probes(
                [probe_item(next(batch_counter), batch_ceis, 10**6, resolve=True) for _ in range(args.batch)]
            )

        rounds = max(1, args.probes // args.batch)
        wall = time.perf_counter()
        samples = await _timed(one_batch, rounds)
        wall = time.perf_counter() - wall
        rows[f"record_probes (batches of {args.batch}, each as above + CEI resolved)"] = (
            f"{_ms(samples)} per batch; {rounds * args.batch / wall:.0f} probes/s"
        )

        probe_ids = [f"h{i}" for i in range(0, args.history, max(1, args.history // 40))][:40]
        query = probe_ids + [f"new{i}" for i in range(10)]
        samples = await _timed(lambda: store.known_identities(hist_feed, query), 200)
        rows[f"known_identities (50 ids, history {args.history:,})"] = _ms(samples)

        for i in range(args.ceis):
            await store.add_cei(
                f"r{i}", profile.id, i, [NewEi(k, feeds[1 + (i + k) % 9], i, i + 10) for k in range(3)]
            )
        samples = await _timed(store.pending_ceis_with_eis, 5)
        rows[f"pending_ceis_with_eis ({args.ceis:,} CEIs)"] = _ms(samples)

        for c in range(60):
            await store.record_chronon_metrics(c, started_at=T0, budget=10, used=c % 11)
        samples = await _timed(lambda: store.metrics_summary(user_id), 50)
        rows["metrics_summary"] = _ms(samples)
        assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    return rows


async def _admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(ADMIN.replace("postgresql+asyncpg://", "postgresql://", 1), timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def main(args: argparse.Namespace) -> str:
    results: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["SQLite (aiosqlite, WAL)"] = await bench_backend(
            f"sqlite+aiosqlite:///{Path(tmp) / 'bench.sqlite3'}", args
        )
    name = f"proxy_bench_{uuid.uuid4().hex[:10]}"
    try:
        await _admin(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # no server: report and carry on with SQLite only
        print(f"PostgreSQL skipped: {exc!r}")
    else:
        try:
            from sqlalchemy.engine import make_url

            url = make_url(ADMIN).set(database=name).render_as_string(hide_password=False)
            results["PostgreSQL (asyncpg)"] = await bench_backend(url, args)
        finally:
            await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    backends = list(results)
    ops = list(next(iter(results.values())))
    lines = [
        "# Store benchmark",
        "",
        "Generated by `benchmarks/machinery/bench_store.py` "
        f"(`--probes {args.probes} --history {args.history} --entries {args.entries} --ceis {args.ceis}`) "
        f"on {platform.machine()} with {os.cpu_count()} CPUs shared with other work, Python {platform.python_version()}.",
        "Medians over repeated calls, one client, the database on the same machine.",
        "The machine is shared: repeated runs differ by up to 5x; read the orders of magnitude.",
        "",
        "| operation | " + " | ".join(backends) + " |",
        "|---|" + "---|" * len(backends),
    ]
    lines += [f"| {op} | " + " | ".join(results[b].get(op, "—") for b in backends) + " |" for op in ops]
    lines += [
        "",
        "What it means: at the default budget (10 probes per 60 s chronon) the store needs",
        "well under 1 % of a chronon for its writes on either backend; `known_identities`",
        "stays an index lookup however long a feed's history grows; restoring thousands of",
        "pending CEIs at start-up takes about half a second (median).",
        "",
        "Command: `.venv/bin/python benchmarks/machinery/bench_store.py` (about 4 minutes, mostly",
        "loading the history).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--history", type=int, default=50_000)
    parser.add_argument("--entries", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--ceis", type=int, default=2_000)
    parser.add_argument("--out", type=Path, default=Path("docs/bench-store.md"))
    arguments = parser.parse_args()
    report = asyncio.run(main(arguments))
    arguments.out.write_text(report, encoding="utf-8")
    print(report)
