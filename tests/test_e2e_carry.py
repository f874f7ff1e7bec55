"""End to end: what other probes found for a time-driven rule survives a restart.

"slow" checks "mish" every 10 s; "fast" every 1 s, so its probes find a new
"oil" post first and the post is no longer new to "slow"'s own probe. The
service stops between the two and starts again before "slow"'s next check:
that check must still fire, from the match remembered in the rule's stored
state (``_TriggerState.carry``), not from its own probe.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.farm import FeedFarm
from proxy.settings import Settings
from tests.test_e2e_support import Running, e2e_settings, eventually, running

pytestmark = pytest.mark.slow

WITHIN = 60.0


def _rule(name: str, mish: int, cnn: int, every: str) -> dict[str, Any]:
    return {"name": name,
            "trigger": {"feed": str(mish), "every": every, "slack": "1s", "when": {"contains": ["oil"]}},
            "query": [{"feed": str(cnn), "within": "1s"}]}


async def _ceis(px: Running, pid: int, rule_id: str) -> list[dict[str, Any]]:
    r = await px.get(f"/api/v1/profiles/{pid}/ceis", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return [c for c in r.json()["items"] if c["rule_id"] == rule_id]


async def _run(settings: Settings) -> None:
    async with FeedFarm(["mish", "cnn"]) as farm:
        async with running(settings) as px:
            ids = {n: (await px.post("/api/v1/feeds", {"url": farm.url(n)})).json()["id"] for n in ("mish", "cnn")}
            body = {"name": "analyst", "rules": [_rule("slow", ids["mish"], ids["cnn"], "10s"),
                                                 _rule("fast", ids["mish"], ids["cnn"], "1s")]}
            r = await px.post("/api/v1/profiles", body)
            assert r.status_code == 201, r.text
            pid = r.json()["id"]
            slow, fast = (x["id"] for x in r.json()["rules"])

            # "slow"'s first check (its baseline) is decided: publish just after it.
            async def checked() -> list[dict[str, Any]]:
                return [c for c in await _ceis(px, pid, slow) if c["state"] != "pending"]

            first = await eventually(checked, within=WITHIN, what="slow's first check")
            farm.publish("mish", title="Oil shock", summary="crude oil")

            async def fast_fired() -> list[dict[str, Any]]:
                return [c for c in await _ceis(px, pid, fast) if c["fired"]]

            await eventually(fast_fired, within=WITHIN, what="fast firing on the post")
            await px.service.flush()
            decided = await checked()
            if len(decided) > len(first):
                pytest.fail(f"slow checked again before the restart ({decided}): raise its period")
            assert not any(c["fired"] for c in decided)
            stopped_at = px.service.loop.current
            assert stopped_at is not None

        async with running(settings) as px:
            async def slow_fired() -> list[dict[str, Any]]:
                return [c for c in await _ceis(px, pid, slow) if c["fired"]]

            fired = await eventually(slow_fired, within=WITHIN, what="slow firing after the restart")
            assert len(fired) == 1
            cei = fired[0]
            assert cei["release"] > stopped_at  # decided by a check after the restart
            assert [e["feed"] for e in cei["eis"]] == [ids["mish"], ids["cnn"]]
            assert cei["eis"][0]["start"] > stopped_at
            # The post was not new to that check's own probe: "fast" had taken it before the stop.
            assert len([c for c in await _ceis(px, pid, fast) if c["fired"]]) == 1


async def test_a_check_after_a_restart_reads_what_other_probes_found_sqlite(sqlite_url: str) -> None:
    await _run(e2e_settings(sqlite_url))


@pytest.mark.postgres
async def test_a_check_after_a_restart_reads_what_other_probes_found_postgres(fresh_postgres_url: str) -> None:
    await _run(e2e_settings(fresh_postgres_url))
