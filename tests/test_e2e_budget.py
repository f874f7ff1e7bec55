"""End to end with too little budget: C = 1 probe per chronon for four CEIs due in the same chronon.

Four profiles each watch their own feed with a trigger every second whose
window is a single chronon (``slack: 0s``), all anchored at the same period
start. One probe per chronon captures one of them; the other three are missed,
every second, and the budget is never exceeded.
"""

from __future__ import annotations

import datetime as dt

import pytest

from proxy.farm import FeedFarm
from tests.test_e2e_support import e2e_settings, eventually, parse_metrics, running

pytestmark = pytest.mark.slow

FEEDS = ["a", "b", "c", "d"]


def _profile(name: str, trigger: int, query: int, start: dt.datetime) -> dict[str, object]:
    return {
        "name": name,
        "rules": [{
            "name": "tight",
            "trigger": {"feed": str(trigger), "every": "1s", "slack": "0s",
                        "when": {"contains": ["never-in-the-farm"]}},
            "query": [{"feed": str(query), "within": "1s"}],
            "period": {"start": start.isoformat()},
        }],
    }


async def test_budget_starved_run_misses_ceis(sqlite_url: str) -> None:
    await _starved_run(sqlite_url)


@pytest.mark.postgres
async def test_budget_starved_run_misses_ceis_postgres(fresh_postgres_url: str) -> None:
    await _starved_run(fresh_postgres_url)


async def _starved_run(database_url: str) -> None:
    settings = e2e_settings(database_url, budget=1)
    async with FeedFarm([*FEEDS, "q"], prefill=1) as farm, running(settings) as px:
        ids = {}
        for name in [*FEEDS, "q"]:
            ids[name] = (await px.post("/api/v1/feeds", {"url": farm.url(name)})).json()["id"]
        start = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=0.5)
        pids = []
        for name in FEEDS:
            r = await px.post("/api/v1/profiles", _profile(f"p-{name}", ids[name], ids["q"], start))
            assert r.status_code == 201, r.text
            pids.append(r.json()["id"])

        async def resolved() -> dict[str, int] | None:
            s = (await px.get("/api/v1/metrics/summary")).json()
            return s if s["missed"] >= 6 and s["captured"] >= 2 else None

        summary = await eventually(resolved, what="misses under a starved budget")
        assert summary["completeness"] < 0.5
        per = {p["profile_id"]: p for p in summary["profiles"]}
        assert set(per) == set(pids)
        # The budget is a hard cap: never more probes than offered in any chronon.
        assert summary["budget_used"] <= summary["budget_total"]
        m = parse_metrics((await px.client.get("/metrics")).text)
        assert m["proxy_budget_used_probes_total"] <= m["proxy_budget_offered_probes_total"]
        assert m["proxy_chronon_budget_probes"] == 1
        assert m['proxy_ceis{state="missed"}'] >= 6
        # A missed CEI's trigger EI is missed too, and visible as such.
        missed = (await px.get(f"/api/v1/profiles/{pids[0]}/ceis", params={"state": "missed"})).json()["items"]
        captured = (await px.get(f"/api/v1/profiles/{pids[0]}/ceis",
                                 params={"state": "captured"})).json()["items"]
        for cei in missed:
            assert [ei["state"] for ei in cei["eis"]] == ["missed"]
            assert cei["eis"][0]["start"] == cei["eis"][0]["finish"]
        for cei in captured:
            assert [ei["state"] for ei in cei["eis"]] == ["captured"]
