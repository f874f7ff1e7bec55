"""``proxy plan`` and ``proxy.service.planning``: stored profiles and saved update models in, a budget plan out."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from proxy.cli import app
from proxy.rules import FeedUpdateModels
from proxy.rules.ports import ChrononGrid
from proxy.service.planning import plan_inputs, run_plan
from proxy.sim.plan import PlanQuery, PlanTrigger, PlanWatch
from proxy.store import Profile, Rule, RuleInput, Store
from proxy.store.migrate import upgrade_database

ORIGIN = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)  # a Monday, 00:00 UTC
CLOCK = ChrononGrid(ORIGIN, 60.0)


def _profile(pid: int, *rules: dict[str, Any], states: tuple[Any, ...] = ()) -> Profile:
    return Profile(
        id=pid, user_id=1, name=f"p{pid}", created_at=ORIGIN, updated_at=ORIGIN,
        rules=tuple(Rule(id=10 * pid + i, profile_id=pid, name=r["name"], position=i, spec=r,
                         state=states[i] if i < len(states) else None, feed_ids=())
                    for i, r in enumerate(rules)),
    )


def test_rules_compile_as_the_evaluator_does() -> None:
    start = 1000  # chronons after the origin
    profiles = [
        _profile(1, {"name": "w", "watch": {"feeds": ["7", "8"], "within": "10m"}},
                 {"name": "t", "trigger": {"feed": "9", "every": "5m", "slack": "2m", "when": {"every_nth": 3}},
                  "query": [{"feed": "7", "within": "90s"}, {"feed": "8", "overwrite": True}]},
                 states=(None, {"next_fire": start - 3})),
        _profile(2, {"name": "c", "trigger": {"feed": "8", "cron": "0 * * * *"}, "query": [{"feed": "9", "within": "0s"}],
                     "period": {"end": (ORIGIN + dt.timedelta(minutes=start + 150)).isoformat()}},
                 {"name": "u", "trigger": {"feed": "9", "on": "update"}, "query": [{"feed": "7", "within": "1m"}]},
                 {"name": "gone", "watch": {"feeds": ["99"], "within": "1m"}}),
        _profile(3, {"name": "stale", "watch": {"feeds": ["7"], "within": "soon"}}),  # no longer validates
    ]
    models = FeedUpdateModels()
    inputs = plan_inputs(profiles, {7: 70, 8: 80, 9: 90}, models, CLOCK, start, 240)
    assert inputs.feeds == (7, 8, 9)  # plan feeds 0, 1, 2 in order of first mention
    assert (inputs.profiles, inputs.skipped, inputs.horizon, inputs.chronon_seconds) == (3, 2, 240, 60.0)
    watch, every, cron, update = inputs.rules
    assert watch == PlanWatch("1", (0, 1), 10)
    assert every == PlanTrigger("1", 2, (PlanQuery(0, 2), PlanQuery(1, None)), slack=2,
                                fires=tuple(range(2, 240, 5)), every_nth=3)  # anchored at the saved next fire
    # 1000 min after a Monday midnight is 16:40: the hours from 17:00, until the period ends at +150.
    assert cron == PlanTrigger("2", 1, (PlanQuery(2, 0),), slack=1, fires=(20, 80, 140, 200), last=149)
    assert update == PlanTrigger("2", 2, (PlanQuery(0, 1),), slack=1, fires=None)
    # Expected updates per chronon from the models: the population prior, one per 6 h.
    expected = models.expected_updates(80, CLOCK.start_of(start).timestamp(), CLOCK.start_of(start + 1).timestamp())
    assert inputs.rates.rate(1, 0) == pytest.approx(expected) == pytest.approx(60 / (6 * 3600), rel=0.01)
    assert inputs.evidence == ((0.0, 0.0),) * 3  # no feed fetched yet: the plan's allocation learns from nothing


def test_run_plan_report_lines_and_json() -> None:
    profiles = [_profile(1, {"name": "w", "watch": {"feeds": ["1"], "within": "3m"}})]
    models = FeedUpdateModels()
    # A feed whose documents show one update every 5 minutes.
    models.observe_document(10, ORIGIN.timestamp(), [ORIGIN.timestamp() - 300 * k for k in range(1, 200)])
    inputs = plan_inputs(profiles, {1: 10}, models, CLOCK, 0, 300)
    # The record the plan's allocation learns from, in chronons: 198 gaps of 5 min behind the first fetch.
    assert inputs.evidence is not None
    (updates, exposure), = inputs.evidence
    held, seconds = models.evidence(10)
    assert (updates, exposure) == (held, seconds / 60)
    assert updates >= 198 and exposure == pytest.approx(198 * 5, rel=0.01)
    report = run_plan(inputs, budget=1, target=0.9, policy="adm-edf", futures=3, seed=1)
    assert report.current.completeness == 1.0  # one feed, probed every chronon
    lines = report.lines()
    assert lines[0] == ("plan: 1 profiles, 1 rules, 1 feeds; horizon 300 chronons of 60 s, 3 futures, "
                        "seed 1, policy adm-edf")
    assert lines[1] == "budget 1: expected completeness 1.000 ± 0.000 (probes/chronon 1.0)"
    assert lines[2] == "least budget for 0.90: 1 (expected 1.000 ± 0.000, probes/chronon 1.0)"
    doc = report.to_json()
    assert doc["unrecorded_feeds"] == 0  # the one feed has a record
    assert doc["current"]["ceis"] == pytest.approx(60, rel=0.3)
    assert doc["least"] == doc["best"] == doc["current"]


# --------------------------------------------------------------------------- the CLI

LINE_PLAN = re.compile(r"^plan: 2 profiles, 3 rules, 3 feeds; horizon 600 chronons of 60 s, 4 futures, "
                       r"seed 5, policy adm-edf$")
LINE_BUDGET = re.compile(r"^budget 1: expected completeness (0\.\d{3}|1\.000) ± \d\.\d{3} \(probes/chronon 1\.0\)$")
LINE_LEAST = re.compile(r"^least budget for 0\.95: (\d+) \(expected (0\.\d{3}|1\.000) ± \d\.\d{3}, "
                        r"probes/chronon \d+\.\d\)$")


async def _database(url: str) -> None:
    """Two users' profiles and saved update models, through the store API (as the service saves them)."""
    await upgrade_database(url)
    async with Store.from_url(url) as store:
        alice, _ = await store.create_user("alice")
        bob, _ = await store.create_user("bob")
        a = [(await store.register_feed_for(alice, f"http://127.0.0.1:9/{i}.xml"))[0].feed for i in range(2)]
        b = (await store.register_feed_for(bob, "http://127.0.0.1:9/b.xml"))[0].feed
        ids = [str(f.id) for f in a]
        await store.create_profile(alice, "watch", [
            RuleInput("w", {"name": "w", "watch": {"feeds": ids, "within": "4m"}}, (a[0].id, a[1].id))])
        await store.create_profile(bob, "digest", [
            RuleInput("t", {"name": "t", "trigger": {"feed": str(b.id), "every": "10m", "slack": "3m"},
                            "query": [{"feed": str(b.id), "within": "5m"}]}, (b.id,)),
            RuleInput("u", {"name": "u", "watch": {"feeds": [str(b.id)], "within": "2m"}}, (b.id,)),
        ])
        models = FeedUpdateModels()
        now = dt.datetime.now(dt.UTC).timestamp()
        for feed, every in ((a[0], 600), (a[1], 1200), (b, 300)):
            models.observe_document(feed.resource, now, [now - every * k for k in range(1, 100)])
        await store.set_state("update_models", models.snapshot())


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    import os

    for name in list(os.environ):
        if name.startswith("PROXY_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROXY_BUDGET", "1")
    return CliRunner()


def test_proxy_plan_prints_the_documented_lines(runner: CliRunner, sqlite_url: str) -> None:
    asyncio.run(_database(sqlite_url))
    args = ["plan", "--database-url", sqlite_url, "--horizon", "600", "--futures", "4", "--seed", "5",
            "--target", "0.95"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 3, lines
    assert LINE_PLAN.match(lines[0]), lines[0]
    assert LINE_BUDGET.match(lines[1]), lines[1]
    least = LINE_LEAST.match(lines[2])
    assert least, lines[2]
    # One process per CPU by default; one process plans the same futures to the same figures.
    alone = runner.invoke(app, [*args, "--jobs", "1"])
    assert alone.exit_code == 0, alone.output
    assert alone.stdout == result.stdout

    as_json = runner.invoke(app, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.stdout)
    assert (doc["profiles"], doc["rules"], doc["feeds"], doc["horizon"], doc["futures"]) == (2, 3, 3, 600, 4)
    assert doc["unrecorded_feeds"] == 0  # the saved models hold a record of every feed
    assert doc["current"]["budget"] == 1 and doc["target"] == 0.95
    assert doc["least"]["budget"] == int(least.group(1))  # the same plan: the same seed, the same futures
    assert doc["least"]["completeness"] >= 0.95
    assert doc["max_budget"] == 3


def test_proxy_plan_without_saved_models_uses_the_prior(runner: CliRunner, sqlite_url: str) -> None:
    async def empty_models() -> None:
        await _database(sqlite_url)
        async with Store.from_url(sqlite_url) as store:
            await store.set_state("update_models", {"format": "something else"})

    asyncio.run(empty_models())
    result = runner.invoke(app, ["plan", "--database-url", sqlite_url, "--horizon", "120", "--futures", "2",
                                 "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["rules"] == 3 and doc["current"]["ceis"] > 0  # bob's digest fires whatever the rates
    assert doc["unrecorded_feeds"] == 3  # no models: every feed is learnt from nothing
    assert "saved update models not used" in result.stderr


def test_proxy_plan_refuses_an_unknown_policy(runner: CliRunner, sqlite_url: str) -> None:
    result = runner.invoke(app, ["plan", "--database-url", sqlite_url, "--policy", "nope"])
    assert result.exit_code == 1
    assert "nope" in result.stderr


def test_an_alert_compiles_with_no_query_and_the_evaluators_default_slack() -> None:
    # Issue 43: a trigger without query is a single-feed alert; its default slack is 15 minutes.
    profiles = [_profile(1, {"name": "a", "trigger": {"feed": "7", "on": "update",
                                                      "when": {"contains": ["oil"]}}},
                         {"name": "b", "trigger": {"feed": "7", "on": "update", "slack": "2m"}})]
    inputs = plan_inputs(profiles, {7: 70}, FeedUpdateModels(), CLOCK, 1000, 240)
    assert inputs.rules == (PlanTrigger("1", 0, (), slack=15, fires=None),
                            PlanTrigger("1", 0, (), slack=2, fires=None))
