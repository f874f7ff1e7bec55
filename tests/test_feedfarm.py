"""The feed farm serves correct, conditional, cached feeds and every fault mode."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import defusedxml.ElementTree as DET
import feedparser
import httpx
import pytest

from proxy.farm import (
    DEFAULT_EPOCH,
    FeedFarm,
    FeedFormat,
    FeedNotFoundError,
    ManualClock,
)

ATOM = "{http://www.w3.org/2005/Atom}"


@pytest.fixture
async def farm() -> AsyncIterator[FeedFarm]:
    async with FeedFarm(feeds=10, window=5, prefill=3, clock=ManualClock(), formats="mixed") as f:
        yield f


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0)) as c:
        yield c


def rss_guids(body: bytes) -> list[str]:
    return [g.text or "" for g in ET.fromstring(body).iter("guid")]


def atom_ids(body: bytes) -> list[str]:
    root = ET.fromstring(body)
    return [e.findtext(f"{ATOM}id") or "" for e in root.iter(f"{ATOM}entry")]


async def test_rss_and_atom_documents_are_valid_feeds_with_the_prefilled_entries(
    farm: FeedFarm, client: httpx.AsyncClient
) -> None:
    assert farm.format_of("0") is FeedFormat.RSS and farm.format_of("1") is FeedFormat.ATOM
    assert farm.url("0").endswith("/feeds/0.xml") and farm.url("1").endswith("/feeds/1.atom")
    rss = await client.get(farm.url("0"))
    atom = await client.get(farm.url("0", "atom"))
    assert rss.headers["content-type"].startswith("application/rss+xml")
    assert atom.headers["content-type"].startswith("application/atom+xml")
    expected = ["urn:feedfarm:0:3", "urn:feedfarm:0:2", "urn:feedfarm:0:1"]
    assert rss_guids(rss.content) == expected
    assert atom_ids(atom.content) == expected
    for resp, version in ((rss, "rss20"), (atom, "atom10")):
        parsed = feedparser.parse(resp.content)
        assert not parsed.bozo, parsed.get("bozo_exception")
        assert parsed.version == version
        assert [e.id for e in parsed.entries] == expected
        assert parsed.entries[0].link == f"{farm.base_url}/entries/0/3"
    # prefilled entries are dated one trace unit apart, just before the epoch
    newest = feedparser.parse(rss.content).entries[0]
    y, mo, d, h, mi, s = newest.published_parsed[:6]
    assert datetime(y, mo, d, h, mi, s, tzinfo=UTC) == DEFAULT_EPOCH - timedelta(minutes=1)
    assert farm.publications == []  # prefill is not a publication


async def test_backfill_shows_a_dated_history_that_is_not_a_publication(client: httpx.AsyncClient) -> None:
    """A real feed's first fetch shows its last N entries, dated: the farm can start feeds that way."""
    async with FeedFarm(feeds=2, window=3, clock=ManualClock()) as farm:
        days = [datetime(2026, 3, d, 9, 30, tzinfo=UTC) for d in (4, 1, 3, 2)]
        assert farm.backfill("0", days) == 4
        parsed = feedparser.parse((await client.get(farm.url("0"))).content)
        shown = [datetime(*e.published_parsed[:6], tzinfo=UTC) for e in parsed.entries]
        assert shown == sorted(days, reverse=True)[:3]  # newest first, the window keeps the last 3
        assert feedparser.parse((await client.get(farm.url("1"))).content).entries == []
        assert farm.publications == []
        with pytest.raises(ValueError, match="timezone-aware"):
            farm.backfill("1", [datetime(2026, 3, 1)])  # a naive date: refused
        assert farm.entries("1") == []  # nothing added from a refused call


async def test_publish_is_visible_on_next_get_and_the_window_keeps_the_last_n(
    farm: FeedFarm, client: httpx.AsyncClient
) -> None:
    ids = [farm.publish("4", title=f"Oil report {k}", summary="crude oil up") for k in range(4)]
    assert ids == [f"urn:feedfarm:4:{seq}" for seq in range(4, 8)]
    body = (await client.get(farm.url("4"))).content
    assert rss_guids(body) == [f"urn:feedfarm:4:{seq}" for seq in (7, 6, 5, 4, 3)]
    titles = [t.text for t in ET.fromstring(body).iter("title")]
    assert titles[1] == "Oil report 3"
    assert [p.entry_id for p in farm.publications] == ids
    assert [e.seq for e in farm.entries("4")] == [7, 6, 5, 4, 3]


async def test_etag_and_last_modified_give_304_until_the_feed_changes(
    farm: FeedFarm, client: httpx.AsyncClient
) -> None:
    first = await client.get(farm.url("2"), headers={"Accept-Encoding": "identity"})
    etag, last_modified = first.headers["etag"], first.headers["last-modified"]
    by_etag = await client.get(farm.url("2"), headers={"If-None-Match": etag})
    by_date = await client.get(farm.url("2"), headers={"If-Modified-Since": last_modified})
    assert (by_etag.status_code, by_date.status_code) == (304, 304)
    assert by_etag.content == b""
    # a stale etag wins over a fresh date (RFC 9110 §13.1.3)
    both = await client.get(
        farm.url("2"), headers={"If-None-Match": '"stale"', "If-Modified-Since": last_modified}
    )
    assert both.status_code == 200
    older = http_date_minus(last_modified, seconds=1)
    assert (
        await client.get(farm.url("2"), headers={"If-Modified-Since": older})
    ).status_code == 200

    farm.publish("2")
    after = await client.get(farm.url("2"), headers={"If-None-Match": etag})
    assert after.status_code == 200
    assert after.headers["etag"] != etag
    assert parsedate_to_datetime(after.headers["last-modified"]) > parsedate_to_datetime(
        last_modified
    )
    again = await client.get(farm.url("2"), headers={"If-Modified-Since": last_modified})
    assert again.status_code == 200

    stats = farm.stats("2")
    assert stats.requests == 7
    assert stats.by_status == {200: 5, 304: 2}
    assert stats.not_modified == 2
    assert stats.conditional == 6
    assert farm.stats().requests == 7


async def test_same_second_publications_still_change_last_modified(farm: FeedFarm) -> None:
    # The manual clock does not move: two versions must not share a Last-Modified.
    async with httpx.AsyncClient() as c:
        lm1 = (await c.get(farm.url("3"))).headers["last-modified"]
        farm.publish("3")
        lm2 = (await c.get(farm.url("3"))).headers["last-modified"]
        farm.publish("3")
        lm3 = (await c.get(farm.url("3"))).headers["last-modified"]
    assert len({lm1, lm2, lm3}) == 3


def http_date_minus(value: str, seconds: int) -> str:
    from email.utils import format_datetime

    return format_datetime(parsedate_to_datetime(value) - timedelta(seconds=seconds), usegmt=True)


async def test_gzip_is_sent_when_accepted_and_either_encodings_etag_matches(
    farm: FeedFarm, client: httpx.AsyncClient
) -> None:
    plain = await client.get(farm.url("0"), headers={"Accept-Encoding": "identity"})
    gz = await client.get(farm.url("0"), headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in plain.headers
    assert gz.headers["content-encoding"] == "gzip"
    assert int(gz.headers["content-length"]) < len(plain.content)
    assert gz.content == plain.content  # httpx decodes gzip
    assert gz.headers["etag"] != plain.headers["etag"]
    cross = await client.get(
        farm.url("0"), headers={"Accept-Encoding": "identity", "If-None-Match": gz.headers["etag"]}
    )
    assert cross.status_code == 304


async def test_unknown_feeds_and_suffixes_are_404_and_api_errors_name_the_feed(
    farm: FeedFarm, client: httpx.AsyncClient
) -> None:
    assert (await client.get(f"{farm.base_url}/feeds/nope.xml")).status_code == 404
    assert (await client.get(f"{farm.base_url}/feeds/0.json")).status_code == 404
    with pytest.raises(FeedNotFoundError, match="'nope'"):
        farm.publish("nope")
    with pytest.raises(ValueError, match="unknown fault mode 'melt'"):
        farm.set_fault("0", "melt")
    with pytest.raises(ValueError, match="takes no parameter"):
        farm.set_fault("0", "gone", retry_after=3)
    with pytest.raises(ValueError, match="exactly one of to="):
        farm.set_fault("0", "redirect")
    with pytest.raises(FeedNotFoundError):
        farm.set_fault("0", "redirect", to="nope")


@pytest.mark.parametrize(
    ("mode", "params", "status"),
    [
        ("error500", {}, 500),
        ("error500", {"status": 502}, 502),
        ("gone", {}, 410),
        ("rate_limited", {"retry_after": 30}, 429),
        ("unavailable", {}, 503),
    ],
)
async def test_status_faults(
    farm: FeedFarm, client: httpx.AsyncClient, mode: str, params: dict[str, int], status: int
) -> None:
    farm.set_fault("5", mode, **params)
    resp = await client.get(farm.url("5"))
    assert resp.status_code == status
    if mode == "rate_limited":
        assert resp.headers["retry-after"] == "30"
    if mode == "unavailable":
        assert resp.headers["retry-after"] == "120"
    assert farm.stats("5").by_status == {status: 1}
    farm.clear_fault("5")
    assert (await client.get(farm.url("5"))).status_code == 200


async def test_retry_after_as_http_date(farm: FeedFarm, client: httpx.AsyncClient) -> None:
    farm.set_fault("5", "rate_limited", retry_after=600, http_date=True)
    resp = await client.get(farm.url("5"))
    when = parsedate_to_datetime(resp.headers["retry-after"])
    ahead = (when - datetime.now(UTC)).total_seconds()
    assert 500 < ahead <= 601


async def test_fault_for_a_number_of_requests_then_recovers(
    farm: FeedFarm, client: httpx.AsyncClient
) -> None:
    farm.set_fault("6", "error500", times=2)
    codes = [(await client.get(farm.url("6"))).status_code for _ in range(3)]
    assert codes == [500, 500, 200]
    assert farm.fault_of("6") is None


async def test_html_malformed_and_xml_bomb(farm: FeedFarm, client: httpx.AsyncClient) -> None:
    farm.set_fault("0", "html")
    html = await client.get(farm.url("0"))
    assert html.status_code == 200
    assert html.headers["content-type"].startswith("text/html")
    assert html.text.startswith("<!DOCTYPE html>")

    farm.set_fault("0", "malformed")
    broken = await client.get(farm.url("0"))
    assert broken.headers["content-type"].startswith("application/rss+xml")
    with pytest.raises(ET.ParseError):
        ET.fromstring(broken.content)

    farm.set_fault("0", "xml_bomb")
    bomb = await client.get(farm.url("0"))
    assert len(bomb.content) < 2000
    assert b"<!ENTITY lol9" in bomb.content
    with pytest.raises(DET.EntitiesForbidden):
        DET.fromstring(bomb.content)


async def test_redirects(farm: FeedFarm, client: httpx.AsyncClient) -> None:
    farm.set_fault("2", "redirect", to="4", status=301)
    moved = await client.get(farm.url("2"))
    assert moved.status_code == 301
    assert moved.headers["location"] == farm.url("4")
    followed = await client.get(farm.url("2"), follow_redirects=True)
    assert rss_guids(followed.content)[0] == "urn:feedfarm:4:3"
    assert [r.status_code for r in followed.history] == [301]

    farm.set_fault("2", "redirect", location="/feeds/6.xml", status=308)
    assert (await client.get(farm.url("2"))).headers["location"] == farm.url("6")

    farm.set_fault("2", "redirect_loop")
    with pytest.raises(httpx.TooManyRedirects):
        await client.get(farm.url("2"), follow_redirects=True)
    hops = farm.stats("2").by_status[302]
    assert hops > 3


async def test_timeout_fault_never_answers_and_shutdown_is_not_held_up() -> None:
    clock = ManualClock()
    farm = FeedFarm(feeds=2, clock=clock)
    async with farm:
        farm.set_fault("1", "timeout")
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=0.3)) as c:
            with pytest.raises(httpx.ReadTimeout):
                await c.get(farm.url("1"))
        assert farm.stats("1").by_status == {}
    assert farm.stats("1").by_status == {0: 1}  # ended by shutdown, never answered


async def test_slow_drip_sends_the_real_document_in_small_delayed_chunks(
    farm: FeedFarm, client: httpx.AsyncClient
) -> None:
    reference = (await client.get(farm.url("0"), headers={"Accept-Encoding": "identity"})).content
    farm.set_fault("0", "slow_drip", chunk_size=len(reference) // 4 + 1, delay=0.05)
    chunks = []
    async with client.stream("GET", farm.url("0")) as resp:
        assert int(resp.headers["content-length"]) == len(reference)
        chunks = [c async for c in resp.aiter_raw()]
    assert b"".join(chunks) == reference
    # four writes 50 ms apart; a starved client loop may read two at once
    assert 2 <= len(chunks) <= 4


async def test_slow_drip_trips_a_read_timeout(farm: FeedFarm) -> None:
    farm.set_fault("0", "slow_drip", chunk_size=10, delay=5.0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=0.2)) as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.get(farm.url("0"))


async def test_huge_body_is_streamed_with_the_declared_size(
    farm: FeedFarm, client: httpx.AsyncClient
) -> None:
    size = 3_000_000
    farm.set_fault("0", "huge", size=size)
    resp = await client.get(farm.url("0"))
    assert int(resp.headers["content-length"]) == size
    assert len(resp.content) == size
    assert resp.content.startswith(b"<?xml") and resp.content.endswith(b"</rss>\n")

    # without Content-Length, a client must cut the stream itself
    farm.set_fault("0", "huge", size=50_000_000, content_length=False)
    read = 0
    async with client.stream("GET", farm.url("0")) as stream:
        assert "content-length" not in stream.headers
        async for chunk in stream.aiter_raw():
            read += len(chunk)
            if read > 1_000_000:
                break
    assert read > 1_000_000
    assert farm.stats("0").by_status == {200: 2}


async def test_reset_stats(farm: FeedFarm, client: httpx.AsyncClient) -> None:
    await client.get(farm.url("0"))
    farm.reset_stats()
    assert farm.stats().requests == 0
    assert farm.stats().by_status == {}


async def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="feed ids"):
        FeedFarm(["ok", "has space"])
    with pytest.raises(ValueError, match="unique"):
        FeedFarm(["a", "a"])
    with pytest.raises(ValueError, match="formats"):
        FeedFarm(3, formats="json")
    with pytest.raises(ValueError, match="window"):
        FeedFarm(3, window=0)
    farm = FeedFarm(3)
    with pytest.raises(RuntimeError, match="not running"):
        farm.url("0")


async def test_random_walk_304_exactly_when_nothing_was_published_since(
    client: httpx.AsyncClient,
) -> None:
    """A seeded walk of publishes and conditional GETs on three feeds and both formats."""
    import random

    rng = random.Random(2024)
    async with FeedFarm(["a", "b", "c"], window=3, clock=ManualClock()) as farm:
        seen: dict[tuple[str, str], tuple[str, str, int]] = {}  # -> etag, last-modified, seq
        for _ in range(150):
            feed, fmt = rng.choice("abc"), rng.choice(["rss", "atom"])
            if rng.random() < 0.3:
                farm.publish(feed)
                continue
            key = (feed, fmt)
            headers = {"Accept-Encoding": rng.choice(["gzip", "identity"])}
            validator = rng.choice(["etag", "date"])
            if key in seen:
                etag, lm, _ = seen[key]
                headers["If-None-Match" if validator == "etag" else "If-Modified-Since"] = (
                    etag if validator == "etag" else lm
                )
            resp = await client.get(farm.url(feed, fmt), headers=headers)
            newest = farm.entries(feed)[0].seq if farm.entries(feed) else 0
            unchanged = key in seen and seen[key][2] == newest
            assert resp.status_code == (304 if unchanged else 200), (key, validator)
            if resp.status_code == 200:
                seen[key] = (resp.headers["etag"], resp.headers["last-modified"], newest)


async def test_per_feed_formats() -> None:
    farm = FeedFarm(["a", "b"], formats={"b": "atom"})
    assert (farm.format_of("a"), farm.format_of("b")) == (FeedFormat.RSS, FeedFormat.ATOM)
    with pytest.raises(ValueError, match="feed 'a': format must be 'rss' or 'atom', got 'json'"):
        FeedFarm(["a"], formats={"a": "json"})


async def test_edit_and_reverse_make_new_versions_without_new_entries(
    farm: FeedFarm, client: httpx.AsyncClient
) -> None:
    first = farm.publish("4", title="Oil report", summary="crude oil up")
    before = await client.get(farm.url("4"))
    etag = before.headers["etag"]
    later = datetime(2030, 1, 1, tzinfo=UTC)
    farm.edit("4", first, title="Oil report (corrected)", published=later)
    edited = await client.get(farm.url("4"), headers={"If-None-Match": etag})
    assert edited.status_code == 200  # a new version, not a 304
    assert rss_guids(edited.content) == rss_guids(before.content)  # same ids, same order
    titles = [t.text for t in ET.fromstring(edited.content).iter("title")]
    assert titles[1] == "Oil report (corrected)"
    assert farm.entries("4")[0].published == later
    assert [p.entry_id for p in farm.publications] == [first]  # an edit is no publication
    farm.reverse("4")
    reversed_body = (await client.get(farm.url("4"))).content
    assert rss_guids(reversed_body) == list(reversed(rss_guids(before.content)))
    with pytest.raises(KeyError):
        farm.edit("4", "urn:feedfarm:4:999", title="x")
