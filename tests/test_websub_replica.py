"""A push that lands on an API replica (``--role api``) reaches the leader (issue 44).

Two services on one PostgreSQL database, as in tests/test_service_replica.py: the hub's
callback may be served by any process; a replica checks the signature against the
subscription in the database and forwards the update to the leader as a ping of every
registrant, which opens the rule's CEI there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from proxy.core.engine import CeiState
from proxy.farm import FeedFarm
from proxy.feeds.websub import sign
from proxy.rules import ProfileSpec
from proxy.service import ProxyService
from proxy.store import upgrade_database
from tests.test_e2e_support import e2e_settings, eventually

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pair(fresh_postgres_url: str) -> AsyncIterator[tuple[ProxyService, ProxyService]]:
    await upgrade_database(fresh_postgres_url)
    settings = e2e_settings(fresh_postgres_url, chronon_seconds=60.0,
                            public_url="http://127.0.0.1:1")
    leader = ProxyService(settings, run_loop=False, housekeeping=False, deliver=False)
    replica = ProxyService(settings, run_loop=False, housekeeping=False, deliver=False,
                           lease=True, campaign=False)
    await leader.start()
    try:
        await replica.start()
        try:
            yield leader, replica
        finally:
            await replica.stop()
    finally:
        await leader.stop()


async def test_a_push_on_a_replica_opens_the_leaders_cei(
    pair: tuple[ProxyService, ProxyService],
) -> None:
    leader, replica = pair
    user, _ = await leader.store.create_user("alice")
    async with FeedFarm(["a"], prefill=1) as farm:
        a, _ = await replica.register_feed(user, farm.url("a"))

        async def known() -> bool:
            return a.feed.id in leader.runtime.feeds.by_id  # type: ignore[union-attr]

        await eventually(known, within=20, what="the leader learning the feed")
        profile = await replica.create_profile(user, ProfileSpec.model_validate({
            "name": "pushed", "rules": [{"name": "r", "trigger": {"feed": str(a.feed.id), "on": "update"},
                                         "query": [{"feed": str(a.feed.id), "within": "10m"}]}]}))

        async def installed() -> bool:
            return str(profile.id) in leader.runtime.evaluator.profile_ids()  # type: ignore[union-attr]

        await eventually(installed, within=20, what="the leader installing the profile")
        sub = await leader.store.websub_create(a.feed.id, hub="http://127.0.0.1:9/hub",
                                               topic=farm.url("a"), callback_id="cb", secret="s")
        await leader.store.websub_update(sub.id, state="subscribed")
        body = b"<rss/>"
        forged = await replica.websub_notify("cb", body, sign("sha256", "not-s", body))
        assert forged.status == 202
        assert leader.runtime.engine.counts()[CeiState.PENDING] == 0  # type: ignore[union-attr]
        answer = await replica.websub_notify("cb", body, sign("sha256", "s", body))
        assert answer.status == 202

        async def opened() -> bool:
            return leader.runtime.engine.counts()[CeiState.PENDING] >= 1  # type: ignore[union-attr]

        await eventually(opened, within=20, what="the forwarded push opening a CEI")
        stored = await leader.store.websub_by_callback("cb")
        assert stored is not None and (stored.notifications, stored.rejected) == (1, 1)
