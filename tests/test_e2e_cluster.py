"""A scaled-out deployment as real processes on PostgreSQL and NATS JetStream (issue 21).

Two schedulers (one leads, one stands by), two probe workers, two API
replicas, each ``proxy serve --role …`` on its own port. Checked:
``GET /api/v1/cluster`` lists every live process with its role and who leads;
feeds and a profile created through an API replica reach the leader, whose
probes the workers run (``proxy_leader 1`` on it only);
an API replica killed leaves the other serving; the leader killed with SIGKILL
is replaced by the standby (a new epoch) and probing goes on, with no feed
probed twice in a chronon and no chronon over the budget.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster_support import NatsServer, free_port, nats_server, role_env, serve_role
from tests.proc_support import kill, signal_process
from tests.test_e2e_lease import _max_probe_chronon, _probe_counts, _profile, _readyz, _status
from tests.test_e2e_sigkill import _cli
from tests.test_e2e_support import eventually, parse_metrics

__all__ = ["nats_server"]  # the fixture, imported for pytest

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CHRONON = 2.0
TTL = 4.0  # takeover within TTL + TTL/3 ≤ 3 chronons; renewals survive stalls of a loaded machine
BUDGET = 2  # _probe_counts checks this budget
FEEDS = ("f0", "f1", "f2", "f3")
#: Process scheduling on a loaded machine (2 cores shared by several engineers).
SLACK = 3.0


async def _cluster(api: httpx.AsyncClient) -> list[dict[str, Any]] | None:
    try:
        r = await api.get("/api/v1/cluster")
    except httpx.TransportError:
        return None
    assert r.status_code == 200, r.text
    body: list[dict[str, Any]] = r.json()
    return body


def _roles(processes: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in processes:
        out[p["role"]] = out.get(p["role"], 0) + 1
    return out


async def test_schedulers_workers_and_api_replicas_survive_their_losses(
    fresh_postgres_url: str, nats_server: NatsServer, tmp_path: Path
) -> None:
    from proxy.farm import FeedFarm

    url = fresh_postgres_url
    env = role_env(url, nats_server.url, PROXY_CHRONON_SECONDS=str(CHRONON),
                   PROXY_LEASE_TTL_SECONDS=str(TTL), PROXY_BUDGET=str(BUDGET),
                   PROXY_BROKER_JOB_TIMEOUT_SECONDS="20", PROXY_BROKER_ACK_WAIT_SECONDS="5")
    key = (await _cli(env, "users", "create", "alice")).strip().splitlines()[-1]
    auth = {"Authorization": f"Bearer {key}"}
    ports = {name: free_port() for name in ("sa", "sb", "w1", "w2", "api1", "api2")}

    def client(name: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[name]}", headers=auth,
                                 timeout=10)

    async with FeedFarm(list(FEEDS), prefill=2) as farm, client("sa") as sa, client("sb") as sb, \
            client("api1") as api1, client("api2") as api2, \
            serve_role("scheduler", env, ports["sa"], tmp_path / "sa.log") as proc_sa:
        await _status(sa, "ready", within=60)
        async with serve_role("scheduler", env, ports["sb"], tmp_path / "sb.log"), \
                serve_role("worker", env, ports["w1"], tmp_path / "w1.log"), \
                serve_role("worker", env, ports["w2"], tmp_path / "w2.log"), \
                serve_role("api", env, ports["api1"], tmp_path / "api1.log") as proc_api1, \
                serve_role("api", env, ports["api2"], tmp_path / "api2.log"):
            await _status(sb, "standby", within=60)

            async def everyone() -> list[dict[str, Any]] | None:
                got = await _cluster(api1)
                wanted = {"scheduler": 2, "worker": 2, "api": 2}
                return got if got is not None and _roles(got) == wanted else None

            processes = await eventually(everyone, within=60, what="six live processes")
            # Changes through an API replica: stored, then applied by the leader (NOTIFY).
            feeds = [(await api1.post("/api/v1/feeds", json={"url": farm.url(n)})).json()
                     for n in FEEDS]
            ids = [f["id"] for f in feeds]
            assert (await api1.post("/api/v1/profiles", json=_profile(ids))).status_code == 201
            leaders = [p for p in processes if p["leads"]]
            assert [(p["role"], p["port"]) for p in leaders] == [("scheduler", ports["sa"])]
            epoch = leaders[0]["epoch"]
            assert epoch >= 1
            assert {p["port"] for p in processes} == set(ports.values())
            assert parse_metrics((await sa.get("/metrics")).text)["proxy_leader"] == 1.0
            assert parse_metrics((await sb.get("/metrics")).text)["proxy_leader"] == 0.0

            async def probed() -> bool:
                return await _max_probe_chronon(url) >= 0

            await eventually(probed, within=60, what="probes run by the workers")
            ready_api = await _readyz(api2)
            assert ready_api is not None and ready_api[0] == 200
            assert ready_api[1]["role"] == "api"
            # Any replica answers any request: a ping through the other one is accepted.
            r = await api2.post(f"/api/v1/feeds/{ids[0]}/ping",
                                headers={"X-Ping-Token": feeds[0]["ping_token"]})
            assert r.status_code == 202, r.text

            await kill(proc_api1)
            r = await api2.get("/api/v1/feeds")
            assert r.status_code == 200 and len(r.json()) == len(FEEDS)

            async def api1_gone() -> list[dict[str, Any]] | None:
                got = await _cluster(api2)
                return got if got is not None and _roles(got).get("api") == 1 else None

            await eventually(api1_gone, within=30, what="the killed replica leaving the list")

            before = (await sa.get("/readyz")).json()["chronon"]
            signal_process(proc_sa, signal.SIGKILL)
            killed = time.monotonic()
            await kill(proc_sa)
            ready = await _status(sb, "ready", within=TTL + 3 * CHRONON + 30)
            took = time.monotonic() - killed
            assert ready["epoch"] > epoch and ready["chronon"] > before
            assert took <= 3 * CHRONON + SLACK, f"took over after {took:.2f} s"

            async def probes_go_on() -> bool:
                return await _max_probe_chronon(url) > before

            await eventually(probes_go_on, within=60, what="probes by the new leader")

            async def new_leader_listed() -> list[dict[str, Any]] | None:
                got = await _cluster(api2)
                if got is None:
                    return None
                leads = [(p["port"], p["epoch"]) for p in got if p["leads"]]
                return got if leads == [(ports["sb"], ready["epoch"])] else None

            await eventually(new_leader_listed, within=30, what="the standby listed as leader")
            worked = 0.0
            for name in ("w1", "w2"):
                async with client(name) as worker:
                    metrics = parse_metrics((await worker.get("/metrics")).text)
                worked += metrics['proxy_worker_jobs_total{result="probed"}']
            assert worked > 0
    twice, over, total = await _probe_counts(url)
    assert total > 0
    assert twice == [], f"feeds probed twice in one chronon: {twice}"
    assert over == [], f"chronons over the budget of {BUDGET}: {over}"
