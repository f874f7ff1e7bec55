"""Publisher hints: ``<ttl>`` and the syndication module's schedule, read from documents (issue 45, item 3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from proxy.feeds.hints import PublisherHints, publisher_hints
from proxy.feeds.parse import parse_document

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
SY = 'xmlns:sy="http://purl.org/rss/1.0/modules/syndication/"'


def _rss(channel: str, ns: str = SY) -> bytes:
    """An RSS 2.0 document as WordPress writes one: the syndication module in the channel, one item."""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><rss version="2.0" {ns}><channel><title>Blog</title>'
        f"<link>http://blog.test/</link>{channel}<item><title>Post</title><link>http://blog.test/p/1</link>"
        "<guid>http://blog.test/p/1</guid><pubDate>Mon, 01 Jun 2026 10:00:00 GMT</pubDate></item>"
        "</channel></rss>"
    ).encode()


@pytest.mark.parametrize(("channel", "ns", "expected"), [
    # WordPress's default: hourly, once.
    ("<sy:updatePeriod>\n\thourly\t</sy:updatePeriod><sy:updateFrequency>\n\t1\t</sy:updateFrequency>", SY,
     PublisherHints(None, 3600.0, None)),
    ("<sy:updatePeriod>daily</sy:updatePeriod><sy:updateFrequency>4</sy:updateFrequency>", SY,
     PublisherHints(None, 21_600.0, None)),
    # The module's defaults: daily when the period is absent, once when the frequency is.
    ("<sy:updateFrequency>2</sy:updateFrequency>", SY, PublisherHints(None, 43_200.0, None)),
    ("<sy:updatePeriod>weekly</sy:updatePeriod>", SY, PublisherHints(None, 604_800.0, None)),
    # Any prefix bound to the module, and a phase.
    ("<syn:updatePeriod>Hourly</syn:updatePeriod><syn:updateFrequency>2</syn:updateFrequency>"
     "<syn:updateBase>2000-01-01T12:00+00:00</syn:updateBase>",
     'xmlns:syn="http://purl.org/rss/1.0/modules/syndication/"',
     PublisherHints(None, 1800.0, datetime(2000, 1, 1, 12, tzinfo=UTC))),
    # Unusable schedules are dropped, the ttl kept.
    ("<ttl>30</ttl><sy:updatePeriod>fortnightly</sy:updatePeriod>", SY, PublisherHints(30, None, None)),
    ("<ttl>30</ttl><sy:updatePeriod>daily</sy:updatePeriod><sy:updateFrequency>0</sy:updateFrequency>", SY,
     PublisherHints(30, None, None)),
    ("<sy:updateBase>not a date</sy:updateBase>", SY, None),
    # Without the module's namespace, elements of that name are someone else's.
    ("<sy:updatePeriod>hourly</sy:updatePeriod>", "", None),
    ("", SY, None),
])
def test_publisher_hints_table(channel: str, ns: str, expected: PublisherHints | None) -> None:
    assert publisher_hints(_rss(channel, ns)) == expected


def test_the_interval_is_the_schedule_else_the_ttl() -> None:
    assert PublisherHints(30, 3600.0, None).interval() == 3600.0
    assert PublisherHints(30, None, None).interval() == 1800.0
    assert PublisherHints(0, None, None).interval() is None
    assert PublisherHints(None, None, datetime(2026, 1, 1, tzinfo=UTC)).interval() is None


@pytest.mark.parametrize(("path", "ttl"), [
    ("feedparser/tests/wellformed/rss/channel_ttl.xml", 60),
    ("reader/tests/data/full.rss", 1800),
])
def test_corpus_documents_that_carry_a_ttl(path: str, ttl: int) -> None:
    """The corpus's real documents with a ``<ttl>`` (it holds none with the syndication module)."""
    body = (CORPUS / path).read_bytes()
    assert publisher_hints(body) == PublisherHints(ttl, None, None)
    assert parse_document(body, url="http://feeds.test/f.xml").hints == PublisherHints(ttl, None, None)


def test_corpus_documents_without_hints_have_none() -> None:
    """No false hint from the corpus's other well-formed RSS documents (namespaces, tricky elements)."""
    folder = CORPUS / "feedparser" / "tests" / "wellformed" / "rss"
    bodies = {p.name: p.read_bytes() for p in sorted(folder.glob("*.xml"))}
    assert len(bodies) > 100
    hinted = {name for name, body in bodies.items() if publisher_hints(body) is not None}
    assert hinted == {"channel_ttl.xml"}


@pytest.mark.parametrize("fast", [True, False])
def test_both_parsers_carry_the_hints(fast: bool) -> None:
    body = _rss("<ttl>15</ttl><sy:updatePeriod>hourly</sy:updatePeriod><sy:updateFrequency>6</sy:updateFrequency>")
    parsed = parse_document(body, url="http://blog.test/feed", fast=fast)
    assert parsed.parser == ("fast" if fast else "feedparser")
    assert parsed.hints == PublisherHints(15, 600.0, None)
    assert [e.title for e in parsed.entries] == ["Post"]


async def test_a_probe_reports_the_stated_interval() -> None:
    """The fetcher's ``Ok`` carries the document's interval; the ``<ttl>`` still delays the next probe."""
    from proxy.feeds import FeedState, Fetcher, MemoryKnownEntries, Ok
    from tests.test_feeds_fetch import LOCAL, NOW, rss_handler, serve

    routes = {
        "/sy": rss_handler(body=_rss("<ttl>5</ttl><sy:updatePeriod>daily</sy:updatePeriod>"
                                     "<sy:updateFrequency>3</sy:updateFrequency>")),
        "/ttl": rss_handler(body=_rss("<ttl>5</ttl>", "")),
        "/none": rss_handler(body=_rss("")),
    }
    async with serve(routes) as base, Fetcher(LOCAL) as fetcher:
        got = {p: await fetcher.probe(FeedState(base + p), MemoryKnownEntries(), now=NOW) for p in routes}
    assert all(isinstance(r, Ok) for r in got.values())
    assert {p: r.update_every for p, r in got.items() if isinstance(r, Ok)} == {
        "/sy": 28_800.0, "/ttl": 300.0, "/none": None}
    assert got["/sy"].not_before == got["/ttl"].not_before == NOW + timedelta(minutes=5)  # the ttl's delay


@pytest.mark.parametrize(("seconds", "stated"), [
    (3.0, 3.0),  # the live bench's pace: 1,200 updates an hour
    (7.0, 3600 / 514),  # rounded to whole updates per hour
    (5400.0, 86_400 / 16),  # longer than an hour: per day
    (86_400.0 * 3, 604_800 / 2),  # per week, rounded
])
async def test_the_farm_states_its_hints_and_the_parser_reads_them(seconds: float, stated: float) -> None:
    """What the farm serves (issue 45: benchmarks' hints) is what the proxy's parser reads, to the rounding."""
    from proxy.farm import FeedFarm, FeedFormat, ManualClock

    async with FeedFarm(["a", "b"], window=3, prefill=2, clock=ManualClock(), hints={"a": seconds},
                        formats="mixed") as farm:
        hinted = farm.document("a", FeedFormat.RSS)
        plain = farm.document("b", FeedFormat.RSS)
        atom = farm.document("a", FeedFormat.ATOM)
    parsed = parse_document(hinted, url="http://farm.test/feeds/a.xml")
    assert parsed.hints is not None and parsed.hints.interval() == pytest.approx(stated)
    assert len(parsed.entries) == 2
    assert publisher_hints(plain) is None
    assert publisher_hints(atom) is None  # the syndication module is RSS's


async def test_the_farm_refuses_hints_that_are_no_interval() -> None:
    from proxy.farm import FeedFarm

    with pytest.raises(ValueError, match="hints"):
        FeedFarm(["a"], hints={"a": 0.0})
