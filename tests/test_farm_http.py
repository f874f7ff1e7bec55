"""The feed farm's own HTTP/1.1 server, spoken to over raw sockets (what clients hide)."""

from __future__ import annotations

import asyncio
import gzip

import pytest

from proxy.farm import FeedFarm, ManualClock


async def exchange(farm: FeedFarm, raw: bytes) -> bytes:
    """Send ``raw`` and read until the farm closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", farm.port)
    writer.write(raw)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


def responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Split a stream of Content-Length-framed responses."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        n = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:n]))
        data = rest[n:]
    return out


@pytest.fixture
async def farm():
    async with FeedFarm(3, prefill=2, clock=ManualClock()) as f:
        yield f


async def test_pipelined_requests_are_answered_in_order_on_one_connection(farm: FeedFarm) -> None:
    raw = (
        b"GET /feeds/0.xml HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /feeds/nope.xml HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /feeds/2.xml HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
    )
    [(s0, h0, b0), (s1, _, b1), (s2, h2, b2)] = responses(await exchange(farm, raw))
    assert (s0, s1, s2) == (200, 404, 200)
    assert b"<title>" in b0 and b1 == b"no such feed\n"
    assert h2["content-encoding"] == "gzip" and h2["connection"] == "close"
    assert b"urn:feedfarm:2:" in gzip.decompress(b2)
    assert h0["etag"] != h2["etag"]
    assert farm.stats("0").requests == 1 and farm.stats("2").by_status == {200: 1}


async def test_a_conditional_request_with_the_etag_gets_an_empty_304(farm: FeedFarm) -> None:
    [(_, h, _)] = responses(await exchange(farm, b"GET /feeds/1.xml HTTP/1.1\r\nConnection: close\r\n\r\n"))
    raw = f"GET /feeds/1.xml HTTP/1.1\r\nIf-None-Match: {h['etag']}\r\nConnection: close\r\n\r\n"
    data = await exchange(farm, raw.encode())
    assert data.startswith(b"HTTP/1.1 304 Not Modified\r\n")
    assert b"content-length" not in data.lower() and data.endswith(b"\r\n\r\n")
    assert farm.stats("1").not_modified == 1 and farm.stats("1").conditional == 1


async def test_head_sends_the_headers_of_get_without_the_body(farm: FeedFarm) -> None:
    data = await exchange(farm, b"HEAD /feeds/0.xml HTTP/1.1\r\nConnection: close\r\n\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and body == b""
    get = responses(await exchange(farm, b"GET /feeds/0.xml HTTP/1.1\r\nConnection: close\r\n\r\n"))
    assert f"Content-Length: {len(get[0][2])}".encode() in head


@pytest.mark.parametrize(
    ("raw", "status", "text"),
    [
        (b"POST /feeds/0.xml HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 405,
         b"method not allowed"),
        (b"GET /nowhere HTTP/1.1\r\nConnection: close\r\n\r\n", 404, b"not found"),
        (b"GARBAGE\r\n\r\n", 400, b"malformed request"),
        (b"GET /feeds/0.xml HTTP/1.1\r\nNoColonHere\r\n\r\n", 400, b"malformed request"),
        (b"POST /_farm/feeds/0/publish HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411,
         b"chunked request bodies are not supported"),
        (b"POST /_farm/feeds/0/publish HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400, b"Content-Length"),
        (b"GET /_farm/health HTTP/1.1\r\nX: " + b"a" * 70_000, 431, b"request head too large"),
    ],
)
async def test_bad_requests_get_a_status_that_names_the_problem(
    farm: FeedFarm, raw: bytes, status: int, text: bytes
) -> None:
    data = await exchange(farm, raw)
    assert data.startswith(f"HTTP/1.1 {status} ".encode()), data[:80]
    assert text in data


async def test_a_request_body_may_arrive_in_pieces(farm: FeedFarm) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", farm.port)
    body = b'{"title": "split body"}'
    writer.write(b"POST /_farm/feeds/1/publish HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)
                 + body[:5])
    await writer.drain()
    await asyncio.sleep(0.05)
    assert farm.publications == []
    writer.write(body[5:])
    await writer.drain()
    data = await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    assert data.startswith(b"HTTP/1.1 200 OK")
    [pub] = farm.publications
    assert pub.feed_id == "1" and farm.entries("1")[0].title == "split body"


async def test_a_client_that_goes_away_mid_stream_does_not_disturb_the_farm(farm: FeedFarm) -> None:
    farm.set_fault("0", "huge", size=50_000_000)
    reader, writer = await asyncio.open_connection("127.0.0.1", farm.port)
    writer.write(b"GET /feeds/0.xml HTTP/1.1\r\n\r\n")
    await writer.drain()
    assert (await reader.readexactly(100)).startswith(b"HTTP/1.1 200 OK")
    writer.close()
    await asyncio.sleep(0.05)
    [(status, _, body)] = responses(await exchange(farm, b"GET /feeds/1.xml HTTP/1.1\r\nConnection: close\r\n\r\n"))
    assert status == 200 and b"<rss" in body


async def test_also_hosts_serve_every_feed_on_the_same_port() -> None:
    async with FeedFarm(2, prefill=1, clock=ManualClock(), also_hosts=("127.0.0.2", "127.0.0.3")) as farm:
        for host in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
            reader, writer = await asyncio.open_connection(host, farm.port)
            writer.write(b"GET /feeds/1.xml HTTP/1.1\r\nConnection: close\r\n\r\n")
            [(status, _, body)] = responses(await asyncio.wait_for(reader.read(), 5))
            writer.close()
            assert status == 200 and b"urn:feedfarm:1:" in body
        assert farm.stats("1").requests == 3


async def test_an_ipv6_farm_names_itself_with_brackets() -> None:
    async with FeedFarm(1, prefill=1, clock=ManualClock(), host="::1") as farm:
        assert farm.base_url == f"http://[::1]:{farm.port}"
        reader, writer = await asyncio.open_connection("::1", farm.port)
        writer.write(b"GET /feeds/0.xml HTTP/1.1\r\nConnection: close\r\n\r\n")
        [(status, _, body)] = responses(await asyncio.wait_for(reader.read(), 5))
        writer.close()
        assert status == 200 and f"http://[::1]:{farm.port}/".encode() in body
