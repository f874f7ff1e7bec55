"""The feed farm as a WebSub publisher (issue 44): hub and self advertised, publish POSTed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import parse_qs

import feedparser
import httpx
import pytest
from aiohttp import web

from proxy.farm import FeedFarm, ManualClock
from proxy.feeds.websub import PushLinks, discover


@pytest.fixture
async def hub() -> AsyncIterator[tuple[str, list[dict[str, list[str]]]]]:
    """A stand-in hub that records the publish requests it receives."""
    received: list[dict[str, list[str]]] = []

    async def endpoint(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-www-form-urlencoded"
        received.append(parse_qs((await request.read()).decode()))
        return web.Response(status=202)

    app = web.Application()
    app.router.add_post("/hub", endpoint)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/hub", received
    await runner.cleanup()


async def test_push_feeds_advertise_the_hub_and_publish_to_it(
    hub: tuple[str, list[dict[str, list[str]]]],
) -> None:
    hub_url, received = hub
    async with FeedFarm(2, prefill=1, clock=ManualClock(), formats="mixed", hub=hub_url) as farm, \
            httpx.AsyncClient() as client:
        for feed_id in ("0", "1"):
            resp = await client.get(farm.url(feed_id))
            assert 'rel="hub"' in resp.headers["link"]
            expected = PushLinks(hub_url, farm.url(feed_id))
            assert discover(resp.content, resp.headers["link"], farm.url(feed_id)) == expected
            # The document alone names them too (a hub-less proxy in front would drop headers).
            assert discover(resp.content, None, farm.url(feed_id)) == expected
            assert not feedparser.parse(resp.content).bozo
        farm.publish("1", title="pushed")
        await farm.drain_hub()
        assert [r.outcome for r in farm.hub_publishes] == ["sent"]
        assert received == [{"hub.mode": ["publish"], "hub.url": [farm.url("1")],
                             "hub.topic": [farm.url("1")]}]


async def test_push_share_is_a_seeded_fraction_and_the_rest_stay_pull_only(
    hub: tuple[str, list[dict[str, list[str]]]],
) -> None:
    hub_url, received = hub
    kwargs = {"clock": ManualClock(), "hub": hub_url, "push_share": 0.3, "push_seed": 7}
    async with FeedFarm(40, **kwargs) as farm, httpx.AsyncClient() as client:  # type: ignore[arg-type]
        again = FeedFarm(40, **kwargs)  # type: ignore[arg-type]
        assert farm.push_feeds == again.push_feeds
        assert 0 < len(farm.push_feeds) < 40
        pull = next(f for f in farm.feed_ids if not farm.pushes(f))
        resp = await client.get(farm.url(pull))
        assert "link" not in resp.headers
        assert discover(resp.content, None, farm.url(pull)) is None
        farm.publish(pull)
        farm.publish(farm.push_feeds[0])
        await farm.drain_hub()
        assert [q["hub.url"] for q in received] == [[farm.url(farm.push_feeds[0])]]


def test_without_a_hub_nothing_pushes() -> None:
    assert FeedFarm(5).push_feeds == []
    with pytest.raises(ValueError, match="push_share"):
        FeedFarm(5, hub="http://h/", push_share=1.5)


def test_the_cli_serves_a_seeded_share_of_push_feeds() -> None:
    """``proxy farm serve --hub URL --push-share F --push-seed N`` as a subprocess."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from proxy.farm import FarmProcess
    from tests.proc_support import poll_until

    received: list[dict[str, list[str]]] = []

    class Hub(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            received.append(parse_qs(self.rfile.read(length).decode()))
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hub_url = f"http://127.0.0.1:{server.server_address[1]}/hub"
    expected = FeedFarm(10, hub=hub_url, push_share=0.5, push_seed=3).push_feeds
    assert 0 < len(expected) < 10
    try:
        args = ["--feeds", "10", "--hub", hub_url, "--push-share", "0.5", "--push-seed", "3"]
        with FarmProcess(args) as farm, httpx.Client(base_url=farm.url, timeout=10.0) as c:
            pushing = [f for f in map(str, range(10)) if "link" in c.get(f"/feeds/{f}.xml").headers]
            assert pushing == expected
            pull = next(f for f in map(str, range(10)) if f not in expected)
            c.post(f"/_farm/feeds/{pull}/publish", json={})
            c.post(f"/_farm/feeds/{expected[0]}/publish", json={})
            poll_until(lambda: len(received) >= 1, within=30)
            assert farm.stop() == 0
        assert [q["hub.url"] for q in received] == [[f"{farm.url}/feeds/{expected[0]}.xml"]]
        assert farm.summary is not None and farm.summary["hub_publishes"] == {"sent": 1}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
