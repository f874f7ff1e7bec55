"""End to end, feeds that never ping: the service finds their updates itself, with its spare budget.

The real service (loop, fetcher, store, API) against the feed farm, 50 ms
chronons, no ping anywhere. Rules that wait for updates (a watch rule over two
feeds, an ``on: update`` trigger with a keyword) get no EI until a probe finds
something, so only background probes can move them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from proxy.farm import FeedFarm
from proxy.rules import GammaPrior, UpdateModelSettings
from proxy.service import ProxyService
from tests.test_e2e_support import (
    CHRONON,
    Running,
    e2e_settings,
    eventually,
    parse_metrics,
    running,
)

pytestmark = pytest.mark.slow


async def _ceis(px: Running, profile: int, state: str | None = None) -> list[dict[str, Any]]:
    r = await px.get(f"/api/v1/profiles/{profile}/ceis", params={"state": state} if state else {})
    assert r.status_code == 200, r.text
    ceis: list[dict[str, Any]] = r.json()["items"]
    return ceis


async def test_rules_on_feeds_that_never_ping_fire_from_probes(database_url: str) -> None:
    settings = e2e_settings(database_url, budget=2, policy="adm-edf")
    async with FeedFarm(["a", "b", "blog", "news"], prefill=3) as farm, running(settings) as px:
        ids = {}
        for name in ("a", "b", "blog", "news"):
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
        body = {
            "name": "no pings",
            "rules": [
                # within 3 s = 60 chronons: two spare probes a chronon over three feeds find
                # each update in time.
                {"name": "both", "watch": {"feeds": [str(ids["a"]), str(ids["b"])], "within": "3s"}},
                {"name": "oil", "trigger": {"feed": str(ids["blog"]), "on": "update", "slack": "3s",
                                            "when": {"contains": ["oil"]}},
                 "query": [{"feed": str(ids["news"]), "within": "3s"}]},
            ],
        }
        r = await px.post("/api/v1/profiles", body)
        assert r.status_code == 201, r.text
        pid, watch_rule = r.json()["id"], r.json()["rules"][0]["id"]

        # Before any update the spare budget already probes the watched feeds (their first
        # probe is the baseline): the budget is not idle.
        async def baseline() -> dict[str, float]:
            m = parse_metrics((await px.client.get("/metrics")).text)
            return m if m.get("proxy_background_probes_total", 0) >= 6 else {}

        await eventually(baseline, what="background probes of the watched feeds")
        assert await _ceis(px, pid) == []  # the documents' backlog is no update

        farm.publish("a", title="bid 1")
        farm.publish("b", title="bid 2")
        farm.publish("blog", title="Oil prices jump", summary="crude oil at $90")

        async def watch_captured() -> list[dict[str, Any]]:
            return [c for c in await _ceis(px, pid, "captured") if c["rule_id"] == watch_rule]

        cei = (await eventually(watch_captured, what="the watch rule's CEI captured"))[0]
        assert sorted(ei["feed"] for ei in cei["eis"]) == sorted([ids["a"], ids["b"]])
        assert all(ei["state"] == "captured" for ei in cei["eis"])

        async def fired() -> list[dict[str, Any]]:
            return [c for c in await _ceis(px, pid, "captured") if len(c["eis"]) == 2
                    and c["eis"][0]["feed"] == ids["blog"]]

        oil = (await eventually(fired, what="the on: update rule fired and captured"))[0]
        assert [ei["feed"] for ei in oil["eis"]] == [ids["blog"], ids["news"]]
        # The trigger EI starts at the estimated update, before the probe that found it.
        trigger = oil["eis"][0]
        assert trigger["start"] <= trigger["captured_chronon"] <= trigger["finish"]


async def test_predicted_eis_probe_feeds_that_never_ping_and_stay_internal(database_url: str) -> None:
    # No polling of the feeds before the rule (PROXY_UNWATCHED_PROBE_INTERVAL_SECONDS=0): their first
    # documents, dated years back by the farm, would tell the models the feeds are dead before the
    # chains start, and no predicted EI would come due within the test.
    settings = e2e_settings(database_url, budget=2, policy="adm-edf", discovery_predicted="fbsup",
                            unwatched_probe_interval_seconds=0)
    # 50 ms chronons squeeze time: a prior of one update every 4 s (80 chronons), worth 20 updates,
    # makes the models expect updates within the test, as a real prior does within real hours.
    fast = UpdateModelSettings(default_prior=GammaPrior(20.0, 80.0))
    async with FeedFarm(["a", "b"], prefill=3) as farm, running(settings, update_models=fast) as px:
        ids = []
        for name in ("a", "b"):
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        body = {"name": "no pings", "rules": [
            {"name": "both", "watch": {"feeds": [str(i) for i in ids], "within": "2s"}}]}
        r = await px.post("/api/v1/profiles", body)
        assert r.status_code == 201, r.text
        pid, watch_rule = r.json()["id"], r.json()["rules"][0]["id"]
        predicted = px.service.loop.predicted
        assert predicted is not None and predicted.feedback

        # The predicted EIs come due and are probed, counted apart from the background.
        async def probed() -> dict[str, float]:
            m = parse_metrics((await px.client.get("/metrics")).text)
            return m if m.get("proxy_predicted_probes_total", 0) >= 2 else {}

        await eventually(probed, what="probes for predicted EIs")
        assert predicted.watched() == {px.service.runtime.feeds.by_id[i].resource for i in ids}

        # Nothing changed yet, so every probe found nothing: fbSUP re-predicted after them.
        async def reopened() -> int:
            return predicted.feedback_eis
        await eventually(reopened, what="fbSUP opening the next predicted EI after an empty probe")
        assert await _ceis(px, pid) == []  # predicted EIs are no user's CEIs

        farm.publish("a", title="bid 1")
        farm.publish("b", title="bid 2")

        async def watch_captured() -> list[dict[str, Any]]:
            return [c for c in await _ceis(px, pid, "captured") if c["rule_id"] == watch_rule]

        await eventually(watch_captured, what="the watch rule's CEI captured")
        # Only the user's CEIs exist, in the API and in the engine's counts (metrics, completeness).
        listed = await _ceis(px, pid)
        assert {c["rule_id"] for c in listed} == {watch_rule}
        assert all(sorted(ei["feed"] for ei in c["eis"]) == sorted(ids) for c in listed)
        engine_ceis = sum(px.service.runtime.engine.counts().values())
        assert engine_ceis in (len(listed), len(listed) + 1)  # + the next CEI, opened but not yet written


async def test_update_models_are_learnt_shown_and_restored_after_a_restart(database_url: str) -> None:
    settings = e2e_settings(database_url, budget=2, policy="adm-edf")
    # Entries dated in real time, an hour apart before now: what a real feed's first document says.
    farm = FeedFarm(["a", "b"], prefill=6, epoch=dt.datetime.now(dt.UTC), trace_unit=dt.timedelta(hours=1),
                    seconds_per_trace_unit=3600.0)
    async with farm:
        async with running(settings) as px:
            ids = []
            for name in ("a", "b"):
                r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
                ids.append(r.json()["id"])
            body = {"name": "w", "rules": [{"name": "w", "watch": {"feeds": [str(i) for i in ids],
                                                                    "within": "1s"}}]}
            assert (await px.post("/api/v1/profiles", body)).status_code == 201

            async def learnt() -> dict[str, Any]:
                feed = (await px.get(f"/api/v1/feeds/{ids[0]}")).json()
                # Six hourly entries: the oldest bounds the record, the five after it are updates.
                return feed if feed["update_model"]["updates"] >= 5 else {}

            feed = await eventually(learnt, what="feed a's update model learnt from its documents")
            model = feed["update_model"]
            assert model["kind"] in {"prior", "poisson", "seasonal", "periodic"}
            assert 0.2 < model["rate_per_hour"] < 5  # about one an hour, shrunk toward the prior
            assert model["next_expected_at"] is not None
            listed = (await px.get("/api/v1/feeds")).json()["items"]
            assert all(f["update_model"] is None for f in listed)  # only the single-feed route
            await px.service.save_update_models()
            kinds = {k: v for k, v in parse_metrics((await px.client.get("/metrics")).text).items()
                     if k.startswith("proxy_update_models{")}
            assert sum(kinds.values()) == 2
            first = px.service
            feeds = {i: await first.store.get_feed(i) for i in ids}
        before = {i: await first.update_model(feeds[i]) for i in ids}  # as saved when the service stopped
        # A new process on the same database (not ticking, so nothing new is learnt): the
        # models come back as they were saved.
        async with ProxyService(settings, run_loop=False) as again:
            for i in ids:
                restored, saved = await again.update_model(feeds[i]), before[i]
                assert restored is not None and saved is not None
                assert (restored.kind, restored.observations, restored.updates) == (
                    saved.kind, saved.observations, saved.updates)
                assert restored.rate_per_hour == pytest.approx(saved.rate_per_hour)
                # The background ranking's rates come back too, not 0 until each feed's next probe.
                slot = again.runtime.feeds.by_id[i]
                assert slot.mean_rate * 3600 == pytest.approx(saved.rate_per_hour, rel=0.05)


async def test_a_change_published_before_a_feeds_first_successful_probe_reaches_the_watch_rule(
    database_url: str,
) -> None:
    """Both feeds publish after the rule is made, before their first probe: the first documents carry the change.

    With a budget of 1, forty other waited-for feeds registered earlier take their first
    probes before ``a`` and ``b`` (never-probed feeds go by id): eight seconds (0.2 s
    chronons) in which ``a`` and ``b`` publish. Their first successful probes are baselines
    for the backlog (the prefilled entries, older than the rule) but not for the bids
    published since the rule's install: the watch rule's CEI is built from them and
    captured by those very probes.
    """
    # 0.2 s chronons, not the usual 0.05: registering the 42 feeds and the rules took longer
    # than 40 chronons of 0.05 s with three test workers on a loaded machine (issue 48).
    settings = e2e_settings(database_url, budget=1, policy="adm-edf", chronon_seconds=0.2)
    fillers = [f"f{i}" for i in range(40)]
    async with FeedFarm([*fillers, "a", "b"], prefill=3) as farm, running(settings) as px:
        ids = {}
        for name in [*fillers, "a", "b"]:
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
        rules = [{"name": f"w{i}", "watch": {"feeds": [str(ids[fillers[2 * i]]), str(ids[fillers[2 * i + 1]])],
                                              "within": "60s"}} for i in range(20)]
        r = await px.post("/api/v1/profiles", {"name": "others", "rules": rules})
        assert r.status_code == 201, r.text
        body = {"name": "late first fetch",
                "rules": [{"name": "both", "watch": {"feeds": [str(ids["a"]), str(ids["b"])], "within": "60s"}}]}
        r = await px.post("/api/v1/profiles", body)
        assert r.status_code == 201, r.text
        pid = r.json()["id"]
        # Dated as a real feed dates them, on the wall clock (the farm's own dates are on its trace's
        # calendar, years back: undated, in effect, which a first document cannot place).
        farm.publish("a", title="bid 1", published=dt.datetime.now(dt.UTC))
        farm.publish("b", title="bid 2", published=dt.datetime.now(dt.UTC))
        assert farm.stats("a").requests == farm.stats("b").requests == 0  # not probed yet: the test's premise

        async def captured() -> list[dict[str, Any]]:
            return await _ceis(px, pid, "captured")

        cei = (await eventually(captured, within=60,
                                what="the watch CEI built from the first documents, captured"))[0]
        assert sorted(ei["feed"] for ei in cei["eis"]) == [ids["a"], ids["b"]]
        assert all(ei["state"] == "captured" and ei["start"] <= ei["captured_chronon"] <= ei["finish"]
                   for ei in cei["eis"])
        assert await _ceis(px, pid, "missed") == []
        for name in ("a", "b"):  # captured by the feeds' first probes, the ones that saw the bids
            assert farm.stats(name).requests == 1


async def test_feeds_no_rule_reads_are_polled_with_the_budget_rules_leave(database_url: str) -> None:
    """An OPML import and no rule: the feeds are polled as a reader would, no more often than the interval.

    The budget no rule needs goes to the registered feeds no rule reads, never-probed first:
    their health shows, and their update models learn from their documents before any rule
    exists. A feed a rule reads leaves this polling for the rules' own. After a restart the
    last probes come back from the database: the new process does not poll them all again.
    """
    every = 10  # chronons between two probes of a feed no rule reads
    settings = e2e_settings(database_url, budget=2, policy="adm-edf",
                            unwatched_probe_interval_seconds=every * CHRONON)
    names = ["a", "b", "c", "d", "e"]
    # Entries dated in real time, an hour apart before now: a real feed's first document.
    farm = FeedFarm(names, prefill=6, epoch=dt.datetime.now(dt.UTC), trace_unit=dt.timedelta(hours=1),
                    seconds_per_trace_unit=3600.0)
    async with farm:
        async with running(settings) as px:
            loop = px.service.loop
            first = loop.current
            assert first is not None
            outlines = "".join(f'<outline type="rss" text="{n}" xmlUrl="{farm.url(n)}"/>' for n in names)
            opml = f'<?xml version="1.0"?><opml version="2.0"><head/><body>{outlines}</body></opml>'
            r = await px.client.post("/api/v1/feeds/opml", content=opml,
                                     headers={**px.auth, "Content-Type": "text/x-opml"})
            assert r.status_code == 200, r.text
            ids = {o["url"]: o["feed_id"] for o in r.json()["outlines"]}
            assert len(ids) == 5

            async def polled_twice() -> list[dict[str, Any]]:
                listed: list[dict[str, Any]] = (await px.get("/api/v1/feeds")).json()["items"]
                done = all(farm.stats(n).requests >= 2 for n in names)
                return listed if done and all(f["last_probe_at"] for f in listed) else []

            listed = await eventually(polled_twice, what="every imported feed polled twice, with no rule")
            last = loop.current
            assert last is not None
            for n in names:  # never more often than once per `every` chronons
                assert farm.stats(n).requests <= (last - first) // every + 1, n
            assert {f["last_outcome"] for f in listed} <= {"ok", "not_modified"}
            m = parse_metrics((await px.client.get("/metrics")).text)
            assert m["proxy_unwatched_probes_total"] >= 10
            assert m.get("proxy_background_probes_total", 0) == 0  # no rule waits for anything
            # Learnt with no rule: six hourly entries, the five after the oldest are updates.
            model = (await px.get(f"/api/v1/feeds/{ids[farm.url('a')]}")).json()["update_model"]
            assert model["updates"] >= 5 and 0.2 < model["rate_per_hour"] < 5

            # A rule reads a and b: their probes are the rules' from now on (background), not these.
            ab = [str(ids[farm.url("a")]), str(ids[farm.url("b")])]
            body = {"name": "w", "rules": [{"name": "w", "watch": {"feeds": ab, "within": "1s"}}]}
            assert (await px.post("/api/v1/profiles", body)).status_code == 201
            before = parse_metrics((await px.client.get("/metrics")).text)["proxy_unwatched_probes_total"]
            start = loop.current
            assert start is not None

            async def background() -> dict[str, float]:
                m = parse_metrics((await px.client.get("/metrics")).text)
                return m if m.get("proxy_background_probes_total", 0) >= 6 and loop.current - start >= 3 * every \
                    else {}

            m = await eventually(background, what="background probes of the watched feeds")
            end = loop.current
            assert end is not None
            # Only c, d and e are left to this polling (a probe decided just before the rule may count).
            assert m["proxy_unwatched_probes_total"] - before <= 3 * ((end - start) // every + 1) + 2

        # Counted once the first process has stopped: until then it may still poll c, d or e
        # (they come due every ten chronons), and those probes are its, not the next one's.
        requests = {n: farm.stats(n).requests for n in names}
        # A new process on the same database, the interval now an hour and budget to spare beyond
        # a and b (the rule's): the last probes are restored, so c, d and e are not due.
        hourly = e2e_settings(database_url, budget=4, policy="adm-edf", unwatched_probe_interval_seconds=3600)
        async with running(hourly) as px:
            loop = px.service.loop
            begun = loop.current
            assert begun is not None

            async def ticked() -> int:
                return 1 if loop.current is not None and loop.current - begun >= 2 * every else 0

            await eventually(ticked, what="twenty chronons of the new process")
            m = parse_metrics((await px.client.get("/metrics")).text)
            assert m.get("proxy_unwatched_probes_total", 0) == 0
            assert {n: farm.stats(n).requests for n in "cde"} == {n: requests[n] for n in "cde"}

            # A rule made now on e, polled long ago: nothing is new to the feed (a conditional
            # request would answer 304), yet its backfill fires on the newest entry of the backlog.
            e, c = str(ids[farm.url("e")]), str(ids[farm.url("c")])
            body = {"name": "late", "rules": [{"name": "bf", "trigger": {"feed": e, "every": "1s", "slack": "1s",
                                                                         "backfill": 1},
                                               "query": [{"feed": c, "within": "1s"}]}]}
            r = await px.post("/api/v1/profiles", body)
            assert r.status_code == 201, r.text
            late = r.json()["id"]

            async def backfilled() -> list[dict[str, Any]]:
                return [x for x in await _ceis(px, late, "captured") if x["fired"]]

            (cei, *_) = await eventually(backfilled, what="the backfill rule fired on the polled feed's backlog")
            assert [ei["feed"] for ei in cei["eis"]] == [int(e), int(c)]
