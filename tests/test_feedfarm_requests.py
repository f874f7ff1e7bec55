"""The farm logs every request (issue 47): time, feed, status, validators, bytes, User-Agent, kind."""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx

from proxy.farm import FeedFarm, ManualClock, RequestKind, load_requests


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


async def test_no_request_log_unless_asked() -> None:
    async with FeedFarm(feeds=1, clock=ManualClock()) as farm:
        async with httpx.AsyncClient() as client:
            await client.get(farm.url("0"))
        assert farm.request_log is None
