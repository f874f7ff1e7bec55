"""API replicas (issue 21): changes stored by a replica reach the leader through LISTEN/NOTIFY.

Two services on one PostgreSQL database, in one process: the leader (engine,
evaluator) and a replica (``campaign=False``, what ``--role api`` runs). Every
change made through the replica is stored, then applied by the leader as if
its own API had received it; a refused change stores nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.api import make_app
from proxy.core.engine import CeiState
from proxy.errors import ConflictError, ValidationError
from proxy.farm import FeedFarm
from proxy.rules import ProfileSpec
from proxy.service import ProxyService
from proxy.service.runtime import rule_key
from proxy.store import Profile, RegisteredFeed, upgrade_database
from tests.test_e2e_support import e2e_settings, eventually

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pair(fresh_postgres_url: str) -> AsyncIterator[tuple[ProxyService, ProxyService]]:
    await upgrade_database(fresh_postgres_url)
    settings = e2e_settings(fresh_postgres_url, chronon_seconds=60.0)
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


def _spec(trigger: int, query: int, name: str = "oil") -> ProfileSpec:
    body: dict[str, Any] = {"name": name, "rules": [{
        "name": "r", "trigger": {"feed": str(trigger), "on": "ping"},
        "query": [{"feed": str(query), "within": "10m"}]}]}
    return ProfileSpec.model_validate(body)


async def test_changes_through_a_replica_reach_the_leader(
    pair: tuple[ProxyService, ProxyService]
) -> None:
    leader, replica = pair
    user, _ = await leader.store.create_user("alice")
    status = await replica.status()
    assert status.role == "api" and status.ready
    async with FeedFarm(["a", "b"], prefill=1) as farm:
        a, created = await replica.register_feed(user, farm.url("a"))
        b, _ = await replica.register_feed(user, farm.url("b"))
        assert created

        async def feeds_known() -> bool:
            return {a.feed.id, b.feed.id} <= set(leader.runtime.feeds.by_id)

        await eventually(feeds_known, within=20, what="the leader learning the feeds")

        # The replica's own API reads its writes at once: its cached pages and summaries
        # hear of the change (they key on this version, or are amended by the announcement).
        version = replica.profiles_version(user)
        profile = await replica.create_profile(user, _spec(a.feed.id, b.feed.id))
        assert replica.profiles_version(user) == version + 1

        async def installed() -> bool:
            return str(profile.id) in leader.runtime.evaluator.profile_ids()

        await eventually(installed, within=20, what="the leader installing the profile")

        assert await replica.ping(a.feed.id, a.registration.ping_token) == 0

        async def opened() -> bool:
            return leader.runtime.engine.counts()[CeiState.PENDING] >= 1

        await eventually(opened, within=20, what="the forwarded ping opening a CEI")

        with pytest.raises(ConflictError):  # a rule still reads it: refused, nothing changes
            await replica.delete_feed(user, b.feed.id)
        await replica.delete_profile(user, profile.id)
        assert replica.profiles_version(user) == version + 2

        async def removed() -> bool:
            return str(profile.id) not in leader.runtime.evaluator.profile_ids()

        await eventually(removed, within=20, what="the leader removing the profile")
        await replica.delete_feed(user, b.feed.id)

        async def feed_gone() -> bool:
            return b.feed.id not in leader.runtime.feeds.by_id

        await eventually(feed_gone, within=20, what="the leader dropping the feed")
        assert a.feed.id in leader.runtime.feeds.by_id


async def test_a_refused_change_on_a_replica_stores_nothing(
    pair: tuple[ProxyService, ProxyService]
) -> None:
    leader, replica = pair
    user, _ = await leader.store.create_user("bob")
    with pytest.raises(ValidationError, match=r"rules\.0\.trigger\.feed"):
        await replica.create_profile(user, _spec(999, 998))
    assert await replica.store.list_profiles(user) == []
    await asyncio.sleep(0)
    assert leader.runtime.evaluator.profile_ids() == []


async def _watched_pair(
    leader: ProxyService, replica: ProxyService, user: int, farm: FeedFarm
) -> tuple[RegisteredFeed, RegisteredFeed, Profile]:
    """Feeds a and b registered through the replica and known to the leader, and a watch rule
    over both stored through the replica."""
    a, _ = await replica.register_feed(user, farm.url("a"))
    b, _ = await replica.register_feed(user, farm.url("b"))

    async def feeds_known() -> bool:
        return {a.feed.id, b.feed.id} <= set(leader.runtime.feeds.by_id)

    await eventually(feeds_known, within=20, what="the leader learning the feeds")
    watch = {"name": "pair", "rules": [{"name": "w", "watch": {
        "feeds": [str(a.feed.id), str(b.feed.id)], "within": "10m"}}]}
    return a, b, await replica.create_profile(user, ProfileSpec.model_validate(watch))


async def test_a_replica_reads_the_update_models_the_leader_saved(
    pair: tuple[ProxyService, ProxyService]
) -> None:
    """``GET /api/v1/feeds/{id}`` and ``GET /api/v1/plan`` on a process without the loop: the
    feed page failed with 500 there (it asked for the loop's runtime), and the plan answered 503
    though it is a read. Both now read the models the leader saved last."""
    leader, replica = pair
    user, key = await leader.store.create_user("carol")
    auth = {"Authorization": f"Bearer {key}"}
    async with FeedFarm(["a", "b"], prefill=1) as farm:
        a, b, _ = await _watched_pair(leader, replica, user, farm)
        # The leader learns a half-hourly feed from a document's dates, then saves its models
        # the way its housekeeping does every five minutes.
        now = leader.clock.now().timestamp()
        leader.runtime.models.observe_document(a.feed.resource, now, [now - 1800 * k for k in range(1, 60)])
        await leader.save_update_models()
        expected = leader.runtime.models.estimate(a.feed.resource, after=now)
        assert expected.kind != "prior" and expected.rate_per_hour == pytest.approx(2.0, rel=0.1)

        app = make_app(replica.settings, service=replica, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replica") as api:
            got = await api.get(f"/api/v1/feeds/{a.feed.id}", headers=auth)
            assert got.status_code == 200, got.text
            model = got.json()["update_model"]
            assert model["kind"] == expected.kind
            assert model["rate_per_hour"] == pytest.approx(expected.rate_per_hour)
            assert model["updates"] == expected.updates
            # A feed the leader has learnt nothing of: the population prior, as on the leader.
            other = (await api.get(f"/api/v1/feeds/{b.feed.id}", headers=auth)).json()["update_model"]
            assert other["kind"] == "prior"

            plan = await api.get("/api/v1/plan", params={"horizon": 1440, "futures": 2}, headers=auth)
            assert plan.status_code == 200, plan.text
            body = plan.json()
            assert (body["profiles"], body["rules"], body["feeds"]) == (1, 1, 2)
            assert body["current"]["completeness"] is not None


async def test_a_replica_shows_rule_status_from_the_states_the_leader_stored(
    pair: tuple[ProxyService, ProxyService]
) -> None:
    leader, replica = pair
    user, key = await leader.store.create_user("dave")
    async with FeedFarm(["a", "b"], prefill=1) as farm:
        a, b, profile = await _watched_pair(leader, replica, user, farm)

        async def installed() -> bool:
            return str(profile.id) in leader.runtime.evaluator.profile_ids()

        await eventually(installed, within=20, what="the leader installing the profile")
        assert await replica.ping(b.feed.id, b.registration.ping_token) == 0  # forwarded to the leader

        app = make_app(replica.settings, service=replica, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replica") as api:
            async def building() -> dict[str, Any]:
                got = await api.get(f"/api/v1/profiles/{profile.id}/status",
                                    headers={"Authorization": f"Bearer {key}"})
                assert got.status_code == 200, got.text
                body: dict[str, Any] = got.json()
                return body if body["rules"][0]["state"] == "building" else {}

            body = await eventually(building, within=20, what="the leader storing the rule's state")
        assert body["source"] == "saved"
        rule = body["rules"][0]
        assert rule["waiting_for"] == [a.feed.id]
        assert [s["feed"] for s in rule["seen"]] == [b.feed.id]
        live = await leader.profile_status(user, profile.id)
        assert live.source == "live"
        assert (live.rules[0].state, live.rules[0].waiting_for, live.rules[0].building_cei) == (
            "building", (a.feed.id,), rule["building_cei"])


async def test_what_the_leader_did_not_hear_is_resynchronised_when_it_listens_again(
    pair: tuple[ProxyService, ProxyService]
) -> None:
    leader, replica = pair
    user, _ = await leader.store.create_user("carol")
    listener = leader._changes
    assert listener is not None

    async def resynced_at_start() -> bool:  # once, as it first listened after the restore
        return listener.resyncs == 1

    await eventually(resynced_at_start, within=20, what="the resync at start")
    async with FeedFarm(["a", "b", "c"], prefill=1) as farm:
        a, _ = await replica.register_feed(user, farm.url("a"))
        b, _ = await replica.register_feed(user, farm.url("b"))

        async def feeds_known() -> bool:
            return {a.feed.id, b.feed.id} <= set(leader.runtime.feeds.by_id)

        await eventually(feeds_known, within=20, what="the leader learning the feeds")
        kept = await replica.create_profile(user, _spec(a.feed.id, b.feed.id, "kept"))
        changed = await replica.create_profile(user, _spec(a.feed.id, b.feed.id, "changed"))
        dropped = await replica.create_profile(user, _spec(b.feed.id, a.feed.id, "dropped"))

        async def installed(*ids: int) -> bool:
            return {str(i) for i in ids} <= set(leader.runtime.evaluator.profile_ids())

        await eventually(lambda: installed(kept.id, changed.id, dropped.id), within=20,
                         what="the three profiles on the leader")
        assert await replica.ping(a.feed.id, a.registration.ping_token) == 0
        kept_rule = rule_key(kept.rules[0].id)

        async def kept_open() -> list[str]:
            return [c for c in leader.runtime.evaluator.open_cei_ids() if c.startswith(kept_rule)]

        open_before = await eventually(kept_open, within=20, what="the ping opening kept's CEI")
        state_before = leader.runtime.evaluator.snapshot_state(kept_rule)

        await listener.stop()  # nobody listens: the next notifications are lost
        c, _ = await replica.register_feed(user, farm.url("c"))
        new = await replica.create_profile(user, _spec(c.feed.id, a.feed.id, "new"))
        replaced = await replica.replace_profile(user, changed.id, _spec(b.feed.id, c.feed.id, "changed"))
        await replica.delete_profile(user, dropped.id)
        await asyncio.sleep(0.5)
        assert not await installed(new.id)  # unheard

        listener.start()

        async def caught_up() -> bool:
            rt = leader.runtime
            return (await installed(new.id) and str(dropped.id) not in rt.evaluator.profile_ids()
                    and c.feed.id in rt.feeds.by_id
                    and rt.versions.get(changed.id) == replaced.updated_at)

        await eventually(caught_up, within=20, what="the leader resynchronised")
        assert listener.resyncs == 2
        # The profile that did not change was left alone: its open CEI and its state.
        assert await kept_open() == open_before
        assert leader.runtime.evaluator.snapshot_state(kept_rule) == state_before
