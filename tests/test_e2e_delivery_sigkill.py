"""``proxy serve`` killed with SIGKILL while notifications are on the wire, then started again.

The resolution and its outbox row were committed and the webhook POST sent, but
the receiver had not answered: the row is still ``pending`` in the database.
After the restart the same message (same ``webhook-id``, same body) is sent
again and delivered, and so is every notification committed before the kill.

Then the short version of ``benchmarks/machinery/bench_delivery_kill.py``: three
kills at random moments while the receiver flaps between up, failing and down;
nothing lost, duplicates only under the same id with the same body.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.farm import FeedFarm
from tests.proc_support import kill
from tests.receiver import Receiver
from tests.test_e2e_delivery import rank_one
from tests.test_e2e_sigkill import _cli, _env, _ready, _serve
from tests.test_e2e_support import eventually

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "machinery"))

from bench_delivery_kill import KillRun, describe, run

from proxy.ports import free_port

pytestmark = pytest.mark.slow


def _rows(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT msg_id, state FROM deliveries").fetchall())


async def test_sigkill_between_commit_and_acknowledgement_still_delivers(tmp_path: Path) -> None:
    db = tmp_path / "proxy.sqlite3"
    env = _env(f"sqlite+aiosqlite:///{db}")
    env.update({"PROXY_DELIVERY_TIMEOUT_SECONDS": "3600",  # the attempt hangs until the kill
                "PROXY_DELIVERY_RETRY_BASE_SECONDS": "0.05",
                "PROXY_DELIVERY_RETRY_MAX_SECONDS": "0.2"})
    key = (await _cli(env, "users", "create", "alice")).strip().splitlines()[-1]
    port = free_port()
    log = tmp_path / "serve.log"
    async with FeedFarm(["blog"], prefill=2) as farm, Receiver(mode="hang") as rx, httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}, timeout=10
    ) as api:
        async with _serve(env, port, log) as proc:
            await _ready(api)
            feed = (await api.post("/api/v1/feeds", json={"url": farm.url("blog")})).json()["id"]
            r = await api.post("/api/v1/profiles", json=rank_one(feed, [{"webhook": rx.url}]))
            assert r.status_code == 201, r.text

            async def on_the_wire() -> list[Any]:
                return rx.requests

            first = (await eventually(on_the_wire, within=20, what="a webhook on the wire"))[0]
            code = await kill(proc)  # SIGKILL: no shutdown code runs
            assert code == -signal.SIGKILL
        before = _rows(db)
        assert before[first.msg_id] == "pending"  # committed, sent, never acknowledged
        assert first.msg_id not in rx.acknowledged()

        rx.mode = "ok"
        async with _serve(env, port, log):
            await _ready(api)

            async def all_delivered() -> bool:
                return set(before) <= rx.acknowledged()

            await eventually(all_delivered, within=20, what="every pre-kill notification delivered")
            again = [q for q in rx.by_id(first.msg_id) if q.status == 204]
            assert again and again[0].body == first.body  # the same message, the same bytes

            async def settled() -> bool:
                rows = {d["msg_id"]: d for d in (await api.get(
                    "/api/v1/deliveries", params={"limit": 1000})).json()["items"]}
                return all(rows[m]["state"] == "delivered" for m in before)

            await eventually(settled, within=10, what="the rows marked delivered")


async def test_three_sigkills_with_a_flapping_receiver_lose_no_notification(tmp_path: Path) -> None:
    cfg = KillRun(f"sqlite+aiosqlite:///{tmp_path / 'proxy.sqlite3'}", tmp_path, kills=3,
                  feeds=3, kill_after=(0.2, 2.0), phase=(0.7, 1.5), settle=1.0,
                  drain_timeout=20, max_seconds=90, seed=3)
    audit = await run(cfg)
    assert audit.deliveries > 0 and audit.phases >= 3, describe(audit)
    assert audit.lost == 0 and audit.not_delivered == 0, describe(audit)
    assert audit.events_missing == 0 and audit.stuck_ceis == 0, describe(audit)
    # Duplicates, if any, are the same message: same webhook-id, same bytes, signed.
    assert audit.body_mismatches == 0 and audit.other_id_duplicates == 0, describe(audit)
    assert audit.unknown_ids == 0 and audit.unverified == 0, describe(audit)
    assert audit.ok
