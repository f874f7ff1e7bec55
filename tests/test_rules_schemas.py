"""The rule language: durations, regex safety and request validation (errors name field and reason)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pydantic
import pytest

from proxy.rules import DurationError, ProfileSpec, error_messages, parse_duration, to_chronons
from proxy.rules._regex import UnsafeRegexError, compile_safe_regex
from proxy.rules.matching import FIELDS

MOTIVATING = {
    "name": "business analyst",
    "rules": [
        {
            "name": "oil news",
            "trigger": {"feed": "FEED_MISH", "every": "3m", "slack": "2m", "when": {"contains": ["oil"]}},
            "query": [{"feed": "FEED_CNN", "within": "10m"}, {"feed": "FEED_MONEY", "within": "10m"}],
        }
    ],
}
AUCTIONS = {"name": "auctions", "rules": [{"name": "watch 3", "watch": {"feeds": ["A", "B", "C"], "within": "10m"}}]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("3m", timedelta(minutes=3)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        (" 10m ", timedelta(minutes=10)),
        ("0s", timedelta(0)),
    ],
)
def test_parse_duration_accepts(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("x3m", "invalid duration 'x3m'"),
        ("", "invalid duration ''"),
        ("3", "invalid duration '3'"),
        ("1.5h", "invalid duration '1.5h'"),
        ("30m1h", "largest first"),
        ("3M", "invalid duration '3M'"),
        ("-3m", "invalid duration '-3m'"),
        ("4000d", "longer than the maximum"),
    ],
)
def test_parse_duration_rejects_with_reason(text: str, reason: str) -> None:
    with pytest.raises(DurationError, match=reason):
        parse_duration(text)


@pytest.mark.parametrize(
    ("duration", "chronon_seconds", "minimum", "expected"),
    [
        ("10m", 60, 0, 10),
        ("2m", 60, 0, 2),
        ("90s", 60, 0, 2),  # rounded up: never shorter than the user allowed
        ("60s", 60, 0, 1),
        ("0s", 60, 0, 0),  # window(0): the EI [t, t]
        ("0s", 60, 1, 1),  # periods must advance time
        ("1s", 60, 0, 1),
        ("1h", 0.1, 0, 36_000),  # no float noise chronon
        ("3m", 7, 0, 26),
    ],
)
def test_to_chronons(duration: str, chronon_seconds: float, minimum: int, expected: int) -> None:
    assert to_chronons(duration, chronon_seconds, minimum=minimum) == expected


def test_to_chronons_rejects_bad_chronon_length() -> None:
    with pytest.raises(ValueError, match="chronon_seconds"):
        to_chronons("1m", 0)


@pytest.mark.parametrize(
    "pattern", [r"\boil\b", "(oil|gas)", r"(?i)crude\s+oil", r"(?:\s|-)+", "x{1,5}", "(a+)?", "(?P<n>a)",
                # Exponential on a backtracking engine, linear on RE2 (issue 24.5): accepted.
                "(a+)+$", "(a*)*", "(a|ab)+", "(?i)(a|a?)+$", "(.*a){25}"])
def test_safe_regexes_compile(pattern: str) -> None:
    assert compile_safe_regex(pattern).pattern == pattern


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "backreference '\\1' is not supported: rule regexes use RE2"),
        ("(?=oil)", "lookahead '(?=…)' is not supported"),
        ("(?!oil)gas", "negative lookahead '(?!…)' is not supported"),
        ("(?<=oil)gas", "lookbehind '(?<=…)' is not supported"),
        ("(?<!oil)gas", "negative lookbehind '(?<!…)' is not supported"),
        ("(?>oil)", "atomic group '(?>…)' is not supported"),
        ("a++", "possessive quantifier '++' is not supported"),
        ("(a)?(?(1)b|c)", "conditional '(?(…)…)' is not supported"),
        ("[", "invalid regular expression '[': missing ]"),
        ("a{1001}", "invalid repetition size"),
        ("(.*a){1000}", "too large: 11004 RE2 instructions, at most 2000"),
        ("a" * 501, "longer than 500"),
    ],
)
def test_unsupported_regexes_are_refused_naming_the_feature(pattern: str, reason: str) -> None:
    with pytest.raises(UnsafeRegexError) as info:
        compile_safe_regex(pattern)
    assert reason in str(info.value)


@pytest.mark.parametrize("body", [MOTIVATING, AUCTIONS], ids=["motivating", "auctionwatch"])
def test_example_bodies_are_accepted_as_is(body: dict[str, Any]) -> None:
    spec = ProfileSpec.model_validate(body)
    assert spec.name == body["name"]
    # Stored specs read back as submitted (durations stay strings).
    again = ProfileSpec.model_validate(spec.model_dump(exclude_none=True))
    assert again == spec


def test_motivating_example_fields() -> None:
    spec = ProfileSpec.model_validate(MOTIVATING)
    rule = spec.rules[0]
    assert rule.kind == "trigger"
    assert rule.trigger is not None and rule.trigger.every == "3m" and rule.trigger.slack == "2m"
    assert rule.trigger.when is not None and rule.trigger.when.contains == ["oil"]
    assert [(q.feed, q.within) for q in rule.query or ()] == [("FEED_CNN", "10m"), ("FEED_MONEY", "10m")]
    assert spec.feed_ids() == ["FEED_MISH", "FEED_CNN", "FEED_MONEY"]
    assert ProfileSpec.model_validate(AUCTIONS).feed_ids() == ["A", "B", "C"]


def _with(path: list[str | int], value: Any, base: dict[str, Any] = MOTIVATING) -> dict[str, Any]:
    body = copy.deepcopy(base)
    node: Any = body
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return body


_DELETE = object()
T: list[str | int] = ["rules", 0, "trigger"]


@pytest.mark.parametrize(
    ("body", "loc", "reason"),
    [
        (_with([*T, "every"], "x3m"), "rules.0.trigger.every", "invalid duration 'x3m'"),
        (_with([*T, "every"], "0s"), "rules.0.trigger.every", "must be longer than 0s"),
        (_with([*T, "slack"], "5m"), "rules.0.trigger", "'slack' '5m' exceeds 'every' '3m'"),
        (_with([*T, "cron"], "*/5 * * * *"), "rules.0.trigger", "exactly one of 'every', 'cron', 'on' (got 'every' and 'cron')"),
        (_with([*T, "every"], _DELETE), "rules.0.trigger", "exactly one of 'every', 'cron', 'on' (got none)"),
        (_with([*T, "on"], "push"), "rules.0.trigger.on", "'update' or 'ping'"),
        (_with([*T, "evry"], "3m"), "rules.0.trigger.evry", "Extra inputs are not permitted"),
        (_with([*T, "feed"], ""), "rules.0.trigger.feed", "at least 1 character"),
        (_with([*T, "when"], {}), "rules.0.trigger.when", "at least one of 'contains', 'regex', 'every_nth'"),
        (_with([*T, "when"], {"regex": "(?=oil)"}), "rules.0.trigger.when.regex", "lookahead '(?=…)' is not supported"),
        (_with([*T, "when"], {"regex": "("}), "rules.0.trigger.when.regex", "invalid regular expression"),
        (_with([*T, "when"], {"every_nth": 0}), "rules.0.trigger.when.every_nth", "greater than or equal to 1"),
        (_with([*T, "when"], {"contains": []}), "rules.0.trigger.when.contains", "at least 1 item"),
        (_with([*T, "timezone"], "Mars/Olympus"), "rules.0.trigger.timezone", "unknown time zone 'Mars/Olympus'"),
        (_with(["rules", 0, "query", 0, "within"], "ten minutes"), "rules.0.query.0.within", "invalid duration 'ten minutes'"),
        (_with(["rules", 0, "query", 1, "overwrite"], True), "rules.0.query.1", "exactly one of 'within'"),
        (_with(["rules", 0, "query", 1, "within"], _DELETE), "rules.0.query.1", "exactly one of 'within'"),
        (_with(["rules", 0, "query", 1, "feed"], "FEED_CNN"), "rules.0.query", "feed 'FEED_CNN' is queried twice"),
        (_with(["rules", 0, "query"], []), "rules.0.query", "at least 1 item"),
        (_with(["rules", 0, "watch"], {"feeds": ["A"], "within": "1m"}), "rules.0", "exactly one of 'trigger' or 'watch'"),
        (_with(["rules"], []), "rules", "at least 1 item"),
        (_with(["name"], "  "), "name", "at least 1 character"),
        (
            _with(["rules", 0, "period"], {"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}),
            "rules.0.period",
            "is not after 'start'",
        ),
        (_with(["rules", 0, "period"], {"start": "2026-01-02T00:00:00"}), "rules.0.period.start", "timezone"),
        (_with(["rules", 0, "watch", "feeds"], ["A", "A"], AUCTIONS), "rules.0.watch.feeds", "feed 'A' is listed twice"),
        (_with(["rules", 0, "watch", "feeds"], [], AUCTIONS), "rules.0.watch.feeds", "at least 1 item"),
        (_with(["rules", 0, "watch", "within"], _DELETE, AUCTIONS), "rules.0.watch.within", "Field required"),
        (_with(["rules", 0, "query"], [{"feed": "X", "within": "1m"}], AUCTIONS), "rules.0", "takes no 'query'"),
    ],
)
def test_validation_errors_name_the_field_and_reason(body: dict[str, Any], loc: str, reason: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        ProfileSpec.model_validate(body)
    lines = error_messages(info.value)
    assert any(line.startswith(f"{loc}: ") and reason in line for line in lines), lines


def test_cron_error_quotes_the_expression() -> None:
    body = _with([*T, "every"], _DELETE)
    body = _with([*T, "cron"], "61 * * * *", body)
    with pytest.raises(pydantic.ValidationError) as info:
        ProfileSpec.model_validate(body)
    [line] = error_messages(info.value)
    assert line.startswith("rules.0.trigger.cron: invalid cron expression '61 * * * *'")


@pytest.mark.parametrize(
    "trigger",
    [
        {"feed": "F", "cron": "*/5 * * * *", "timezone": "Europe/Paris"},
        {"feed": "F", "on": "ping"},
        {"feed": "F", "on": "update", "slack": "5m"},
        {"feed": "F", "every": "1h", "slack": "1h", "when": {"regex": r"\boil\b", "every_nth": 3}},
    ],
)
def test_other_trigger_forms_are_accepted(trigger: dict[str, Any]) -> None:
    body = {"name": "p", "rules": [{"name": "r", "trigger": trigger, "query": [{"feed": "Q", "overwrite": True}]}]}
    spec = ProfileSpec.model_validate(body)
    assert spec.rules[0].trigger is not None and spec.rules[0].trigger.feed == "F"


async def test_a_fastapi_route_answers_422_naming_the_field() -> None:
    import httpx
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/profiles")
    async def create(spec: ProfileSpec) -> dict[str, list[str]]:
        return {"feeds": spec.feed_ids()}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        ok = await client.post("/profiles", json=MOTIVATING)
        assert ok.status_code == 200 and ok.json() == {"feeds": ["FEED_MISH", "FEED_CNN", "FEED_MONEY"]}
        bad = await client.post("/profiles", json=_with([*T, "every"], "x3m"))
        assert bad.status_code == 422
        [detail] = bad.json()["detail"]
        assert detail["loc"] == ["body", "rules", 0, "trigger", "every"]
        assert detail["msg"].startswith("invalid duration 'x3m'")
    assert ProfileSpec.model_json_schema()["examples"][0] == MOTIVATING


# --- `when`: keywords, all, exclude, fields -----------------------------------------------

W: list[str | int] = [*T, "when"]


@pytest.mark.parametrize(
    ("when", "loc", "reason"),
    [
        ({"contains": ["oil"], "fields": ["title", "titel"]}, "rules.0.trigger.when.fields.1",
         "unknown field 'titel': use one of 'title', 'summary', 'content', 'link', 'author', 'categories'"),
        ({"contains": ["oil"], "fields": ["title", "title"]}, "rules.0.trigger.when.fields",
         "field 'title' is listed twice"),
        ({"contains": ["oil"], "fields": []}, "rules.0.trigger.when.fields", "at least 1 item"),
        ({"contains": ["oil", "  "]}, "rules.0.trigger.when.contains.1", "a keyword must not be empty"),
        ({"all": [""]}, "rules.0.trigger.when.all.0", "a keyword must not be empty"),
        ({"exclude": []}, "rules.0.trigger.when.exclude", "at least 1 item"),
        ({"exclude": ["a\x00b"]}, "rules.0.trigger.when.exclude.0", "contains a control character"),
        ({"contains": ["Crude Oil"], "exclude": ["gas", "crude  OIL"]}, "rules.0.trigger.when.exclude",
         "keyword 'crude  OIL' is both in 'contains' and in 'exclude'"),
        ({"all": ["opec"], "exclude": ["OPEC"]}, "rules.0.trigger.when.exclude",
         "keyword 'OPEC' is both in 'all' and in 'exclude'"),
        ({"fields": ["title"]}, "rules.0.trigger.when",
         "at least one of 'contains', 'regex', 'every_nth', 'all', 'exclude'"),
        ({"contains": ["x" * 201]}, "rules.0.trigger.when.contains.0", "at most 200 characters"),
    ],
)
def test_when_errors_name_the_field(when: dict[str, Any], loc: str, reason: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        ProfileSpec.model_validate(_with(W, when))
    lines = error_messages(info.value)
    assert any(line.startswith(f"{loc}: ") and reason in line for line in lines), lines


def test_when_defaults_and_keeps_keywords_as_written() -> None:
    from proxy.rules import ConditionSpec

    spec = ConditionSpec.model_validate({"all": [" Crude  Oil "], "exclude": ["olive"]})
    assert spec.all == ["Crude  Oil"] and spec.contains is None
    # Not given, it stays unset, so the stored spec reads back as submitted.
    assert spec.fields is None and spec.selected_fields == ("title", "summary")
    assert spec.model_dump(mode="json", exclude_none=True) == {"all": ["Crude  Oil"], "exclude": ["olive"]}
    every = ConditionSpec.model_validate({"exclude": ["x"], "fields": list(reversed(FIELDS))})
    assert every.selected_fields == tuple(reversed(FIELDS))


def test_a_trigger_without_query_is_a_single_feed_alert() -> None:
    # Issue 43: "this feed, these words" is one rule: a rank-1 CEI, the trigger's EI alone.
    spec = ProfileSpec.model_validate({"name": "p", "rules": [
        {"name": "oil", "trigger": {"feed": "7", "on": "update", "when": {"contains": ["oil"]}}}]})
    rule = spec.rules[0]
    assert rule.kind == "alert" and rule.query is None
    assert spec.feed_ids() == ["7"]
    with_query = ProfileSpec.model_validate({"name": "p", "rules": [
        {"name": "oil", "trigger": {"feed": "7", "every": "3m"},
         "query": [{"feed": "8", "within": "10m"}]}]})
    assert with_query.rules[0].kind == "trigger"
