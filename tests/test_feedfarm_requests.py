"""The farm logs every request (issue 47): time, feed, status, validators, bytes, User-Agent, kind."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import httpx
import pytest

from proxy.farm import (
    FeedFarm,
    ManualClock,
    RequestKind,
    RequestRecord,
    load_requests,
    peak_concurrency,
)
from proxy.farm._requests import host_name


async def test_every_request_is_logged_and_only_feed_gets_count_as_feed(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    async with FeedFarm(feeds=2, prefill=2, clock=ManualClock(), request_log=log) as farm:
        async with httpx.AsyncClient(headers={"User-Agent": "probe/1"}) as client:
            first = await client.get(farm.url("0"), headers={"Accept-Encoding": "identity"})
            etag = first.headers["ETag"]
            again = await client.get(farm.url("0"), headers={"If-None-Match": etag})
            await client.head(farm.url("1"))
            await client.get(f"{farm.base_url}/favicon.ico")
            await client.get(f"{farm.base_url}/")
            await client.get(f"{farm.base_url}/feeds/9.xml")
        live = list(farm.request_log.records) if farm.request_log is not None else []
    saved = load_requests(log)
    assert saved == live
    assert [(r.kind, r.feed, r.status) for r in saved] == [
        (RequestKind.FEED, "0", 200), (RequestKind.FEED, "0", 304), (RequestKind.HEAD, "1", 200),
        (RequestKind.FAVICON, None, 404), (RequestKind.ROOT, None, 404), (RequestKind.FEED, "9", 404)]
    assert again.status_code == 304
    assert saved[0].bytes == len(first.content) and saved[1].bytes == 0 and saved[2].bytes == 0
    assert not saved[0].conditional and saved[1].if_none_match == etag and saved[1].conditional
    assert {r.user_agent for r in saved} == {"probe/1"}
    assert all(b.t_ms >= a.t_ms for a, b in itertools.pairwise(saved))
    # One client, one request at a time: each starts after the last ended, on the host it named.
    assert all(a.end_ms is not None and b.start_ms is not None and b.start_ms >= a.end_ms
               for a, b in itertools.pairwise(saved))
    assert {r.host for r in saved} == {"127.0.0.1"}
    assert peak_concurrency(saved) == {"127.0.0.1": 1}


async def test_no_request_log_unless_asked() -> None:
    async with FeedFarm(feeds=1, clock=ManualClock()) as farm:
        async with httpx.AsyncClient() as client:
            await client.get(farm.url("0"))
        assert farm.request_log is None


def _rec(start: float | None, end: float | None, host: str | None = "a") -> RequestRecord:
    return RequestRecord(round(end or 0), "GET", "/feeds/0.xml", RequestKind.FEED, "0", 200, None, None, 1, "t",
                         start_ms=start, end_ms=end, host=host)


@pytest.mark.parametrize(("spans", "peaks"), [
    ([], {}),
    ([(0, 5, "a")], {"a": 1}),
    ([(0, 5, "a"), (5, 9, "a")], {"a": 1}),  # one starts as the other ends: one after the other
    ([(0, 5, "a"), (4.999, 9, "a")], {"a": 2}),
    ([(0, 10, "a"), (1, 2, "a"), (3, 4, "a"), (3.5, 11, "a")], {"a": 3}),
    ([(0, 5, "a"), (1, 6, "b"), (2, 7, "b")], {"a": 1, "b": 2}),  # per host
    ([(0, 5, None), (1, 6, None)], {"": 2}),
    ([(None, 5, "a"), (1, 6, "a")], {"a": 1}),  # a record without a start is left out
    ([(3, 3, "a")], {"a": 1}),  # of no length: in progress at its instant
    ([(3, 3, "a"), (3, 3, "a"), (1, 3, "a"), (3, 4, "a")], {"a": 3}),
])
def test_peak_concurrency_per_host(spans: list[tuple[float | None, float, str | None]],
                                   peaks: dict[str, int]) -> None:
    assert peak_concurrency([_rec(s, e, h) for s, e, h in spans]) == peaks


@pytest.mark.parametrize(("header", "host"), [
    (None, None), ("127.0.0.1:8001", "127.0.0.1"), ("Feeds.Example.ORG", "feeds.example.org"),
    ("[::1]:80", "[::1]")])
def test_host_name(header: str | None, host: str | None) -> None:
    assert host_name(header) == host


async def _exchange(reader: asyncio.StreamReader) -> None:
    """Read one whole response (the farm sends Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
    await reader.readexactly(length)


async def test_requests_sent_together_are_logged_as_concurrent(tmp_path: Path) -> None:
    """Three connections: one request on each in turn (each answered before the next is sent),
    then one on each at once, all written before the farm reads any.  The log sees the first
    three one after the other and the last three in progress together: a peak of 3 on the host."""
    async with FeedFarm(feeds=3, prefill=1, clock=ManualClock(), request_log=True) as farm:
        port = int(farm.base_url.rsplit(":", 1)[1])
        conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]

        def send(i: int) -> None:
            conns[i][1].write(f"GET /feeds/{i}.xml HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())

        for i, (reader, _) in enumerate(conns):
            send(i)
            await _exchange(reader)
        for i in range(3):
            send(i)  # no await in between: all three are on the wire before the farm reads
        for reader, _ in conns:
            await _exchange(reader)
        for _, writer in conns:
            writer.close()
        records = list(farm.request_log.records) if farm.request_log is not None else []
    assert [r.feed for r in records] == ["0", "1", "2"] * 2
    assert {r.host for r in records} == {"127.0.0.1"}
    assert all(r.start_ms is not None and r.end_ms is not None and r.start_ms <= r.end_ms for r in records)
    assert peak_concurrency(records[:3]) == {"127.0.0.1": 1}
    assert peak_concurrency(records[3:]) == {"127.0.0.1": 3}
    assert peak_concurrency(records) == {"127.0.0.1": 3}
