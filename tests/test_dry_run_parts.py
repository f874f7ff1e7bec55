"""The dry run's pure parts (``proxy.service._dry_run``): entries judged, failures in words,
and the feeds it must not fetch. No service, no network: a fake prober records its probes."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.feeds.results import (
    Entry,
    FeedState,
    Gone,
    HttpError,
    NetworkError,
    NotModified,
    Ok,
    ParseError,
    ProbeResult,
    RateLimited,
    Redirected,
    Refused,
    Timeout,
    TooLarge,
)
from proxy.rules import Match, RuleSpec
from proxy.service._dry_run import DryRuns, failure, judge, rule_feed_fields
from proxy.store import Feed

NOW = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)
STATE = FeedState(url="http://feeds.test/a.xml")


def _entry(title: str, summary: str = "", categories: tuple[str, ...] = ()) -> Entry:
    return Entry(identity=title, title=title, link=None, summary=summary, content=None,
                 published=None, categories=categories)


ENTRIES = (_entry("Oil jumps", "news"), _entry("Opinion: oil", "column"),
           _entry("Markets", "crude oil steady", ("Energy",)), _entry("Soil", "garden"))


@pytest.mark.parametrize(("rule", "expected"), [
    # No 'when': every entry counts.
    ({"trigger": {"feed": 1, "on": "update"}}, ["any", "any", "any", "any"]),
    ({"trigger": {"feed": 1, "on": "update", "when": {"contains": ["oil"]}}},
     ["contains:title:oil", "contains:title:oil", "contains:summary:oil", None]),
    ({"trigger": {"feed": 1, "on": "update", "when": {"contains": ["oil"], "exclude": ["opinion"],
                                                    "fields": ["title"]}}},
     ["contains:title:oil", None, None, None]),
    ({"trigger": {"feed": 1, "every": "5m", "when": {"all": ["oil", "crude"]}},
      "query": [{"feed": 2, "within": "5m"}]},
     [None, None, "all:summary:oil", None]),
    ({"trigger": {"feed": 1, "on": "update", "when": {"regex": "(?m)^Energy$", "fields": ["categories"]}}},
     [None, None, "regex:categories:(?m)^Energy$", None]),
    ({"trigger": {"feed": 1, "on": "update", "when": {"exclude": ["oil"]}}}, [None, None, None, "any"]),
    # A watch rule fires at each update, whatever it holds...
    ({"watch": {"feeds": [1, 2], "within": "5m"}}, ["any", "any", "any", "any"]),
    # ... unless its 'when' says which entries make an update count (issue 43).
    ({"watch": {"feeds": [1, 2], "within": "5m", "when": {"contains": ["oil"], "exclude": ["opinion"]}}},
     ["contains:title:oil", None, "contains:summary:oil", None]),
])
def test_judge_says_which_entries_match_and_what_matched(rule: dict[str, Any], expected: list[str | None]) -> None:
    spec = RuleSpec.model_validate({"name": "r", **rule})

    def short(m: Match | None) -> str | None:
        return None if m is None else m.kind if m.kind == "any" else f"{m.kind}:{m.field}:{m.text}"

    verdicts = judge(spec, ENTRIES)
    assert [v.entry for v in verdicts] == list(ENTRIES)  # every entry, in document order
    assert [short(v.match) for v in verdicts] == expected


def test_rule_feed_fields_name_each_feed_by_its_field() -> None:
    spec = RuleSpec.model_validate({"name": "r", "trigger": {"feed": 1, "every": "5m"},
                                    "query": [{"feed": 2, "within": "5m"}, {"feed": "3", "overwrite": True}]})
    assert rule_feed_fields(spec) == [("trigger.feed", "1"), ("query.0.feed", "2"), ("query.1.feed", "3")]
    watch = RuleSpec.model_validate({"name": "w", "watch": {"feeds": [4, 5], "within": "1m"}})
    assert rule_feed_fields(watch) == [("watch.feeds.0", "4"), ("watch.feeds.1", "5")]


COMMON: dict[str, Any] = {"state": STATE, "elapsed": 0.1}


@pytest.mark.parametrize(("result", "status", "words"), [
    (HttpError(**COMMON, status=500), 500, "the server answered with HTTP error 500"),
    (RateLimited(**COMMON, status=429, retry_after=NOW), 429,
     "the server asked the proxy to slow down (429) until 2026-11-28 12:00:00 UTC"),
    (RateLimited(**COMMON, status=503, retry_after=None), 503, "the server asked the proxy to slow down (503)"),
    (Gone(**COMMON), 410, "the server says the feed is gone for good (410)"),
    (NotModified(**COMMON), 304, "the server answered 304 Not Modified to a request without validators"),
    (Timeout(**COMMON, phase="connect"), None, "the server did not answer in time (connect timeout)"),
    (TooLarge(**COMMON, limit=1000), None, "the document is larger than the proxy accepts (1000 bytes)"),
    (ParseError(**COMMON, reason="not-a-feed", detail="an HTML page"), None,
     "the document is not a feed the proxy can read (not-a-feed: an HTML page)"),
    (Refused(**COMMON, reason="private address 10.0.0.1"), None,
     "the URL was refused by the SSRF guard: private address 10.0.0.1"),
    (Redirected(**COMMON, location=None, hops=1, reason="redirect loop"), None,
     "the redirects did not end: redirect loop"),
    (NetworkError(**COMMON, reason="connection refused"), None,
     "the server could not be reached: connection refused"),
])
def test_a_failed_fetch_in_words(result: ProbeResult, status: int | None, words: str) -> None:
    assert failure(result) == (status, words)


class _Prober:
    def __init__(self) -> None:
        self.probed: list[FeedState] = []

    async def probe(self, state: FeedState, known: Any, *, now: dt.datetime) -> ProbeResult:
        self.probed.append(state)
        return Ok(state=state, elapsed=0.0, entries=ENTRIES, new=ENTRIES)


class _Host:
    async def run(self, coro: Any) -> Any:
        return await coro


FEED = Feed(id=7, url="http://feeds.test/a.xml", url_normalised="http://feeds.test/a.xml", resource=0,
            etag='"v1"', last_modified="yesterday", last_probe_at=None, last_outcome="ok",
            consecutive_errors=0, next_allowed_at=None, disabled=False, disabled_reason=None,
            created_at=NOW)


@pytest.mark.parametrize(("feed", "fetched", "error"), [
    # The document whole: no validators, whatever the feed's last probe stored.
    (FEED, True, None),
    # Back-off after our own errors does not hold a dry run back.
    (replace(FEED, last_outcome="http_error", next_allowed_at=NOW + dt.timedelta(hours=1)), True, None),
    # The server's own Retry-After in force: not fetched.
    (replace(FEED, last_outcome="rate_limited", next_allowed_at=NOW + dt.timedelta(minutes=5)), False,
     "not fetched: the server asked the proxy to wait until 2026-11-28 12:05:00 UTC"),
    (replace(FEED, last_outcome="rate_limited", next_allowed_at=NOW - dt.timedelta(seconds=1)), True, None),
    (replace(FEED, disabled=True, disabled_reason="410 Gone"), False,
     "the feed is disabled (410 Gone): not fetched"),
])
async def test_which_feeds_a_dry_run_fetches(feed: Feed, fetched: bool, error: str | None) -> None:
    prober = _Prober()
    shared = SimpleNamespace(loop_prober=prober, host=_Host())
    trial = await DryRuns(shared)._try_feed(  # type: ignore[arg-type]
        RuleSpec.model_validate({"name": "r", "trigger": {"feed": 7, "on": "update"}}), feed, NOW)
    assert trial.error == error
    assert prober.probed == ([FeedState(url=feed.url)] if fetched else [])
    assert (trial.status, len(trial.entries)) == ((200, 4) if fetched else (None, 0))
