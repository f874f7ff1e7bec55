"""Trace-driven publication on the accelerated clock, the publication log, and pings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from proxy.farm import (
    DEFAULT_EPOCH,
    FeedFarm,
    ManualClock,
    PingRequest,
    Publication,
    TraceEvent,
    load_csv_trace,
    load_publications,
    poisson_schedule,
)

# 1/16 s per trace unit keeps clock arithmetic exact in binary floating point.
SPT = 0.0625


async def test_schedule_publishes_the_due_entries_at_the_accelerated_times() -> None:
    clock = ManualClock(100.0)
    schedule = [
        TraceEvent(1.0, "a"),
        TraceEvent(2.5, "b"),
        TraceEvent(2.5, "a"),
        TraceEvent(10.0, "c"),
    ]
    async with FeedFarm(
        ["a", "b", "c"], clock=clock, schedule=schedule, seconds_per_trace_unit=SPT
    ) as farm:
        assert farm.pump() == []
        clock.advance(SPT * 1 - 0.001)
        assert farm.pump() == []
        clock.set(100.0 + SPT * 1)  # exactly due
        first = farm.pump()
        assert [(p.feed_id, p.trace_time, p.entry_id) for p in first] == [
            ("a", 1.0, "urn:feedfarm:a:1")
        ]
        assert first[0].published == DEFAULT_EPOCH + timedelta(minutes=1)
        assert first[0].clock_time == 100.0 + SPT

        # A request pumps too: moving the clock is enough for a GET to see due entries.
        clock.set(100.0 + SPT * 9.9)
        async with httpx.AsyncClient() as c:
            body = (await c.get(farm.url("a"))).text
        assert "urn:feedfarm:a:2" in body
        assert "<pubDate>Thu, 01 Jan 2026 00:02:30 GMT</pubDate>" in body
        assert [(p.feed_id, p.trace_time) for p in farm.publications] == [
            ("a", 1.0),
            ("b", 2.5),
            ("a", 2.5),
        ]
        assert not farm.schedule_done
        clock.advance(SPT * 0.1)
        assert [p.feed_id for p in farm.pump()] == ["c"]
        assert farm.schedule_done


async def test_real_clock_driver_plays_a_schedule_without_requests() -> None:
    schedule = [TraceEvent(t, "0") for t in (0.0, 0.5, 1.0)]
    async with FeedFarm(1, schedule=schedule, seconds_per_trace_unit=0.01) as farm:
        for _ in range(200):
            if farm.schedule_done:
                break
            await asyncio.sleep(0.01)
        assert [p.trace_time for p in farm.publications] == [0.0, 0.5, 1.0]


async def test_schedule_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="does not have"):
        FeedFarm(["a"], schedule=[TraceEvent(1.0, "zzz")])
    backwards = [TraceEvent(2.0, "a"), TraceEvent(1.0, "a")]
    with pytest.raises(ValueError, match="back in time"):
        FeedFarm(["a"], schedule=backwards)
    # a lazy schedule is checked as it is played
    clock = ManualClock()
    farm = FeedFarm(["a"], clock=clock, schedule=iter(backwards), seconds_per_trace_unit=SPT)
    clock.advance(2 * SPT)
    with pytest.raises(ValueError, match="back in time"):
        farm.pump()


def test_poisson_schedule_is_seeded_ordered_and_has_the_right_rates() -> None:
    ids = ["x", "y", "z"]
    a = list(poisson_schedule(ids, [2.0, 0.5, 0.0], seed=11, horizon=1000.0))
    b = list(poisson_schedule(ids, [2.0, 0.5, 0.0], seed=11, horizon=1000.0))
    assert a == b
    assert a != list(poisson_schedule(ids, [2.0, 0.5, 0.0], seed=12, horizon=1000.0))
    times = [e.trace_time for e in a]
    assert times == sorted(times) and times[-1] < 1000.0
    counts = {f: sum(e.feed_id == f for e in a) for f in ids}
    # Poisson counts: mean 2000 (sd 45) and 500 (sd 22); 5 sd bounds.
    assert 1775 < counts["x"] < 2225
    assert 390 < counts["y"] < 610
    assert counts["z"] == 0
    mapped = list(poisson_schedule(ids, {"y": 1.0}, seed=1, horizon=50.0))
    assert {e.feed_id for e in mapped} == {"y"}
    with pytest.raises(ValueError, match="unknown feeds"):
        list(poisson_schedule(ids, {"w": 1.0}, seed=1))
    with pytest.raises(ValueError, match="2 poisson rates for 3 feeds"):
        list(poisson_schedule(ids, [1.0, 2.0], seed=1))


def test_csv_trace_with_iso_dates_skips_placeholders(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(
        "feed_id,timestamp_utc_iso\n"
        "f1,2026-02-01T00:10:00Z\n"
        "f2,2026-02-01T00:00:00Z\n"
        "f1,0001-01-01T00:00:00Z\n"
        "f2,not a date\n"
        "f2,2026-02-01T01:00:30+00:00\n"
        'f3,"Sun, 01 Feb 2026 02:00:00 +0100"\n'
    )
    trace = load_csv_trace(path)
    assert trace.skipped == 2
    assert trace.start == datetime(2026, 2, 1, tzinfo=UTC)
    assert trace.events == (
        TraceEvent(0.0, "f2"),
        TraceEvent(10.0, "f1"),
        TraceEvent(60.0, "f3"),  # RFC 822, as RSS dates entries: 01:00 UTC
        TraceEvent(60.5, "f2"),
    )
    assert trace.feed_ids == ("f2", "f1", "f3")
    later = load_csv_trace(path, start=datetime(2026, 2, 1, 0, 5, tzinfo=UTC))
    assert [e.trace_time for e in later.events] == [5.0, 55.0, 55.5]
    assert later.skipped == 3


def test_csv_trace_skips_placeholders_in_rss_form_and_far_future_dates(tmp_path: Path) -> None:
    """RSS's "Mon, 01 Jan 0001" is a placeholder, not 2001 (which would become the trace's start); 9999 is junk."""
    path = tmp_path / "trace.csv"
    path.write_text(
        "feed_id,published\n"
        'f1,"Mon, 01 Jan 0001 00:00:00 +0000"\n'
        'f1,"Sun, 01 Feb 2026 00:10:00 GMT"\n'
        "f2,9999-12-31T23:59:59Z\n"
        'f2,"Sun, 01 Feb 26 00:20:00 GMT"\n'  # a two-digit year is a year of this century
        "f3,2026-02-01 00:30:00 UTC\n"  # ISO with the zone's name, as BigQuery exports a TIMESTAMP
    )
    trace = load_csv_trace(path)
    assert trace.skipped == 2
    assert trace.start == datetime(2026, 2, 1, 0, 10, tzinfo=UTC)
    assert trace.events == (TraceEvent(0.0, "f1"), TraceEvent(10.0, "f2"), TraceEvent(20.0, "f3"))


def test_csv_trace_with_numeric_times_and_the_real_trace(tmp_path: Path) -> None:
    path = tmp_path / "numeric.csv"
    path.write_text("a,3\nb,1.5\n")
    assert load_csv_trace(path).events == (TraceEvent(1.5, "b"), TraceEvent(3.0, "a"))
    mixed = tmp_path / "mixed.csv"
    mixed.write_text("a,3\nb,2026-01-01T00:00:00Z\n")
    with pytest.raises(ValueError, match="mixes numeric timestamps and dates"):
        load_csv_trace(mixed)
    real = Path("/work/shared/traces/real_feeds_items.csv")
    if real.exists():
        trace = load_csv_trace(real, start=datetime(2025, 1, 1, tzinfo=UTC))
        assert len(trace.feed_ids) > 50
        assert trace.skipped > 0
        assert len(trace.events) + trace.skipped == 6548


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
async def test_publication_log_round_trips(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"log{suffix}"
    clock = ManualClock()
    async with FeedFarm(3, clock=clock, log_path=path, seconds_per_trace_unit=SPT) as farm:
        farm.publish("0", title='oil, "quoted"\nnewline')
        assert len(load_publications(path)) == 1  # readable while the farm runs
        clock.advance(SPT * 3)
        farm.publish("2")
        farm.publish("1", trace_time=7.25)
        expected = list(farm.publications)
    loaded = load_publications(path)
    assert loaded == expected
    assert [p.trace_time for p in loaded] == [0.0, 3.0, 7.25]
    assert all(isinstance(p, Publication) for p in loaded)


# ----------------------------------------------------------------------- pings


class Receiver:
    """A tiny aiohttp app that records the pings it receives."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, str], bytes]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        await self.release.wait()
        self.got.append((request.path, dict(request.headers), await request.read()))
        return web.Response(status=202)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", rec.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    rec.url = f"http://{host}:{port}"
    yield rec
    rec.release.set()
    await runner.cleanup()


async def run_pings(receiver: Receiver, seed: int, n: int = 200) -> tuple[list[str], list[str]]:
    async with FeedFarm(
        4,
        clock=ManualClock(),
        ping=receiver.url + "/hub/{feed_id}",
        ping_drop_rate=0.3,
        ping_seed=seed,
    ) as farm:
        ids = [farm.publish(str(k % 4)) for k in range(n)]
        await farm.drain_pings()
        dropped = [r.entry_id for r in farm.pings if r.outcome == "dropped"]
        sent = [r.entry_id for r in farm.pings if r.outcome == "sent"]
        assert sorted(dropped + sent) == sorted(ids)
        assert all(r.status == 202 for r in farm.pings if r.outcome == "sent")
    return dropped, sent


async def test_pings_are_delivered_or_dropped_deterministically(receiver: Receiver) -> None:
    dropped, sent = await run_pings(receiver, seed=7)
    # Binomial(200, 0.3): mean 60, sd 6.5.
    assert 30 < len(dropped) < 90
    import json

    bodies = [json.loads(body) for _, _, body in receiver.got]
    assert sorted(b["entry_id"] for b in bodies) == sorted(sent)
    path, headers, _ = receiver.got[0]
    feed_id = bodies[0]["feed_id"]
    assert path == f"/hub/{feed_id}"
    assert bodies[0]["feed_url"].endswith(f"/feeds/{feed_id}.xml")
    assert headers["Content-Type"] == "application/json"

    receiver.got.clear()
    again, _ = await run_pings(receiver, seed=7)
    assert again == dropped
    other, _ = await run_pings(receiver, seed=8)
    assert other != dropped


async def test_ping_resolver_sets_url_headers_and_body_and_publish_never_waits(
    receiver: Receiver,
) -> None:
    tokens = {"0": "secret-0", "1": "secret-1"}

    def resolve(pub: Publication, feed_url: str) -> PingRequest | None:
        if pub.feed_id == "1":
            return None
        return PingRequest(
            f"{receiver.url}/api/v1/feeds/{pub.feed_id}/ping",
            headers={"Authorization": f"Bearer {tokens[pub.feed_id]}"},
            body=b"{}",
        )

    receiver.release.clear()  # the receiver hangs until released
    async with FeedFarm(2, clock=ManualClock(), ping=resolve, ping_delay=(0.0, 0.01)) as farm:
        farm.publish("0")
        farm.publish("1")
        # publish returned although the receiver has answered nothing yet
        assert receiver.got == []
        assert [r.outcome for r in farm.pings] == ["skipped"]
        receiver.release.set()
        await farm.drain_pings()
        assert [(r.feed_id, r.outcome) for r in farm.pings] == [("1", "skipped"), ("0", "sent")]
        assert all(0.0 <= r.delay <= 0.01 for r in farm.pings)
    assert len(receiver.got) == 1
    path, headers, body = receiver.got[0]
    assert path == "/api/v1/feeds/0/ping"
    assert headers["Authorization"] == "Bearer secret-0"
    assert body == b"{}"


async def test_failed_pings_are_recorded_not_raised() -> None:
    async with FeedFarm(1, clock=ManualClock(), ping="http://127.0.0.1:9/nothing") as farm:
        farm.publish("0")
        await farm.drain_pings()
        [record] = farm.pings
    assert record.outcome == "failed"
    assert record.error is not None


def test_ping_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="ping_drop_rate"):
        FeedFarm(1, ping="http://127.0.0.1:1/", ping_drop_rate=1.5)
    with pytest.raises(ValueError, match="ping_delay"):
        FeedFarm(1, ping="http://127.0.0.1:1/", ping_delay=(2.0, 1.0))


async def test_pings_still_waiting_at_close_are_recorded_as_failed(receiver: Receiver) -> None:
    farm = FeedFarm(1, clock=ManualClock(), ping=receiver.url + "/hub", ping_delay=60.0)
    async with farm:
        farm.publish("0")
        assert farm.pings == []
    assert [(r.outcome, r.error) for r in farm.pings] == [("failed", "farm closed first")]
    assert receiver.got == []


async def test_per_feed_ping_targets_win_and_can_be_set_over_the_control_api(
    receiver: Receiver,
) -> None:
    async with FeedFarm(3, clock=ManualClock(), ping=receiver.url + "/hub/{feed_id}") as farm:
        farm.set_ping_target("0", f"{receiver.url}/api/v1/feeds/41/ping", {"X-Token": "t41"})
        async with httpx.AsyncClient(base_url=farm.base_url) as c:
            put = await c.put(
                "/_farm/feeds/1/ping",
                json={"url": f"{receiver.url}/api/v1/feeds/42/ping", "headers": {"X-Token": "t42"}},
            )
            assert put.status_code == 200
            assert (await c.put("/_farm/feeds/1/ping", json={"headers": {}})).status_code == 400
            assert (await c.put("/_farm/feeds/x/ping", json={"url": "u"})).status_code == 404
        for feed_id in ("0", "1", "2"):
            farm.publish(feed_id)
        await farm.drain_pings()
    got = sorted((path, headers.get("X-Token")) for path, headers, _ in receiver.got)
    assert got == [
        ("/api/v1/feeds/41/ping", "t41"),
        ("/api/v1/feeds/42/ping", "t42"),
        ("/hub/2", None),
    ]


async def test_no_ping_configured_means_no_ping_records() -> None:
    async with FeedFarm(1, clock=ManualClock()) as farm:
        farm.publish("0")
        await farm.drain_pings()
        assert farm.pings == []


async def test_a_share_of_pings_is_delayed(receiver: Receiver) -> None:
    async with FeedFarm(
        2,
        clock=ManualClock(),
        ping=receiver.url + "/hub/{feed_id}",
        ping_delay=0.01,
        ping_delay_rate=0.5,
        ping_seed=3,
    ) as farm:
        for k in range(100):
            farm.publish(str(k % 2))
        await farm.drain_pings()
        delays = [r.delay for r in farm.pings]
    assert set(delays) == {0.0, 0.01}
    assert 25 < delays.count(0.01) < 75  # Binomial(100, 0.5), sd 5
    assert len(receiver.got) == 100
