"""Restart in the middle of a run: nothing stored is lost, pending CEIs go on, chronons continue.

"cnn" hangs (the farm's ``timeout`` fault), so an "oil" CEI stays pending with
its "cnn" EI uncaptured when the service stops. After the restart the fault is
gone: the restored CEI is in the engine again and gets captured.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.engine import CeiState
from proxy.farm import FeedFarm
from proxy.service import ProxyService
from proxy.settings import Settings
from tests.test_e2e_support import Running, e2e_settings, eventually, motivating, running

pytestmark = pytest.mark.slow


async def _snapshot(px: Running, pid: int) -> dict[str, Any]:
    ceis = (await px.get(f"/api/v1/profiles/{pid}/ceis", params={"limit": 1000})).json()["items"]
    feeds = (await px.get("/api/v1/feeds")).json()["items"]
    return {
        "profiles": (await px.get("/api/v1/profiles")).json()["items"],
        "ceis": {c["id"]: c for c in ceis},
        "probes": {f["id"]: f["probes"] for f in feeds},
        "entries": {f["id"]: f["entries"] for f in feeds},
        "captured_entries": (await px.get(f"/api/v1/profiles/{pid}/entries")).json()["items"],
    }


async def run_restart(settings: Settings) -> None:
    async with FeedFarm(["mish", "cnn", "money"], prefill=2) as farm:
        async with running(settings) as px:
            ids = {n: (await px.post("/api/v1/feeds", {"url": farm.url(n)})).json()["id"]
                   for n in ("mish", "cnn", "money")}
            body = motivating(ids["mish"], ids["cnn"], ids["money"], every="1s", slack="1s",
                              within="20s")
            pid = (await px.post("/api/v1/profiles", body)).json()["id"]

            # The rule's first probe sets its baseline (issue 23): publish after it.
            async def checked() -> list[dict[str, Any]]:
                return (await px.get(f"/api/v1/profiles/{pid}/ceis", params={"state": "captured"})).json()["items"]

            await eventually(checked, what="the rule's first decided CEI")
            farm.set_fault("cnn", "timeout", seconds=3600)
            farm.publish("mish", title="Oil shock", summary="oil")

            async def waiting() -> list[dict[str, Any]]:
                ceis = (await px.get(f"/api/v1/profiles/{pid}/ceis",
                                     params={"state": "pending"})).json()["items"]
                return [c for c in ceis if len(c["eis"]) == 3
                        and c["eis"][0]["state"] == "captured"
                        and c["eis"][2]["state"] == "captured"]

            pending = (await eventually(waiting, what="an oil CEI waiting for cnn"))[0]
            assert pending["eis"][1]["state"] == "pending"
            await px.service.flush()
            before = await _snapshot(px, pid)
            last_chronon = px.service.loop.current
            assert last_chronon is not None
        farm.clear_fault("cnn")

        async with running(settings) as px:
            # Restored: the engine knows the CEI again (it may be captured already: the loop
            # runs), the evaluator its profile.
            assert px.service.runtime.engine.state(pending["id"]) in (CeiState.PENDING,
                                                                      CeiState.CAPTURED)
            assert str(pid) in px.service.runtime.evaluator.profile_ids()
            after = await _snapshot(px, pid)
            assert after["profiles"] == before["profiles"]
            for cei_id, cei in before["ceis"].items():
                if cei["state"] != "pending":
                    assert after["ceis"][cei_id] == cei  # resolved CEIs unchanged
            assert all(after["probes"][f] >= n for f, n in before["probes"].items())
            assert all(after["entries"][f] >= n for f, n in before["entries"].items())
            assert all(e in after["captured_entries"] for e in before["captured_entries"])

            async def goes_on() -> dict[str, Any] | None:
                ceis = (await px.get(f"/api/v1/profiles/{pid}/ceis",
                                     params={"state": "captured", "limit": 1000})).json()["items"]
                return next((c for c in ceis if c["id"] == pending["id"]), None)

            done = await eventually(goes_on, what="the restored CEI captured")
            assert [ei["state"] for ei in done["eis"]] == ["captured"] * 3
            # Chronon numbering continued from the persisted origin.
            assert done["eis"][1]["captured_chronon"] > last_chronon
            assert px.service.loop.current is not None and px.service.loop.current > last_chronon


async def test_restart_sqlite(sqlite_url: str) -> None:
    await run_restart(e2e_settings(sqlite_url, http_total_timeout_seconds=60.0,
                                   http_read_timeout_seconds=60.0))


@pytest.mark.postgres
async def test_restart_postgres(fresh_postgres_url: str) -> None:
    await run_restart(e2e_settings(fresh_postgres_url, http_total_timeout_seconds=60.0,
                                   http_read_timeout_seconds=60.0))


@pytest.mark.parametrize("moved", [0.0, 0.5, 10.0])
async def test_a_restart_never_ticks_a_chronon_twice(sqlite_url: str, moved: float) -> None:
    """A restart within the chronon last ticked starts at the next one (its budget is spent);
    a restart later starts at the wall clock's chronon."""
    wall = [1_000_000.0]
    settings = e2e_settings(sqlite_url, chronon_seconds=1.0)
    service = ProxyService(settings, wall=lambda: wall[0], run_loop=False, housekeeping=False)
    await service.start()
    try:
        first = service.first_chronon
        assert first == service.clock.current()
        service.loop.tick(first, 0.0)
        await service.flush()
    finally:
        await service.stop()
    assert first is not None
    wall[0] += moved
    again = ProxyService(settings, wall=lambda: wall[0], run_loop=False, housekeeping=False)
    await again.start()
    try:
        assert await again.store.last_chronon() == first
        expected = max(first + 1, again.clock.current())
        assert again.first_chronon == expected
        assert expected == (first + 1 if moved < 1.0 else first + 10)
    finally:
        await again.stop()
