"""End to end: the real service (loop, fetcher, store, API) against the feed farm, 50 ms chronons.

The motivating example (main paper §2.1) registered over REST: a trigger on
"mish" every second (20 chronons) that fires on "oil" and then needs "cnn" and
"money" within a second. Entries without "oil" give rank-1 CEIs, captured by
the trigger probe alone; an "oil" entry gives a CEI of three EIs, captured when
the query feeds are probed in time, missed when "cnn" fails.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.farm import FeedFarm
from proxy.feeds import ProbePool
from tests.test_e2e_support import (
    Running,
    e2e_settings,
    eventually,
    motivating,
    parse_metrics,
    running,
)

pytestmark = pytest.mark.slow


async def _ceis(px: Running, profile: int, state: str | None = None) -> list[dict[str, Any]]:
    params = {"state": state} if state else {}
    r = await px.get(f"/api/v1/profiles/{profile}/ceis", params=params)
    assert r.status_code == 200, r.text
    ceis: list[dict[str, Any]] = r.json()["items"]
    return ceis


async def run_motivating_example(database_url: str, **overrides: Any) -> None:
    settings = e2e_settings(database_url, **overrides)
    async with FeedFarm(["mish", "cnn", "money"], prefill=2) as farm, running(settings) as px:
        fetcher = px.service.fetcher
        assert isinstance(fetcher, ProbePool) == bool(settings.probe_processes)
        if isinstance(fetcher, ProbePool):
            assert len(fetcher.worker_pids()) == settings.probe_processes
        ids = {}
        for name in ("mish", "cnn", "money"):
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
            assert r.json()["ping_token"]
        again = await px.post("/api/v1/feeds", {"url": farm.url("mish")})
        assert again.status_code == 200 and again.json()["id"] == ids["mish"]

        # The paper's body as it is (3m / 2m / 10m) is accepted.
        r = await px.post("/api/v1/profiles", motivating(ids["mish"], ids["cnn"], ids["money"]))
        assert r.status_code == 201, r.text
        verbatim = r.json()["id"]
        assert (await px.client.delete(f"/api/v1/profiles/{verbatim}", headers=px.auth)).status_code == 204

        body = motivating(ids["mish"], ids["cnn"], ids["money"], every="1s", slack="1s", within="1s")
        r = await px.post("/api/v1/profiles", body)
        assert r.status_code == 201, r.text
        pid = r.json()["id"]

        # No "oil" yet: the trigger probe decides the CEI at rank 1 and captures it.
        async def rank_one() -> list[dict[str, Any]]:
            return [c for c in await _ceis(px, pid, "captured") if len(c["eis"]) == 1]

        first = (await eventually(rank_one, what="a rank-1 captured CEI"))[0]
        assert first["eis"][0]["feed"] == ids["mish"]
        assert first["eis"][0]["state"] == "captured"
        assert first["eis"][0]["captured_chronon"] is not None

        oil = farm.publish("mish", title="Oil prices jump", summary="Crude oil at $90")

        async def full() -> list[dict[str, Any]]:
            return [c for c in await _ceis(px, pid, "captured") if len(c["eis"]) == 3]

        cei = (await eventually(full, what="a captured CEI with its query EIs"))[0]
        assert [ei["feed"] for ei in cei["eis"]] == [ids["mish"], ids["cnn"], ids["money"]]
        assert all(ei["state"] == "captured" for ei in cei["eis"])
        trigger, *queries = cei["eis"]
        for ei in queries:
            # Query EIs start at the trigger probe's chronon and last `within` (20 chronons).
            assert ei["start"] == trigger["captured_chronon"]
            assert ei["finish"] - ei["start"] == 20
            assert ei["start"] <= ei["captured_chronon"] <= ei["finish"]
        entries = (await px.get(f"/api/v1/profiles/{pid}/entries")).json()["items"]
        assert any(e["title"] == "Oil prices jump" for e in entries), entries
        assert oil

        # "cnn" now fails: the next oil CEI cannot be captured and is missed.
        farm.set_fault("cnn", "error500")
        farm.publish("mish", title="Oil again", summary="oil")

        async def missed() -> list[dict[str, Any]]:
            return [c for c in await _ceis(px, pid, "missed") if len(c["eis"]) == 3]

        lost = (await eventually(missed, what="a missed CEI"))[0]
        states = {ei["feed"]: ei["state"] for ei in lost["eis"]}
        assert states[ids["mish"]] == "captured"
        assert states[ids["cnn"]] == "missed"

        feeds = {f["id"]: f for f in (await px.get("/api/v1/feeds")).json()["items"]}
        cnn = feeds[ids["cnn"]]
        assert cnn["last_outcome"] == "http_error"
        assert cnn["consecutive_errors"] >= 1
        assert cnn["next_allowed_at"] is not None
        assert feeds[ids["mish"]]["last_outcome"] in ("ok", "not_modified")
        assert feeds[ids["mish"]]["probes"] >= 3

        summary = (await px.get("/api/v1/metrics/summary")).json()
        assert summary["captured"] >= 2 and summary["missed"] >= 1
        assert 0 < summary["completeness"] < 1
        assert summary["budget_total"] > 0 and summary["chronons"] > 0

        metrics = parse_metrics((await px.client.get("/metrics")).text)
        assert metrics['proxy_probes_total{outcome="ok"}'] >= 2
        assert metrics['proxy_probes_total{outcome="http_error"}'] >= 1
        assert metrics['proxy_ceis{state="captured"}'] >= 2
        assert metrics['proxy_ceis{state="missed"}'] >= 1
        assert metrics["proxy_tick_jitter_seconds_count"] > 10
        assert metrics["proxy_budget_used_probes_total"] >= 3
        ready = await px.client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["ticking"] is True


async def test_motivating_example_sqlite(sqlite_url: str) -> None:
    await run_motivating_example(sqlite_url)


async def test_motivating_example_with_probes_in_worker_processes(sqlite_url: str) -> None:
    """PROXY_PROBE_PROCESSES=2: the same run, every probe made by a ProbePool worker."""
    await run_motivating_example(sqlite_url, probe_processes=2)


@pytest.mark.postgres
async def test_motivating_example_postgres(fresh_postgres_url: str) -> None:
    await run_motivating_example(fresh_postgres_url)
