"""``proxy db check``: every invariant is found broken when it is, and only then (both backends)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from pathlib import Path

import pytest
from sqlalchemy import update
from typer.testing import CliRunner

from proxy.cli import app
from proxy.store import (
    CaptureInput,
    FeedUpdate,
    NewEi,
    ProbeInput,
    RuleInput,
    Store,
)
from proxy.store._models import CeiRow, EiRow

NOW = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


async def _consistent(store: Store) -> tuple[int, int, int, int]:
    """A user, a feed, a profile and its rule, a probe that captured a CEI, a missed CEI, a
    pending CEI still within its windows and two recorded chronons: every invariant holds."""
    user, _ = await store.create_user("u")
    feed = (await store.register_feed_for(user, "http://127.0.0.1:9/a.xml"))[0].feed.id
    profile = await store.create_profile(user, "p", [RuleInput("r", {"x": 1}, (feed,))])
    rule = profile.rules[0].id
    ids = await store.add_ceis([
        ("r1:0", profile.id, rule, 1, True, [NewEi(0, feed, 1, 3)]),
        ("r1:1", profile.id, rule, 1, True, [NewEi(0, feed, 1, 2)]),
        ("r1:2", profile.id, rule, 5, True, [NewEi(0, feed, 5, 9)]),
    ])
    from proxy.store import CeiStateChange

    await store.record_probe(
        ProbeInput(feed_id=feed, started_at=NOW, outcome="ok", chronon=2),
        captures=[CaptureInput(ids["r1:0"][0], 2)],
        cei_changes=[CeiStateChange("r1:0", "captured", 2)],
        feed_update=FeedUpdate(probed_at=NOW, outcome="ok"))
    await store.resolve_ceis([CeiStateChange("r1:1", "missed", 3)])
    for t in (2, 6):
        await store.record_chronon_metrics(t, started_at=NOW, budget=1, used=1)
    return user, feed, profile.id, rule


async def test_a_consistent_database_passes(store: Store) -> None:
    await _consistent(store)
    report = await store.audit(grace=2)
    assert (report.ceis, report.eis, report.chronons, report.last_chronon) == (3, 3, 2, 6)
    assert report.violations == ()


async def test_each_broken_invariant_is_named(store: Store) -> None:
    _, feed, pid, rule = await _consistent(store)
    # A CEI captured while its EI is pending, an EI captured by nobody, a missed CEI whose
    # every EI was captured, a chronon over budget, a pending CEI long past its window.
    ids = await store.add_ceis([
        ("r1:3", pid, rule, 1, True, [NewEi(0, feed, 1, 2)]),
        ("r1:4", pid, rule, 1, True, [NewEi(0, feed, 1, 2)]),
        ("r1:5", pid, rule, 1, True, [NewEi(0, feed, 1, 2)]),
    ])
    async with store.engine.begin() as conn:
        await conn.execute(update(CeiRow).where(CeiRow.id == "r1:3").values(state="captured"))
        await conn.execute(update(EiRow).where(EiRow.id == ids["r1:4"][0])
                           .values(state="captured", captured_chronon=2))
        await conn.execute(update(CeiRow).where(CeiRow.id == "r1:4").values(state="missed"))
    for _ in range(2):
        await store.record_probe(ProbeInput(feed_id=feed, started_at=NOW, outcome="ok", chronon=6))
    report = await store.audit(grace=2)
    found = sorted((v.invariant, v.detail) for v in report.violations)
    assert found == [
        ("captured_cei_all_eis_captured", "CEI 'r1:3' is captured but its EI #0 is pending"),
        ("captured_ei_has_capture_and_probe",
         f"EI #0 (id {ids['r1:4'][0]}) of CEI 'r1:4' is captured without its capture record and probe"),
        ("chronon_within_budget", "chronon 6 has 2 probes over its budget of 1"),
        ("missed_cei_has_uncaptured_ei", "CEI 'r1:4' is missed but every EI of it was captured"),
        ("no_pending_cei_past_its_windows",
         "CEI 'r1:5' (sealed) is pending though its last window closed at chronon 2 and the "
         "loop reached chronon 6"),
    ]
    # Within the grace, a pending CEI is not stuck yet.
    assert "no_pending_cei_past_its_windows" not in {
        v.invariant for v in (await store.audit(grace=4)).violations}


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    for name in list(os.environ):
        if name.startswith("PROXY_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return CliRunner()


async def _break_one(url: str) -> None:
    async with Store.from_url(url) as store:
        _, _, _, _ = await _consistent(store)
        async with store.engine.begin() as conn:
            await conn.execute(update(CeiRow).where(CeiRow.id == "r1:2").values(state="captured"))


def test_cli_exits_0_when_sound_and_1_naming_each_violation(
    runner: CliRunner, sqlite_url: str
) -> None:
    assert runner.invoke(app, ["db", "upgrade", "--database-url", sqlite_url]).exit_code == 0
    ok = runner.invoke(app, ["db", "check", "--database-url", sqlite_url])
    assert ok.exit_code == 0, ok.output
    assert "ok: all 5 invariants hold" in ok.stdout
    asyncio.run(_break_one(sqlite_url))
    bad = runner.invoke(app, ["db", "check", "--database-url", sqlite_url])
    assert bad.exit_code == 1
    assert "captured_cei_all_eis_captured" in bad.stderr
    assert "CEI 'r1:2' is captured but its EI #0 is pending" in bad.stderr
    assert "error: 1 invariant violation(s)" in bad.stderr
