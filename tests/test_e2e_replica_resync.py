"""Changes an API replica makes while the leader is not listening still reach the leader.

An API replica (``proxy serve --role api``) stores a change, then tells the leader
by NOTIFY; a notification sent while nobody listens is lost. Here the leader
(``proxy serve``) reaches PostgreSQL through a fault-injecting TCP proxy and the
replica directly: with the leader cut off, the replica registers a feed, creates
a profile on it and deletes another. Before the leader resynchronised on
reconnecting, it never ran the new profile ("the chronon loop has not installed
it yet" for good) and kept running the deleted one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from proxy.farm import FeedFarm
from proxy.ports import free_port
from tests.cluster_support import serve_role
from tests.fault_proxy import FaultProxy
from tests.test_e2e_outage import _events, _through
from tests.test_e2e_sigkill import _cli, _env, _ready, _serve
from tests.test_e2e_support import eventually

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _rule(trigger: int, query: int) -> dict[str, Any]:
    return {"name": "r", "trigger": {"feed": str(trigger), "every": "1s", "slack": "1s"},
            "query": [{"feed": str(query), "within": "2s"}]}


async def test_changes_made_while_the_leader_was_not_listening_reach_it(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    async with FaultProxy(("127.0.0.1", make_url(fresh_postgres_url).port or 5432)) as pg:
        leader_env = _env(_through(fresh_postgres_url, pg.port))
        leader_env.update({"PROXY_CHRONON_SECONDS": "0.2", "PROXY_LEASE_TTL_SECONDS": "60"})
        replica_env = _env(fresh_postgres_url)
        key = (await _cli(replica_env, "users", "create", "alice")).strip().splitlines()[-1]
        auth = {"Authorization": f"Bearer {key}"}
        lp, rp = free_port(), free_port()
        log = tmp_path / "leader.log"
        async with (FeedFarm(["a", "b", "c"], prefill=1) as farm,
                    httpx.AsyncClient(base_url=f"http://127.0.0.1:{lp}", headers=auth,
                                      timeout=10) as leader,
                    httpx.AsyncClient(base_url=f"http://127.0.0.1:{rp}", headers=auth,
                                      timeout=10) as replica,
                    _serve(leader_env, lp, log),
                    serve_role("api", replica_env, rp, tmp_path / "replica.log")):
            await _ready(leader)
            await _ready(replica)

            async def feed(name: str) -> int:
                r = await replica.post("/api/v1/feeds", json={"url": farm.url(name)})
                assert r.status_code == 201, r.text
                return int(r.json()["id"])

            async def profile(name: str, trigger: int, query: int) -> int:
                r = await replica.post("/api/v1/profiles",
                                       json={"name": name, "rules": [_rule(trigger, query)]})
                assert r.status_code == 201, r.text
                return int(r.json()["id"])

            async def state_on_leader(pid: int) -> str:
                r = await leader.get(f"/api/v1/profiles/{pid}/status")
                assert r.status_code == 200, r.text
                return str(r.json()["rules"][0]["state"])

            def installed(pid: int) -> Any:
                async def check() -> str | None:
                    state = await state_on_leader(pid)
                    return state if state != "pending" else None
                return check

            a, b = await feed("a"), await feed("b")
            first = await profile("first", a, b)
            # Heard by NOTIFY: the leader runs it.
            await eventually(installed(first), within=30, what="the first profile on the leader")

            pg.cut()  # the leader's connections (the listening one too) are gone
            await asyncio.sleep(1.0)
            c = await feed("c")
            second = await profile("second", c, a)
            r = await replica.delete(f"/api/v1/profiles/{first}")
            assert r.status_code == 204, r.text
            await asyncio.sleep(1.0)
            pg.restore()

            await eventually(installed(second), within=60,
                             what="the profile created while the leader was cut off, running")
            await _ready(leader)

        resynced = [e for e in _events(log) if e.get("event") == "changes_resynced"]
        assert resynced, "no resync logged"
        assert resynced[-1]["feeds_added"] == 1 and resynced[-1]["profiles_installed"] == 1
        assert resynced[-1]["profiles_removed"] == 1
