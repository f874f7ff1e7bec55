"""The web interface's pure parts: the SVG pictures, the failing-feed sentence, the form
mapping and the session codec. No service, no browser."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any, TypeVar

import pytest

from proxy.rules import Match
from proxy.store import Cei, ChrononFigures, Ei, Feed, Probe
from proxy.web._forms import (
    FormErrors,
    describe_match,
    spec_from_form,
    validate_rule,
    validate_spec,
)
from proxy.web._health import explain
from proxy.web._pictures import STATE_FILL, budget_svg, completeness_svg, timeline_svg
from proxy.web._session import SessionCodec

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
_T = TypeVar("_T")


def _make(cls: type[_T], **given: Any) -> _T:
    """A store record with ``given`` fields; any other required field (one a later change
    adds, such as a CEI's ``fired``) is ``None``: these pictures do not read it."""
    missing = {f.name: None for f in dataclasses.fields(cls)  # type: ignore[arg-type]
               if f.name not in given and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING}
    return cls(**given, **missing)


def _start_of(t: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=60 * t)


def _ei(n: int, feed: int, start: int, finish: int, state: str, at: int | None) -> Ei:
    return _make(Ei, id=n, cei_id="c", ordinal=n, feed_id=feed, start=start, finish=finish, reveal=None,
              state=state, captured_chronon=at, captured_probe_id=None)


def _cei(cid: str, state: str, *eis: Ei) -> Cei:
    return _make(Cei, id=cid, profile_id=1, rule_id=1, release=0, sealed=True, state=state,
               resolved_chronon=None, created_at=T0, eis=eis)


def test_timeline_draws_one_row_per_cei_one_window_per_ei_and_capture_marks() -> None:
    ceis = [
        _cei("missed-1", "missed", _ei(0, 1, 10, 12, "captured", 11), _ei(1, 2, 11, 20, "missed", None)),
        _cei("captured-0", "captured", _ei(0, 1, 0, 2, "captured", 0), _ei(1, 2, 1, 9, "captured", 5)),
    ]
    svg = timeline_svg(ceis, {1: "http://farm/feeds/mish.xml", 2: "http://farm/feeds/cnn.xml"}, _start_of)
    assert svg.count('<g class="cei ') == 2
    windows = re.findall(r'<rect class="ei ei-(\w+)" x="([\d.]+)" y="\d+" width="([\d.]+)"[^>]*fill="([^"]+)"', svg)
    assert [(w[0], w[3]) for w in windows] == [
        ("captured", STATE_FILL["captured"]), ("missed", "#c62828"),
        ("captured", STATE_FILL["captured"]), ("captured", STATE_FILL["captured"]),
    ]
    # Widths are proportional to the windows' lengths: [11, 20] is 10 chronons, [0, 2] is 3.
    assert float(windows[1][2]) / float(windows[2][2]) == pytest.approx(10 / 3, rel=0.01)
    assert svg.count('class="capture"') == 3  # the missed EI has no mark
    assert "feed 1 · mish.xml" in svg and "feed 2 · cnn.xml" in svg
    assert "20 · 00:20:00" in svg  # ticks are labelled with the chronons' UTC start times


def test_timeline_escapes_text_and_handles_no_ceis() -> None:
    svg = timeline_svg([_cei("<x>", "pending", _ei(0, 7, 0, 1, "pending", None))],
                       {7: "http://h/<script>"}, _start_of)
    assert "<script>" not in svg and "&lt;x&gt;" in svg
    assert "No CEIs yet." in timeline_svg([], {}, _start_of)


def test_budget_and_completeness_pictures() -> None:
    figures = [_make(ChrononFigures, chronon=c, started_at=_start_of(c), budget=4, used=u, captured_ceis=0,
                              missed_ceis=0) for c, u in ((1, 4), (2, 0), (3, 2))]
    svg = budget_svg(figures)
    assert re.findall(r"<title>chronon (\d+): (\d+) of (\d+) probes</title>", svg) == [
        ("1", "4", "4"), ("2", "0", "4"), ("3", "2", "4")]
    line = completeness_svg([(10, 1, 0), (20, 0, 1), (30, 2, 0)])
    assert "now 0.750 (3 of 4) · chronon 30" in line
    ys = [float(p.split(",")[1]) for p in re.search(r'points="([^"]+)"', line).group(1).split()]  # type: ignore[union-attr]
    assert ys[0] < ys[1] > ys[2]  # 1.0, then 0.5, then 0.75: higher is better, drawn higher
    assert "No CEI resolved yet." in completeness_svg([])


def _feed(outcome: str | None, errors: int = 0, next_at: dt.datetime | None = None,
          disabled: bool = False, reason: str | None = None) -> Feed:
    return _make(Feed, id=1, url="http://h/f", url_normalised="http://h/f", resource=0, etag=None,
                last_modified=None, last_probe_at=T0, last_outcome=outcome, consecutive_errors=errors,
                next_allowed_at=next_at, disabled=disabled, disabled_reason=reason, created_at=T0)


def _probe(status: int | None, error: str | None) -> Probe:
    return _make(Probe, id=1, feed_id=1, chronon=1, started_at=T0, finished_at=T0, duration_seconds=0.1,
                 outcome="x", http_status=status, error=error, new_entries=0, bytes=None)


@pytest.mark.parametrize(
    ("feed", "last", "expected"),
    [
        (_feed(None), None, ""),
        (_feed("ok"), None, ""),
        (_feed("not_modified"), None, ""),
        (_feed("http_error", 1), _probe(500, None), "The server answered with an HTTP error (500)."),
        (_feed("http_error", 3, T0 + dt.timedelta(seconds=90)), _probe(503, "HTTP 503"),
         "The server answered with an HTTP error (503) on the last 3 probes. Detail: HTTP 503. "
         "Next try not before 00:01:30 UTC (in 90 s: the proxy backs off after errors)."),
        (_feed("timeout", 2), None, "The server did not answer in time on the last 2 probes."),
        (_feed("parse_error", 1), _probe(200, "not XML"),
         "The document is not a feed the proxy can read. Detail: not XML."),
        (_feed("gone", 1, disabled=True, reason="410 Gone"), None,
         "Disabled: 410 Gone. The proxy no longer probes it."),
        (_feed("weird", 1), None, "The last probe ended with 'weird'."),
        (_feed("http_error", 1, T0 - dt.timedelta(seconds=5)), None,
         "The server answered with an HTTP error."),  # a past next-allowed time is not news
    ],
)
def test_why_a_feed_is_failing_in_words(feed: Feed, last: Probe | None, expected: str) -> None:
    assert explain(feed, last, T0) == expected


def test_builder_form_becomes_the_apis_json() -> None:
    form = {"name": "p", "rules.0.name": "r", "kind": "trigger", "rules.0.trigger.feed": "3",
            "schedule": "every", "rules.0.trigger.every": "5m", "rules.0.trigger.slack": "",
            "rules.0.trigger.when.contains": "oil, crude ,", "rules.0.query.0.feed": "4",
            "rules.0.query.0.within": "10m", "rules.0.query.1.feed": "5", "rules.0.query.1.overwrite": "1",
            "rules.0.query.2.feed": "", "notify.kind": "webhook", "notify.0.url": "https://h/hook"}
    multi = {"notify.0.events": ["captured", "missed"]}
    assert spec_from_form(form, multi) == {
        "name": "p",
        "rules": [{"name": "r", "trigger": {"feed": "3", "every": "5m", "when": {"contains": ["oil", "crude"]}},
                   "query": [{"feed": "4", "within": "10m"}, {"feed": "5", "overwrite": True}]}],
        "notify": [{"webhook": "https://h/hook", "events": ["captured", "missed"]}],
    }
    watch = spec_from_form({"name": "w", "rules.0.name": "r", "kind": "watch", "rules.0.watch.within": "1m"},
                           {"rules.0.watch.feeds": ["1", "2"]})
    assert watch["rules"][0] == {"name": "r", "watch": {"feeds": ["1", "2"], "within": "1m"}}
    cron = spec_from_form({"name": "c", "rules.0.name": "r", "schedule": "cron", "rules.0.trigger.feed": "1",
                           "rules.0.trigger.cron": "*/5 * * * *"}, {})
    assert cron["rules"][0]["trigger"] == {"feed": "1", "cron": "*/5 * * * *"}
    errors = FormErrors()
    assert validate_spec(spec_from_form({"name": "", "rules.0.name": "r", "rules.0.trigger.feed": "1",
                                         "rules.0.trigger.every": "soon"}, {}), errors) is None
    assert set(errors.by_loc) >= {"name", "rules.0.trigger.every"}


def test_builder_form_makes_alerts_with_all_exclude_and_fields() -> None:
    form = {"name": "p", "rules.0.name": "r", "kind": "alert", "rules.0.trigger.feed": "3",
            "schedule": "on", "rules.0.trigger.when.contains": "oil", "rules.0.trigger.when.all": "crude, price",
            "rules.0.trigger.when.exclude": "opinion, olive oil",
            # Query rows left filled in: an alert reads its trigger feed alone.
            "rules.0.query.0.feed": "4", "rules.0.query.0.within": "10m"}
    spec = spec_from_form(form, {"rules.0.trigger.when.fields": ["title", "categories"]})
    assert spec["rules"][0] == {"name": "r", "trigger": {
        "feed": "3", "on": "update",
        "when": {"contains": ["oil"], "all": ["crude", "price"], "exclude": ["opinion", "olive oil"],
                 "fields": ["title", "categories"]}}}
    # The default fields (or none ticked) leave 'fields' out: it reads back as written.
    for ticked in (["title", "summary"], []):
        when = spec_from_form(form, {"rules.0.trigger.when.fields": ticked})["rules"][0]["trigger"]["when"]
        assert "fields" not in when, ticked
    # Fields without any condition make no 'when'.
    bare = spec_from_form({**form, "rules.0.trigger.when.contains": "", "rules.0.trigger.when.all": "",
                           "rules.0.trigger.when.exclude": ""}, {"rules.0.trigger.when.fields": ["link"]})
    assert "when" not in bare["rules"][0]["trigger"]
    # A trigger keeps its query rows.
    trigger = spec_from_form({**form, "kind": "trigger"}, {})
    assert trigger["rules"][0]["query"] == [{"feed": "4", "within": "10m"}]
    # The dry run validates the rule alone (no profile name needed), messages at rules.0.…
    errors = FormErrors()
    rule = validate_rule(spec_from_form({**form, "name": ""}, {}), errors)
    assert rule is not None and rule.kind == "alert" and not errors
    assert validate_rule(spec_from_form({**form, "rules.0.trigger.when.exclude": "OIL"}, {}), errors) is None
    assert set(errors.by_loc) == {"rules.0.trigger.when.exclude"}


def test_builder_form_gives_a_watch_rule_the_condition_inputs() -> None:
    # Issue 43: the condition boxes serve a watch rule too (a watched update counts only if an
    # entry matches); the trigger's own inputs are left out.
    form = {"name": "w", "rules.0.name": "r", "kind": "watch", "rules.0.watch.within": "1m",
            "rules.0.trigger.feed": "9", "rules.0.trigger.every": "5m",
            "rules.0.trigger.when.contains": "gold", "rules.0.trigger.when.exclude": "opinion"}
    spec = spec_from_form(form, {"rules.0.watch.feeds": ["1", "2"], "rules.0.trigger.when.fields": ["title"]})
    assert spec["rules"][0] == {"name": "r", "watch": {
        "feeds": ["1", "2"], "within": "1m",
        "when": {"contains": ["gold"], "exclude": ["opinion"], "fields": ["title"]}}}
    errors = FormErrors()
    bad = {**form, "rules.0.trigger.when.exclude": "GOLD"}
    assert validate_rule(spec_from_form(bad, {"rules.0.watch.feeds": ["1"]}), errors) is None
    assert set(errors.by_loc) == {"rules.0.watch.when.exclude"}


@pytest.mark.parametrize(("match", "words"), [
    (None, ""),
    (Match("contains", "title", "Crude Oil"), "one of the keywords: “Crude Oil” in title"),
    (Match("all", "summary", "oil"), "all keywords, the first: “oil” in summary"),
    (Match("regex", "categories", "(?m)^Energy$"), "regex (?m)^Energy$ found in categories"),
    (Match("any"), "any entry counts (no keyword asked)"),
])
def test_why_a_dry_run_entry_matches_in_words(match: Match | None, words: str) -> None:
    assert describe_match(match) == words


def test_session_codec_refuses_forged_foreign_and_expired_cookies() -> None:
    codec = SessionCodec("secret", max_age_seconds=3600)
    session = codec.new(user_id=3, key_id=7)
    value = codec.dumps(session)
    assert codec.loads(value) == session
    assert codec.loads(value[:-2] + ("AA" if not value.endswith("AA") else "BB")) is None
    assert SessionCodec("another secret", max_age_seconds=3600).loads(value) is None
    assert codec.loads("") is None and codec.loads(None) is None
    assert SessionCodec("secret", max_age_seconds=-1).loads(value) is None  # expired
    assert session.csrf_ok(session.csrf) and not session.csrf_ok("x") and not session.csrf_ok(None)
