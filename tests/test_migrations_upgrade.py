"""Upgrading a database with data in it, from every revision to head, on SQLite and PostgreSQL.

For each revision R: migrate an empty database to R, fill it with raw SQL written
for R's tables (users and keys, feeds, profiles and rules without a saved state,
whose JSON is the service's, not the schema's; a captured, a missed and a
pending CEI with their EIs, probes, entries and captures, chronon figures; and
what R's later tables hold: registrations, a lease, notify targets and events,
a cluster process), migrate to head, then:

- the schema equals the models;
- ``proxy db check`` is clean;
- the store reads everything back, keys authenticate, old ping tokens work;
- ``ProxyService`` starts on it (restoring the loop: profiles, rule states,
  the pending CEI) and its API serves every feed, profile and CEI with the
  stored keys.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import pool, text
from typer.testing import CliRunner

from proxy.api import make_app
from proxy.cli import app as cli_app
from proxy.service import ProxyService
from proxy.store import Store, current_revision, hash_api_key, make_engine, upgrade_database
from proxy.store.migrate import alembic_config, head_revision
from tests.test_e2e_support import e2e_settings
from tests.test_migrations import _schema_diff


def _revisions() -> list[str]:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


REVISIONS = _revisions()
KEY_ALICE = "pxk_alice_" + "a" * 40
KEY_BOB = "pxk_bob_" + "b" * 40
KEY_REVOKED = "pxk_old_" + "c" * 40
CHRONON = 60.0
T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)
OIL_RULE = {
    "name": "oil news",
    "trigger": {"feed": "1", "every": "3m", "slack": "2m", "timezone": "UTC",
                "when": {"contains": ["oil"]}},
    "query": [{"feed": "2", "within": "10m"}, {"feed": "3", "within": "10m"}],
}
ANY_RULE = {"name": "any news", "watch": {"feeds": ["1"], "within": "10m"}}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest) -> str:
    fixture = "sqlite_url" if request.param == "sqlite" else "fresh_postgres_url"
    return str(request.getfixturevalue(fixture))


def _at_least(revision: str, since: str) -> bool:
    return REVISIONS.index(revision) >= REVISIONS.index(since)


Row = dict[str, Any]


def _rows_at(revision: str) -> Iterator[tuple[str, list[Row]]]:
    """``(table, rows)`` in insertion order, as a release at ``revision`` would have stored them."""
    t = T0
    yield "users", [{"id": 1, "name": "alice", "created_at": t},
                    {"id": 2, "name": "bob", "created_at": t}]
    yield "api_keys", [
        {"id": 1, "user_id": 1, "key_hash": hash_api_key(KEY_ALICE), "prefix": KEY_ALICE[:12],
         "created_at": t, "revoked_at": None},
        {"id": 2, "user_id": 2, "key_hash": hash_api_key(KEY_BOB), "prefix": KEY_BOB[:12],
         "created_at": t, "revoked_at": None},
        {"id": 3, "user_id": 1, "key_hash": hash_api_key(KEY_REVOKED), "prefix": KEY_REVOKED[:12],
         "created_at": t, "revoked_at": t},
    ]
    feeds = [{"id": i, "url": f"http://127.0.0.1:9/feed{i}", "url_normalised": f"http://127.0.0.1:9/feed{i}",
              "resource": i - 1, "consecutive_errors": 0, "disabled": False, "created_at": t,
              "last_probe_at": t, "last_outcome": "ok"} for i in (1, 2, 3)]
    if not _at_least(revision, "0002"):  # one shared ping token per feed, until 0002
        feeds = [{**f, "ping_token": f"token-{f['id']}"} for f in feeds]
    yield "feeds", feeds
    if _at_least(revision, "0002"):
        yield "feed_registrations", [
            {"id": i, "user_id": 1, "feed_id": i, "url": f"http://127.0.0.1:9/feed{i}",
             "ping_token": f"token-{i}", "created_at": t} for i in (1, 2, 3)
        ] + [{"id": 4, "user_id": 2, "feed_id": 1, "url": "http://127.0.0.1:9/feed1",
              "ping_token": "token-bob-1", "created_at": t}]
    yield "profiles", [{"id": 1, "user_id": 1, "name": "business analyst", "created_at": t,
                        "updated_at": t},
                       {"id": 2, "user_id": 2, "name": "watcher", "created_at": t, "updated_at": t}]
    yield "rules", [{"id": 1, "profile_id": 1, "name": "oil news", "position": 0,
                     "spec": json.dumps(OIL_RULE), "state": None},
                    {"id": 2, "profile_id": 2, "name": "any news", "position": 0,
                     "spec": json.dumps(ANY_RULE), "state": None}]
    yield "rule_feeds", [{"rule_id": 1, "feed_id": 1}, {"rule_id": 1, "feed_id": 2},
                         {"rule_id": 1, "feed_id": 3}, {"rule_id": 2, "feed_id": 1}]
    yield "probes", [
        {"id": p, "feed_id": f, "chronon": c, "started_at": t + dt.timedelta(minutes=c),
         "finished_at": t + dt.timedelta(minutes=c, seconds=1), "duration_seconds": 1.0,
         "outcome": "ok", "http_status": 200, "error": None, "new_entries": 1, "bytes": 900}
        for p, f, c in ((1, 1, 1), (2, 2, 1), (3, 3, 2), (4, 1, 2))
    ]
    yield "entries", [
        {"id": e, "feed_id": f, "identity": f"urn:e{e}", "title": f"oil news {e}",
         "link": f"http://127.0.0.1:9/e{e}", "published": t, "summary": "oil",
         "first_seen_probe_id": e, "first_seen_at": t} for e, f in ((1, 1), (2, 2), (3, 3), (4, 1))
    ]
    fired = _at_least(revision, "0005")
    yield "ceis", [
        {"id": cid, "profile_id": p, "rule_id": r, "release": rel, "sealed": sealed, "state": state,
         "resolved_chronon": resolved, "created_at": t, **({"fired": f} if fired else {})}
        for cid, p, r, rel, sealed, state, resolved, f in (
            ("r1:1", 1, 1, 1, True, "captured", 2, True),
            ("r1:2", 1, 1, 2, True, "missed", 3, True),
            ("r2:1", 2, 2, 3, False, "pending", None, False),
        )
    ]
    yield "eis", [
        {"id": 1, "cei_id": "r1:1", "ordinal": 0, "feed_id": 1, "start": 1, "finish": 2,
         "reveal": 1, "state": "captured", "captured_chronon": 1, "captured_probe_id": 1},
        {"id": 2, "cei_id": "r1:1", "ordinal": 1, "feed_id": 2, "start": 1, "finish": 3,
         "reveal": None, "state": "captured", "captured_chronon": 1, "captured_probe_id": 2},
        {"id": 3, "cei_id": "r1:1", "ordinal": 2, "feed_id": 3, "start": 1, "finish": 3,
         "reveal": None, "state": "captured", "captured_chronon": 2, "captured_probe_id": 3},
        {"id": 4, "cei_id": "r1:2", "ordinal": 0, "feed_id": 1, "start": 2, "finish": 2,
         "reveal": 2, "state": "captured", "captured_chronon": 2, "captured_probe_id": 4},
        {"id": 5, "cei_id": "r1:2", "ordinal": 1, "feed_id": 2, "start": 2, "finish": 3,
         "reveal": None, "state": "missed", "captured_chronon": None, "captured_probe_id": None},
        # Far in the future of the chronons below: still pending when the service starts.
        {"id": 6, "cei_id": "r2:1", "ordinal": 0, "feed_id": 1, "start": 10_000, "finish": 10_010,
         "reveal": None, "state": "pending", "captured_chronon": None, "captured_probe_id": None},
    ]
    yield "captures", [{"id": i, "ei_id": ei, "probe_id": p, "chronon": c}
                       for i, ei, p, c in ((1, 1, 1, 1), (2, 2, 2, 1), (3, 3, 3, 2), (4, 4, 4, 2))]
    yield "chronon_metrics", [
        {"chronon": c, "started_at": t + dt.timedelta(minutes=c), "budget": 4, "used": used,
         "captured_ceis": cap, "missed_ceis": miss, "tick_jitter_seconds": 0.01}
        for c, used, cap, miss in ((1, 2, 0, 0), (2, 2, 1, 0), (3, 0, 0, 1))
    ]
    if _at_least(revision, "0003"):
        yield "leases", [{"name": "chronon-loop", "holder": None, "epoch": 3, "acquired_at": t,
                          "renewed_at": t, "expires_at": t}]
    if _at_least(revision, "0004"):
        hook = "http://127.0.0.1:9/hook"
        yield "notify_targets", [{"id": 1, "user_id": 1, "kind": "webhook", "url": hook,
                                  "url_hash": hash_api_key(hook), "secret": "whsec_" + "A" * 32,
                                  "disabled": False, "created_at": t}]
        yield "notify_subscriptions", [{"id": 1, "profile_id": 1, "rule_id": None, "target_id": 1,
                                        "events": "captured,missed"}]
        yield "notification_events", [
            {"id": e, "user_id": 1, "profile_id": 1, "cei_id": cid, "type": kind,
             "payload": json.dumps({"cei": cid, "type": kind}), "created_at": t}
            for e, cid, kind in ((1, "r1:1", "captured"), (2, "r1:2", "missed"))
        ]
        yield "deliveries", [
            {"id": 1, "event_id": 1, "target_id": 1, "msg_id": "msg_1", "state": "delivered",
             "attempts": 1, "next_attempt_at": t, "window_start": t, "last_attempt_at": t,
             "last_status": 200, "last_error": None, "delivered_at": t, "created_at": t},
            {"id": 2, "event_id": 2, "target_id": 1, "msg_id": "msg_2", "state": "failed",
             "attempts": 5, "next_attempt_at": t, "window_start": t, "last_attempt_at": t,
             "last_status": 500, "last_error": "HTTP 500", "delivered_at": None, "created_at": t},
        ]
    if _at_least(revision, "0007"):
        yield "cluster_processes", [{"id": "gone:1:x", "role": "all", "host": "gone", "port": 8000,
                                     "leads": False, "epoch": None, "started_at": t,
                                     "heartbeat_at": t}]


async def _fill(url: str, revision: str) -> None:
    engine = make_engine(url, poolclass=pool.NullPool)
    postgres = engine.dialect.name == "postgresql"
    try:
        async with engine.begin() as conn:
            for table, rows in _rows_at(revision):
                columns = list(rows[0])
                sql = (f"INSERT INTO {table} ({', '.join(columns)}) "
                       f"VALUES ({', '.join(':' + c for c in columns)})")
                await conn.execute(text(sql), [_bind(row, postgres) for row in rows])
                if postgres and "id" in columns and isinstance(rows[0]["id"], int):
                    # Explicit ids leave the sequence behind, which the releases' own inserts
                    # never did.
                    await conn.execute(text(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                        f"(SELECT max(id) FROM {table}))"))
    finally:
        await engine.dispose()


def _bind(row: Row, postgres: bool) -> Row:
    """Raw SQL's parameters: times as each driver takes them (text on SQLite, as stored there)."""
    out = {}
    for key, value in row.items():
        if isinstance(value, dt.datetime) and not postgres:
            value = value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(sep=" ")
        out[key] = value
    return out


async def test_upgrade_from_each_revision_keeps_everything(
    empty_url: str, revision: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await upgrade_database(empty_url, revision)
    assert await current_revision(empty_url) == revision
    await _fill(empty_url, revision)

    await upgrade_database(empty_url)
    assert await current_revision(empty_url) == head_revision()
    assert await _schema_diff(empty_url) == []
    for name in [n for n in os.environ if n.startswith("PROXY_")]:
        monkeypatch.delenv(name)
    await _db_check(empty_url)
    await _read_back_through_the_store(empty_url)
    await _served_by_the_service(empty_url, revision)
    await _db_check(empty_url)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "revision" in metafunc.fixturenames:
        metafunc.parametrize("revision", REVISIONS)


async def _db_check(url: str) -> None:
    """``proxy db check`` through the real Typer app (in a thread: it runs its own event loop)."""
    result = await asyncio.to_thread(
        CliRunner().invoke, cli_app, ["db", "check", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert "checked 3 CEIs, 6 EIs" in result.stdout and "ok: all" in result.stdout


async def _read_back_through_the_store(url: str) -> None:
    async with Store.from_url(url) as store:
        assert [u.name for u in await store.list_users()] == ["alice", "bob"]
        assert await store.authenticate(KEY_ALICE) == 1
        assert await store.authenticate(KEY_BOB) == 2
        assert await store.authenticate(KEY_REVOKED) is None
        assert [r.feed.id for r in await store.list_registered_feeds(1)] == [1, 2, 3]
        assert [r.feed.id for r in await store.list_registered_feeds(2)] == [1]
        # Publishers' pings keep working with the tokens they were given.
        assert 1 in await store.ping_users(1, "token-1")
        profile = await store.get_profile(1, 1)
        assert profile.name == "business analyst"
        assert [r.feed_ids for r in profile.rules] == [(1, 2, 3)]
        ceis = {c.id: c for c in await store.list_ceis(1, 1, limit=100)}
        assert {i: c.state for i, c in ceis.items()} == {"r1:1": "captured", "r1:2": "missed"}
        assert [e.state for e in ceis["r1:2"].eis] == ["captured", "missed"]
        assert [c.id for c in await store.pending_ceis_with_eis()] == ["r2:1"]
        assert [p.id for p in await store.list_probes(1)] == [4, 1]
        assert {e.identity for e in await store.list_entries(1)} == {"urn:e1", "urn:e4"}
        assert await store.last_chronon() == 3
        assert await store.cei_id_high_water() == {1: 3, 2: 2}


async def _served_by_the_service(url: str, revision: str) -> None:
    settings = e2e_settings(url, chronon_seconds=CHRONON, retention_days=0)
    async with Store.from_url(url) as store:  # chronon 3 is now: the pending CEI's windows lie ahead
        origin = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=3.5 * CHRONON)
        await store.set_state("chronon_origin", {"origin": origin.isoformat(), "length": CHRONON})
    service = ProxyService(settings)
    await service.start()
    try:
        api = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api),
                                     base_url="http://proxy.test") as client:
            async def get(path: str, key: str) -> Any:
                r = await client.get(path, headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == 200, (path, r.text)
                return r.json()

            feeds = (await get("/api/v1/feeds", KEY_ALICE))["items"]
            assert {f["id"]: f["url"] for f in feeds} == {
                i: f"http://127.0.0.1:9/feed{i}" for i in (1, 2, 3)}
            assert [p["name"] for p in (await get("/api/v1/profiles", KEY_ALICE))["items"]] == [
                "business analyst"]
            ceis = {c["id"]: c["state"]
                    for c in (await get("/api/v1/profiles/1/ceis", KEY_ALICE))["items"]}
            assert {c: ceis.get(c) for c in ("r1:1", "r1:2")} == {"r1:1": "captured",
                                                                  "r1:2": "missed"}
            bobs = (await get("/api/v1/profiles/2/ceis", KEY_BOB))["items"]
            assert {c["id"]: c["state"] for c in bobs}.get("r2:1") == "pending"
            assert [p["name"] for p in (await get("/api/v1/profiles", KEY_BOB))["items"]] == [
                "watcher"]
            revoked = await client.get("/api/v1/feeds",
                                       headers={"Authorization": f"Bearer {KEY_REVOKED}"})
            assert revoked.status_code == 401
            if _at_least(revision, "0004"):
                targets = (await get("/api/v1/targets", KEY_ALICE))["items"]
                assert [t["url"] for t in targets] == ["http://127.0.0.1:9/hook"]
        # The loop installed every profile (an invalid rule is logged and skipped) and
        # restored the pending CEI (and kept it: its windows lie ahead).
        assert set(service.runtime.versions) == {1, 2}
        assert "r2:1" in {c.id for c in await service.store.pending_ceis_with_eis()}
    finally:
        await service.stop()
