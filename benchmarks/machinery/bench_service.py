"""The live loop under load: N feeds on the farm, P profiles, budget C per 1 s chronon, SQLite and PostgreSQL.

    .venv/bin/python benchmarks/machinery/bench_service.py --feeds 10000 --profiles 100000 \
        --budget 200 --chronon 1.0 --duration 120 --db sqlite --db postgres

Setup (not timed): the feed farm runs as its own process (``proxy farm serve``,
Poisson publications at ``--rate`` per feed per minute, real time); feeds and
profiles are written through the :class:`~proxy.store.Store` API (the API's
own path minus HTTP). Each profile is a trigger rule: a random feed every ``--every``
minutes (default 10; staggered period starts, so fires spread evenly), slack 2 minutes,
firing on one of the farm's filler words (~28 % of entries), then one or two
random query feeds within 5 minutes.

Measured while :class:`~proxy.service.ProxyService` runs (restored from the
database exactly as after a restart, then ticking): tick jitter (lateness of
each tick behind its absolute schedule), decision time per tick, probes started
per chronon, probes persisted per second, the writer's backlog, and the
database's growth per stored entry.

Figures go to ``docs/bench-service.md`` (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from proxy.farm import FarmProcess
from proxy.service import ProxyService
from proxy.settings import load_settings
from proxy.store import RuleInput, Store, upgrade_database

WORDS = ["market", "energy", "report", "city", "council", "weather", "river", "election", "museum", "football", "harvest", "railway", "bridge", "festival", "science", "budget", "hospital", "school", "review", "storm", "airport", "library", "concert", "garden", "opera"]


def _watch_rule(rng: random.Random, feed_ids: list[int]) -> RuleInput:
    """AuctionWatch over 2-3 random feeds: moved only by updates, found by background probes."""
    feeds = rng.sample(feed_ids, rng.choice((2, 3)))
    spec = {"name": "w", "watch": {"feeds": [str(f) for f in feeds], "within": "5m"}}
    return RuleInput("w", spec, tuple(feeds))


def _rule(rng: random.Random, feed_ids: list[int], start: dt.datetime, every_min: int) -> RuleInput:
    trigger, *queries = rng.sample(feed_ids, 1 + rng.choice((1, 2)))
    spec = {
        "name": "r",
        "trigger": {"feed": str(trigger), "every": f"{every_min}m", "slack": "2m",
                    "when": {"contains": [rng.choice(WORDS)]}},
        "query": [{"feed": str(q), "within": "5m"} for q in queries],
        # Staggered anchors: each rule first fires somewhere in its first period.
        "period": {"start": (start + dt.timedelta(seconds=rng.uniform(0, 60 * every_min))).isoformat()},
    }
    return RuleInput("r", spec, (trigger, *queries))


async def setup(url: str, farm_url: str, feeds: int, profiles: int, seed: int, every_min: int,
                watch_share: float = 0.0) -> None:
    await upgrade_database(url)
    rng = random.Random(seed)
    async with Store.from_url(url) as store:
        user_id, _ = await store.create_user("bench")
        ids: list[int] = []
        t0 = time.perf_counter()
        sem = asyncio.Semaphore(1 if url.startswith("sqlite") else 16)

        async def feed(i: int) -> int:
            async with sem:
                f, _ = await store.register_feed_for(user_id, f"{farm_url}/feeds/{i}.xml")
                return f.feed.id

        ids = list(await asyncio.gather(*(feed(i) for i in range(feeds))))
        print(f"  {feeds} feeds registered in {time.perf_counter() - t0:.1f} s", flush=True)
        start = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
        t0 = time.perf_counter()
        rules = [_watch_rule(rng, ids) if rng.random() < watch_share else _rule(rng, ids, start, every_min)
                 for _ in range(profiles)]
        await bulk_profiles(store, user_id, rules)
        print(f"  {profiles} profiles bulk-inserted in {time.perf_counter() - t0:.1f} s", flush=True)


async def bulk_profiles(store: Store, user_id: int, rules: list[RuleInput]) -> None:
    """Profiles, rules and rule-feed links in a few multi-row INSERTs.

    Setup only: creating 100,000 profiles one transaction each through
    ``Store.create_profile`` takes tens of minutes on this machine, and the
    benchmark is about the loop, not about profile creation. The rows are what
    ``create_profile`` writes (same tables, same columns).
    """
    from sqlalchemy import insert

    from proxy.store._models import ProfileRow, RuleFeedRow, RuleRow

    now = dt.datetime.now(dt.UTC)
    async with store.engine.begin() as conn:
        for lo in range(0, len(rules), 5000):
            chunk = list(enumerate(rules[lo:lo + 5000], start=lo + 1))
            await conn.execute(insert(ProfileRow), [
                {"id": i, "user_id": user_id, "name": f"p{i}", "created_at": now, "updated_at": now}
                for i, _ in chunk])
            await conn.execute(insert(RuleRow), [
                {"id": i, "profile_id": i, "name": r.name, "position": 0, "spec": r.spec, "state": None}
                for i, r in chunk])
            await conn.execute(insert(RuleFeedRow), [
                {"rule_id": i, "feed_id": f} for i, r in chunk for f in sorted(set(r.feed_ids))])
        if conn.dialect.name == "postgresql":
            # Explicit ids: move the sequences past them, as the store's own inserts expect.
            for table in ("profiles", "rules"):
                await conn.execute(text(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"))


async def counts(store: Store) -> tuple[int, int]:
    health = await store.list_feeds_with_health()
    return sum(h.probes for h in health), sum(h.entries for h in health)


async def db_size(store: Store, url: str) -> int:
    if url.startswith("sqlite"):
        path = Path(url.split("///", 1)[1])
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    async with store.engine.connect() as conn:
        return int((await conn.execute(text("SELECT pg_database_size(current_database())"))).scalar_one())


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(url: str, farm_url: str, args: argparse.Namespace) -> dict[str, Any]:
    print(f"setup {url.split(':')[0]} …", flush=True)
    t_setup = time.perf_counter()
    await setup(url, farm_url, args.feeds, args.profiles, args.seed, args.every, args.watch_share)
    setup_s = time.perf_counter() - t_setup
    settings = load_settings(
        database_url=url, chronon_seconds=args.chronon, budget=args.budget, policy=args.policy,
        allow_private_networks=True, per_host_concurrency=args.budget, per_host_min_delay_seconds=0.0,
        respect_cache_hints=False, retention_days=0, migrate_on_start=False, log_level="WARNING",
    )
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    t0 = time.perf_counter()
    service = ProxyService(settings, housekeeping=False)
    await service.start()
    restore_s = time.perf_counter() - t0
    store = service.store
    probes0, entries0 = await counts(store)
    size0 = await db_size(store, url)
    await asyncio.sleep(args.warmup)
    loop = service.loop
    loop.jitters.clear()
    loop.tick_seconds.clear()
    used0 = service.metrics.budget_used_total._value.get()
    written0 = probes0
    probes_a, _ = await counts(store)
    profiler = None
    if os.environ.get("BENCH_PROFILE"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t_run = time.perf_counter()
    backlog = []
    while time.perf_counter() - t_run < args.duration:
        await asyncio.sleep(5)
        backlog.append(service._writer.backlog if service._writer else 0)
    elapsed = time.perf_counter() - t_run
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.environ["BENCH_PROFILE"])
    probes_b, _entries_b = await counts(store)
    used = service.metrics.budget_used_total._value.get() - used0
    jitters = list(loop.jitters)
    ticks = list(loop.tick_seconds)
    ceis = {s: service.metrics.ceis.labels(state=s)._value.get() for s in ("pending", "captured", "missed")}
    await service.stop()
    async with Store.from_url(url) as store2:
        probes_c, entries_c = await counts(store2)
        size1 = await db_size(store2, url)
    del written0
    return {
        "db": "SQLite" if url.startswith("sqlite") else "PostgreSQL",
        "setup_s": setup_s,
        "restore_s": restore_s,
        "ticks": len(jitters),
        "jitter_p50": pct(jitters, 0.5),
        "jitter_p99": pct(jitters, 0.99),
        "jitter_max": max(jitters) if jitters else float("nan"),
        "tick_p50": pct(ticks, 0.5),
        "tick_p99": pct(ticks, 0.99),
        "started_per_chronon": used / max(1, len(jitters)),
        "persisted_per_s": (probes_b - probes_a) / elapsed,
        "backlog_max": max(backlog) if backlog else 0,
        "backlog_end": backlog[-1] if backlog else 0,
        "entries_run": entries_c - entries0,
        "probes_run": probes_c - probes0,
        "bytes_per_million_entries": (size1 - size0) / max(1, entries_c - entries0) * 1e6,
        "size_end": size1,
        "ceis": ceis,
    }


def report(results: list[dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    lines = [
        "# Service benchmark: the live chronon loop under load",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other work, "
        f"Python {platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"Workload: {args.feeds} farm feeds (Poisson, {args.rate} publications per feed per minute), "
        f"{args.profiles} profiles (one trigger rule each: every {args.every}m, slack 2m, a filler word, "
        f"1-2 query feeds within 5m; a share {args.watch_share:g} are watch rules over 2-3 feeds "
        f"within 5m, moved by background probes), budget {args.budget} per {args.chronon} s chronon, "
        f"policy `{args.policy}`; {args.warmup:.0f} s warm-up, then {args.duration:.0f} s measured.",
        "Target: p99 tick jitter under 10 % of the chronon "
        f"({0.1 * args.chronon * 1000:.0f} ms) while spending the budget.",
        "",
        "| | " + " | ".join(r["db"] for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    rows = [
        ("setup (feeds + profiles via the Store), s", "setup_s", "{:.0f}"),
        ("start-up: restore profiles and CEIs, s", "restore_s", "{:.1f}"),
        ("ticks measured", "ticks", "{}"),
        ("tick jitter p50, ms", "jitter_p50", "ms"),
        ("tick jitter p99, ms", "jitter_p99", "ms"),
        ("tick jitter max, ms", "jitter_max", "ms"),
        ("decision time per tick p50, ms", "tick_p50", "ms"),
        ("decision time per tick p99, ms", "tick_p99", "ms"),
        ("probes started per chronon (budget used)", "started_per_chronon", "{:.1f}"),
        ("probes persisted per second", "persisted_per_s", "{:.1f}"),
        ("writer backlog, max batches", "backlog_max", "{}"),
        ("writer backlog at the end, batches", "backlog_end", "{}"),
        ("entries stored during the run", "entries_run", "{}"),
        ("database growth per million entries (probes, CEIs … included), MB",
         "bytes_per_million_entries", "mb"),
    ]
    for label, key, fmt in rows:
        cells = []
        for r in results:
            v = r[key]
            if fmt == "ms":
                cells.append(f"{v * 1000:.1f}")
            elif fmt == "mb":
                cells.append(f"{v / 1e6:.0f}")
            else:
                cells.append(fmt.format(v))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    ok = [f"{r['db']}: {'met' if r['jitter_p99'] < 0.1 * args.chronon else 'NOT met'}" for r in results]
    lines += ["", "Jitter target: " + "; ".join(ok) + ".", ""]
    lines += [
        "CEIs at the end (engine counts since start): "
        + "; ".join(f"{r['db']} {r['ceis']}" for r in results),
        "",
        "Notes: probes persisted per second is measured from the database (probe rows), not",
        "from the loop; the writer applies decisions in order in one task, so a growing backlog",
        "means the database is the bottleneck, not the loop. Database growth per entry is the",
        "whole growth of the database during the run divided by the entries stored in it.",
        "",
    ]
    return "\n".join(lines)


def _workdir(name: str) -> Path:
    work = Path(name)
    work.mkdir(parents=True, exist_ok=True)
    return work


def _fresh_file(path: Path) -> Path:
    for p in path.parent.glob(path.name + "*"):
        p.unlink()
    return path


def _write(out: str, text_: str) -> None:
    Path(out).write_text(text_)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--feeds", type=int, default=10_000)
    parser.add_argument("--profiles", type=int, default=100_000)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--chronon", type=float, default=1.0)
    parser.add_argument("--policy", default="mrsf-p")
    parser.add_argument("--every", type=int, default=10, help="minutes between a rule's trigger EIs")
    parser.add_argument("--rate", type=float, default=0.2, help="publications per feed per minute")
    parser.add_argument("--watch-share", type=float, default=0.0,
                        help="share of profiles that are watch rules (discovery on: background probes)")
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--warmup", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--db", action="append", choices=("sqlite", "postgres"))
    parser.add_argument("--postgres-admin", default="postgresql+asyncpg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--out", default="docs/bench-service.md")
    parser.add_argument("--workdir", default="/tmp/bench-service")
    args = parser.parse_args()
    dbs = args.db or ["sqlite", "postgres"]
    work = _workdir(args.workdir)
    results = []
    farm_args = ["--feeds", str(args.feeds), "--entries", "20", "--rate", str(args.rate),
                 "--seed", str(args.seed), "--seconds-per-trace-unit", "60"]
    with FarmProcess(farm_args) as farm:
        base = farm.url.rstrip("/")
        for db in dbs:
            if db == "sqlite":
                path = _fresh_file(work / f"bench-{os.getpid()}.sqlite3")
                url = f"sqlite+aiosqlite:///{path}"
                results.append(await run(url, base, args))
            else:
                import asyncpg

                name = f"proxy_bench_{os.getpid()}"
                admin = args.postgres_admin.replace("postgresql+asyncpg://", "postgresql://")
                conn = await asyncpg.connect(admin)
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                await conn.execute(f'CREATE DATABASE "{name}"')
                await conn.close()
                url = args.postgres_admin.rsplit("/", 1)[0] + "/" + name
                try:
                    results.append(await run(url, base, args))
                finally:
                    conn = await asyncpg.connect(admin)
                    await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                    await conn.close()
            print(results[-1], flush=True)
    command = "PYTHONPATH=. .venv/bin/python benchmarks/machinery/bench_service.py " + " ".join(sys.argv[1:])
    text_ = report(results, args, command)
    _write(args.out, text_)
    print(text_)


if __name__ == "__main__":
    asyncio.run(main())
