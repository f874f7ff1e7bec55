"""PostgreSQL away and back (issue 24.2), through a fault-injecting TCP proxy between a real
``proxy serve`` and the machine's PostgreSQL (which keeps running for everyone else).

During the outage: ``/readyz`` answers 503 saying the database is unavailable (not the
driver's text), ``/healthz`` stays 200, API calls that need the database answer 503
with a plain message, and the loop keeps ticking and probing (``/metrics``). After it:
``/readyz`` is 200 again, every chronon ticked meanwhile and every probe made meanwhile
is in the database (nothing dropped), and ``proxy db check`` finds no violation.
SIGTERM drains the backlog within ``PROXY_DRAIN_SECONDS``; a second SIGTERM exits at once.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from proxy.farm import FeedFarm
from proxy.ports import free_port
from proxy.store import Store
from proxy.store._models import ChrononMetricsRow, ProbeRow
from tests.fault_proxy import FaultProxy
from tests.proc_support import communicate, kill, signal_process
from tests.test_e2e_sigkill import _cli, _env, _ready, _serve
from tests.test_e2e_support import eventually

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

FEEDS = 4


def _through(url: str, port: int) -> str:
    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


def _metric(text: str, name: str) -> float:
    """The sum of a metric's samples; ``name`` exactly (proxy_write_backlog is a prefix of
    proxy_write_backlog_bytes)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith((f"{name} ", f"{name}{{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _events(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


async def _setup(api: httpx.AsyncClient, farm: FeedFarm) -> None:
    await _ready(api)
    ids = [(await api.post("/api/v1/feeds", json={"url": farm.url(f"f{i}")})).json()["id"]
           for i in range(FEEDS)]
    for i in range(FEEDS):
        r = await api.post("/api/v1/profiles", json={"name": f"p{i}", "rules": [
            {"name": "tick", "trigger": {"feed": str(ids[i]), "every": "1s", "slack": "1s"},
             "query": [{"feed": str(ids[(i + 1) % FEEDS]), "within": "1s"}]}]})
        assert r.status_code == 201, r.text


async def test_the_loop_outlives_a_database_outage_and_loses_nothing(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    async with FaultProxy(("127.0.0.1", make_url(fresh_postgres_url).port or 5432)) as pg:
        env = _env(_through(fresh_postgres_url, pg.port))
        env.update({"PROXY_CHRONON_SECONDS": "0.1", "PROXY_LEASE_TTL_SECONDS": "30",
                    "PROXY_WRITE_LAG_READY_SECONDS": "2"})
        key = (await _cli(env, "users", "create", "alice")).strip().splitlines()[-1]
        port = free_port()
        log = tmp_path / "serve.log"
        async with FeedFarm([f"f{i}" for i in range(FEEDS)], prefill=2) as farm, \
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                  headers={"Authorization": f"Bearer {key}"}, timeout=10) as api, \
                _serve(env, port, log):
            await _setup(api, farm)
            await asyncio.sleep(1)
            before = _metric((await api.get("/metrics")).text, "proxy_probes_total")
            chronon_before = (await api.get("/readyz")).json()["chronon"]
            pg.cut()
            cut_at = time.monotonic()

            async def unready() -> dict[str, Any] | None:
                r = await api.get("/readyz")
                return r.json() if r.status_code == 503 else None

            body = await eventually(unready, within=15, what="/readyz 503 during the outage")
            assert body["database"] is False and "database" in body["detail"]
            assert "asyncpg" not in body["detail"] and "Error" not in body["detail"]
            assert (await api.get("/healthz")).status_code == 200
            r = await api.get("/api/v1/profiles")
            assert r.status_code == 503
            assert r.json()["detail"] == "the database is unavailable; retry later"
            for i in range(FEEDS):
                farm.publish(f"f{i}", title=f"during {i}")
            await asyncio.sleep(max(0.0, 6 - (time.monotonic() - cut_at)))
            metrics = (await api.get("/metrics")).text
            during = _metric(metrics, "proxy_probes_total")
            assert during > before, "the loop stopped probing while the database was away"
            assert _metric(metrics, "proxy_write_backlog") > 0
            chronon_during = _metric(metrics, "proxy_chronon")
            assert chronon_during > chronon_before + 20  # ticking all along
            body = (await api.get("/readyz")).json()  # the writes wait longer than 2 s now
            assert body["writing"] is False and "writes: the oldest of" in body["detail"], body
            pg.restore()

            async def ready_again() -> bool:
                return (await api.get("/readyz")).status_code == 200

            # Ready once the backlog is within the 2 s lag bound again (how soon: the bench).
            await eventually(ready_again, within=120, what="/readyz 200 after the outage")
            await eventually(
                lambda: _zero_backlog(api), within=120, what="the backlog written")
        # SIGTERM: stopped (drained) before we look.

        events = _events(log)
        names = [e.get("event") for e in events]
        assert "database_unavailable" in names and "database_back" in names
        assert "persist_failed" not in names and "persist_refused" not in names
        assert "writer_stopped_with_backlog" not in names

        async with Store.from_url(fresh_postgres_url) as store, store.engine.connect() as conn:
            ticked = set((await conn.execute(select(ChrononMetricsRow.chronon))).scalars())
            probed = (await conn.execute(
                select(func.count()).select_from(ProbeRow)
                .where(ProbeRow.chronon > chronon_before, ProbeRow.chronon <= chronon_during)
            )).scalar_one()
        # Every chronon the loop ticked during the outage is recorded (none dropped) ...
        outage = {t for t in ticked if chronon_before < t <= chronon_during}
        assert len(outage) >= 0.8 * (chronon_during - chronon_before), (
            len(outage), chronon_before, chronon_during)
        # ... and so is every probe it made meanwhile (proxy_probes_total counts them all).
        assert probed >= during - before - FEEDS  # those in flight at the cut may differ
        check = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy.cli", "db", "check",
            "--database-url", fresh_postgres_url, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await communicate(check)
        assert check.returncode == 0, (out + err).decode()


async def _zero_backlog(api: httpx.AsyncClient) -> bool:
    return _metric((await api.get("/metrics")).text, "proxy_write_backlog") == 0


async def _backlogged_serve(tmp_path: Path, url: str, pg: FaultProxy, drain: float) -> tuple[
        asyncio.subprocess.Process, Path, dict[str, str], int]:
    env = _env(_through(url, pg.port))
    env.update({"PROXY_CHRONON_SECONDS": "0.1", "PROXY_LEASE_TTL_SECONDS": "60",
                "PROXY_DRAIN_SECONDS": str(drain)})
    key = (await _cli(env, "users", "create", "alice")).strip().splitlines()[-1]
    port = free_port()
    log = tmp_path / "serve.log"
    sink = log.open("ab")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy.cli", "serve", "--port", str(port), env=env,
        stdout=sink, stderr=sink)
    sink.close()
    env["KEY"] = key
    return proc, log, env, port


@pytest.mark.parametrize("second_signal", [False, True])
async def test_sigterm_drains_the_backlog_and_a_second_one_exits_at_once(
    tmp_path: Path, fresh_postgres_url: str, second_signal: bool
) -> None:
    async with FaultProxy(("127.0.0.1", make_url(fresh_postgres_url).port or 5432)) as pg, \
            FeedFarm([f"f{i}" for i in range(FEEDS)], prefill=2) as farm:
        proc, log, env, port = await _backlogged_serve(tmp_path, fresh_postgres_url, pg, 60)
        try:
            async with httpx.AsyncClient(
                    base_url=f"http://127.0.0.1:{port}",
                    headers={"Authorization": f"Bearer {env['KEY']}"}, timeout=10) as api:
                await _setup(api, farm)
                pg.cut()
                await eventually(lambda: _backlog_over(api, 10), within=20,
                                 what="a backlog while the database is away")
            signal_process(proc, signal.SIGTERM)
            await asyncio.sleep(2)
            assert proc.returncode is None  # draining: waits for the database
            if second_signal:
                sent = time.monotonic()
                signal_process(proc, signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 20)
                assert time.monotonic() - sent < 15  # not the 60 s drain deadline
                names = [e.get("event") for e in _events(log)]
                assert "writer_stopped_with_backlog" in names
            else:
                pg.restore()
                await asyncio.wait_for(proc.wait(), 60)
                names = [e.get("event") for e in _events(log)]
                assert "writes_drained" in names and "writer_stopped_with_backlog" not in names
                assert "service_stopped" in names
        finally:
            await kill(proc)  # a no-op when it stopped by itself
    text = log.read_text(errors="replace")
    drained = re.search(r'"batches": (\d+), "deadline_seconds"', text)
    assert drained is not None and int(drained.group(1)) >= 10, text[-2000:]


async def _backlog_over(api: httpx.AsyncClient, n: int) -> bool:
    return _metric((await api.get("/metrics")).text, "proxy_write_backlog") > n


async def test_the_drain_deadline_ends_a_drain_the_database_never_allows(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    async with FaultProxy(("127.0.0.1", make_url(fresh_postgres_url).port or 5432)) as pg, \
            FeedFarm([f"f{i}" for i in range(FEEDS)], prefill=2) as farm:
        proc, log, env, port = await _backlogged_serve(tmp_path, fresh_postgres_url, pg, 3)
        try:
            async with httpx.AsyncClient(
                    base_url=f"http://127.0.0.1:{port}",
                    headers={"Authorization": f"Bearer {env['KEY']}"}, timeout=10) as api:
                await _setup(api, farm)
                pg.cut()
                await eventually(lambda: _backlog_over(api, 5), within=20, what="a backlog")
            sent = time.monotonic()
            signal_process(proc, signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)
            assert time.monotonic() - sent >= 3  # it did try for the whole deadline
        finally:
            await kill(proc)  # a no-op when it stopped by itself
    names = [e.get("event") for e in _events(log)]
    assert "writer_stopped_with_backlog" in names


async def test_past_the_byte_bound_the_loop_pauses_and_resumes_losing_nothing(
    fresh_postgres_url: str
) -> None:
    """A small PROXY_WRITE_BUFFER_BYTES reached during an outage: the loop decides and probes
    nothing more (counted in proxy_write_buffer_full_chronons) so the buffer stops growing,
    stays alive, and after the outage writes everything and goes on probing."""
    from proxy.store import upgrade_database
    from tests.test_e2e_support import e2e_settings, running

    await upgrade_database(fresh_postgres_url)
    async with FaultProxy(("127.0.0.1", make_url(fresh_postgres_url).port or 5432)) as pg, \
            FeedFarm([f"f{i}" for i in range(FEEDS)], prefill=2) as farm:
        settings = e2e_settings(_through(fresh_postgres_url, pg.port), lease_ttl_seconds=600,
                                write_buffer_bytes=16 * 1024)
        async with running(settings) as r:
            ids = [(await r.post("/api/v1/feeds", {"url": farm.url(f"f{i}")})).json()["id"]
                   for i in range(FEEDS)]
            for i in range(FEEDS):
                body = {"name": f"p{i}", "rules": [
                    {"name": "tick", "trigger": {"feed": str(ids[i]), "every": "1s", "slack": "1s"},
                     "query": [{"feed": str(ids[(i + 1) % FEEDS]), "within": "1s"}]}]}
                assert (await r.post("/api/v1/profiles", body)).status_code == 201
            service = r.service
            registry = service.metrics.registry
            loop, writer = service._loop, service._writer
            assert loop is not None and writer is not None

            def paused() -> float:
                return registry.get_sample_value("proxy_write_buffer_full_chronons_total") or 0.0

            await eventually(lambda: _async(loop.ticks > 20), within=30, what="ticks")
            pg.cut()
            # Full *now*: on a loaded machine the writer can lag past 16 KiB while the database
            # is still up (a pause before the cut), then catch up with a round that commits
            # as the cut lands; only a buffer that is full during the outage stays full.
            await eventually(lambda: _async(paused() > 0 and writer.full and loop.inflight == 0),
                             within=120, what="the loop paused with the buffer full")
            held, size, ticks, skipped = writer.backlog, writer.backlog_bytes, loop.ticks, paused()
            probes = _probes(registry)
            assert size >= 16 * 1024 and writer.full
            assert registry.get_sample_value("proxy_write_backlog_bytes") == size
            await eventually(lambda: _async(paused() >= skipped + 10), within=60,
                             what="ten more paused chronons")
            # Paused: chronons go by (liveness), yet nothing more is queued.
            assert loop.ticks > ticks
            assert (writer.backlog, writer.backlog_bytes, _probes(registry)) == (held, size, probes)
            pg.restore()
            await eventually(lambda: _async(writer.backlog == 0 and not writer.full), within=120,
                             what="the backlog written")
            before = _probes(registry)
            await eventually(lambda: _async(_probes(registry) > before), within=60,
                             what="probing again")
            await service.flush()  # on the loop's thread, where the writer and its events live
        async with Store.from_url(fresh_postgres_url) as store:
            assert (await store.audit()).violations == ()
            async with store.engine.connect() as conn:
                stored = (await conn.execute(select(func.count()).select_from(ChrononMetricsRow)
                                             )).scalar_one()
        # Every chronon decided is stored (the paused ones were not decided: no row).
        assert stored == loop.ticks - int(paused())


async def _async(value: bool) -> bool:
    return value


def _probes(registry: Any) -> float:
    return sum(sample.value for family in registry.collect() if family.name == "proxy_probes"
               for sample in family.samples if sample.name == "proxy_probes_total")
