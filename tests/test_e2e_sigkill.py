"""``proxy serve`` as a real process, killed with SIGKILL mid-run and started again.

Nothing the API acknowledged or the loop stored is lost (profiles, probes,
entries, captures), the pending CEI is restored and captured after the restart,
and chronon numbering continues from the persisted origin.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.farm import FeedFarm
from proxy.ports import free_port
from tests.proc_support import communicate, kill, stop
from tests.test_e2e_support import eventually, motivating

pytestmark = pytest.mark.slow



def _env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    env.update({
        "PROXY_DATABASE_URL": database_url,
        "PROXY_CHRONON_SECONDS": "0.05",
        "PROXY_BUDGET": "4",
        "PROXY_POLICY": "mrsf-p",
        "PROXY_ALLOW_PRIVATE_NETWORKS": "true",
        "PROXY_PER_HOST_CONCURRENCY": "50",
        "PROXY_PER_HOST_MIN_DELAY_SECONDS": "0",
        "PROXY_RESPECT_CACHE_HINTS": "false",
        "PROXY_RETENTION_DAYS": "0",
        "PROXY_HTTP_TOTAL_TIMEOUT_SECONDS": "60",
        "PROXY_HTTP_READ_TIMEOUT_SECONDS": "60",
        "PROXY_LOG_FORMAT": "json",
        # The killed process never releases the loop's lease: the restart takes it over when
        # it expires, so keep that short here.
        "PROXY_LEASE_TTL_SECONDS": "1",
    })
    return env


async def _cli(env: dict[str, str], *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy.cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await communicate(proc)
    assert proc.returncode == 0, err.decode()
    return out.decode()


@asynccontextmanager
async def _serve(env: dict[str, str], port: int, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy.cli", "serve", "--port", str(port), env=env,
            stdout=sink, stderr=sink,
        )
    try:
        yield proc
    finally:
        await stop(proc, signal.SIGTERM, grace=15)  # it may be gone already (killed, a fault)


async def _ready(client: httpx.AsyncClient) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        try:
            r = await client.get("/readyz")
        except httpx.TransportError:
            return None
        body: dict[str, Any] = r.json()
        return body if r.status_code == 200 else None

    return await eventually(check, within=30, what="the service ready")


async def test_sigkill_loses_nothing_and_the_run_goes_on(tmp_path: Path) -> None:
    env = _env(f"sqlite+aiosqlite:///{tmp_path / 'proxy.sqlite3'}")
    key = (await _cli(env, "users", "create", "alice")).strip().splitlines()[-1]
    auth = {"Authorization": f"Bearer {key}"}
    port = free_port()
    log = tmp_path / "serve.log"
    async with FeedFarm(["mish", "cnn", "money"], prefill=2) as farm, httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=10
    ) as api:
        async with _serve(env, port, log) as proc:
            await _ready(api)
            ids = {n: (await api.post("/api/v1/feeds", json={"url": farm.url(n)})).json()["id"]
                   for n in ("mish", "cnn", "money")}
            body = motivating(ids["mish"], ids["cnn"], ids["money"], every="1s", slack="1s",
                              within="30s")
            r = await api.post("/api/v1/profiles", json=body)
            assert r.status_code == 201, r.text
            pid = r.json()["id"]

            # The rule's first probe sets its baseline (issue 23): publish after it.
            async def checked() -> list[dict[str, Any]]:
                return (await api.get(f"/api/v1/profiles/{pid}/ceis", params={"state": "captured"})).json()["items"]

            await eventually(checked, within=30, what="the rule's first decided CEI")
            farm.set_fault("cnn", "timeout", seconds=3600)
            farm.publish("mish", title="Oil shock", summary="oil")

            async def waiting() -> list[dict[str, Any]] | None:
                ceis = (await api.get(f"/api/v1/profiles/{pid}/ceis", params={"state": "pending"})).json()["items"]
                found = [c for c in ceis if len(c["eis"]) == 3 and c["eis"][0]["state"] == "captured"
                         and c["eis"][2]["state"] == "captured"]
                rank1 = (await api.get(f"/api/v1/profiles/{pid}/ceis",
                                       params={"state": "captured"})).json()["items"]
                return found if found and rank1 else None

            pending = (await eventually(waiting, within=30, what="an oil CEI waiting for cnn"))[0]
            before_ceis = {c["id"]: c for c in (await api.get(
                f"/api/v1/profiles/{pid}/ceis", params={"limit": 1000})).json()["items"]}
            before_feeds = {f["id"]: f for f in (await api.get("/api/v1/feeds")).json()["items"]}
            before_entries = (await api.get(f"/api/v1/profiles/{pid}/entries")).json()["items"]
            before_chronon = (await api.get("/readyz")).json()["chronon"]
            code = await kill(proc)  # SIGKILL: no shutdown code runs
            assert code == -signal.SIGKILL
        farm.clear_fault("cnn")
        killed_at = time.monotonic()

        async with _serve(env, port, log):
            status = await _ready(api)
            assert status["chronon"] > before_chronon  # numbering continues
            profiles = (await api.get("/api/v1/profiles")).json()["items"]
            assert [p["id"] for p in profiles] == [pid]
            after_ceis = {c["id"]: c for c in (await api.get(
                f"/api/v1/profiles/{pid}/ceis", params={"limit": 1000})).json()["items"]}
            for cei_id, cei in before_ceis.items():
                if cei["state"] != "pending":
                    assert after_ceis[cei_id] == cei
            after_feeds = {f["id"]: f for f in (await api.get("/api/v1/feeds")).json()["items"]}
            for feed_id, feed in before_feeds.items():
                assert after_feeds[feed_id]["probes"] >= feed["probes"]
                assert after_feeds[feed_id]["entries"] >= feed["entries"]
            after_entries = (await api.get(f"/api/v1/profiles/{pid}/entries")).json()["items"]
            assert all(e in after_entries for e in before_entries)

            async def captured() -> dict[str, Any] | None:
                ceis = (await api.get(f"/api/v1/profiles/{pid}/ceis",
                                      params={"state": "captured", "limit": 1000})).json()["items"]
                return next((c for c in ceis if c["id"] == pending["id"]), None)

            done = await eventually(captured, within=30, what="the pending CEI captured after restart")
            assert [ei["state"] for ei in done["eis"]] == ["captured"] * 3
            assert done["eis"][1]["captured_chronon"] > before_chronon
            assert time.monotonic() > killed_at
