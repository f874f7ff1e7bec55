"""The rule language: request schemas for profiles and their notification rules.

A profile is a list of notification rules (paper 002 §2.1: a rule is a query
part, a trigger part, an active period and a utility; utility here is always
strict/binary, main paper §2). Two kinds of rule:

* a **trigger rule**: a trigger feed probed on a temporal schedule (``every``
  D with ``slack`` S, or a ``cron`` expression) or when an update notification
  (ping) for it arrives (``on``); an optional condition (``when``) on the new
  entries the probe finds; and query feeds, each with a life (``within`` a
  duration, or ``overwrite``: before the feed's next change, paper 002 §2.1);
* a **watch rule** (the main paper's AuctionWatch(k), §4): one EI per watched
  feed, opened at that feed's next update notification.

These models only validate the *shape* of a request (pydantic v2: an error's
``loc`` names the field, e.g. ``rules.0.trigger.every``, and its message the
reason, so the API can answer 422 with them). They deliberately do not check
that feed ids exist: the service resolves feed ids when it hands a profile to
:class:`proxy.rules.TriggerEvaluator` (``resolve_feed`` raises for an unknown
id and the evaluator re-raises it naming the field). Durations stay strings,
so a stored spec reads back exactly as submitted.
"""

from __future__ import annotations

import unicodedata
import zoneinfo
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from proxy.rules._regex import UnsafeRegexError, compile_safe_regex
from proxy.rules.durations import DurationError, parse_duration
from proxy.rules.matching import DEFAULT_FIELDS, FIELDS, normalize_text

__all__ = [
    "NOTIFY_EVENTS",
    "ConditionSpec",
    "NotifySpec",
    "PeriodSpec",
    "ProfileSpec",
    "QuerySpec",
    "RuleSpec",
    "TriggerSpec",
    "WatchConditionSpec",
    "WatchSpec",
]


def _invalid(kind: str, reason: str) -> PydanticCustomError:
    # A custom error keeps the message exactly as written (no "Value error, " prefix).
    return PydanticCustomError(kind, "{reason}", {"reason": reason})


def _check_duration(value: str) -> str:
    try:
        parse_duration(value)
    except DurationError as exc:
        raise _invalid("duration", str(exc)) from None
    return value.strip()


def _check_regex(value: str) -> str:
    try:
        compile_safe_regex(value)
    except UnsafeRegexError as exc:
        raise _invalid("regex", str(exc)) from None
    return value


def _check_cron(value: str) -> str:
    # APScheduler computes the fire times; parse here so a bad field fails at submission.
    from apscheduler.triggers.cron import CronTrigger

    try:
        CronTrigger.from_crontab(value, timezone="UTC")
    except (ValueError, TypeError) as exc:
        raise _invalid(
            "cron",
            f"invalid cron expression {value!r}: {exc} (expected 5 fields: minute hour day month day-of-week)",
        ) from None
    return " ".join(value.split())


def _check_timezone(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise _invalid(
            "timezone", f"unknown time zone {value!r} (use an IANA name such as 'UTC' or 'Europe/Paris')"
        ) from None
    return value


def _check_positive(value: str) -> str:
    if parse_duration(value) <= timedelta(0):
        raise _invalid("duration", f"duration {value!r} must be longer than 0s")
    return value


Duration = Annotated[str, AfterValidator(_check_duration)]
PositiveDuration = Annotated[str, AfterValidator(_check_duration), AfterValidator(_check_positive)]


def _feed_id_text(value: Any) -> Any:
    # POST /api/v1/feeds answers the id as a number: a rule may name it as that number or as
    # a string of its digits (issue 20). Stored and returned as the string (the canonical form).
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


FeedId = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=200),
    # After the constraints, so it runs before them (and their messages stay the str ones).
    BeforeValidator(_feed_id_text),
    WithJsonSchema(
        {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 200}, {"type": "integer"}],
         "description": "A feed's id as `POST /api/v1/feeds` returns it: the number (12) or "
                        "its digits as a string (\"12\", the canonical form rules are stored in)."},
        mode="validation",
    ),
]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class _Spec(BaseModel):
    # Unknown fields are typos ("evry"), never silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_keyword(value: str) -> str:
    if not value:
        raise _invalid("keyword", "a keyword must not be empty (nor only whitespace)")
    if any(unicodedata.category(ch) == "Cc" and not ch.isspace() for ch in value):
        raise _invalid("keyword", f"keyword {value!r} contains a control character")
    return value


def _check_field(value: str) -> str:
    if value not in FIELDS:
        raise _invalid(
            "field", f"unknown field {value!r}: use one of {', '.join(repr(f) for f in FIELDS)}"
        )
    return value


# Stripped first, so "  " is refused as empty by _check_keyword with its own message.
Keyword = Annotated[
    str, StringConstraints(strip_whitespace=True, max_length=200), AfterValidator(_check_keyword)
]
KeywordList = Annotated[list[Keyword], Field(min_length=1, max_length=100)]
FieldName = Annotated[str, AfterValidator(_check_field)]


class ConditionSpec(_Spec):
    """A condition on the new entries a trigger probe finds; every given part must hold.

    An entry *matches* when, in the selected ``fields`` (default title and
    summary), it contains one of ``contains``, contains each of ``all`` (each in
    some field), contains none of ``exclude``, and ``regex`` (RE2: linear time,
    no backreferences or lookaround) finds a match in some field, each only if
    given. Keywords match case-insensitively (Unicode case folding) and as
    whole words or phrases; :mod:`proxy.rules.matching` states the exact rules.
    Without ``every_nth`` the condition holds when some new entry matches; with
    it, matching entries are counted per rule and the condition holds when the
    count passes a multiple of ``every_nth`` (paper 002 §2.1:
    ``WHEN COUNT(*) % X = 0``).
    """

    contains: KeywordList | None = None
    all: KeywordList | None = None
    exclude: KeywordList | None = None
    regex: Annotated[str, AfterValidator(_check_regex)] | None = None
    every_nth: int | None = Field(default=None, ge=1, le=1_000_000)
    # None, not the default list: a stored spec reads back exactly as submitted (and the
    # default stays the matcher's to say). ``selected_fields`` is what a condition reads.
    fields: list[FieldName] | None = Field(
        default=None,
        min_length=1,
        max_length=len(FIELDS),
        description="The entry fields keywords and regex read: any of title, summary, content, "
        "link, author, categories; default title and summary.",
    )

    @field_validator("exclude")
    @classmethod
    def _exclude_disjoint(cls, exclude: list[str] | None, info: ValidationInfo) -> list[str] | None:
        # A keyword both required and excluded would make the rule never fire: a mistake.
        # Compared as matched (case-folded, whitespace runs as one space).
        for part in ("contains", "all"):
            wanted = {normalize_text(k) for k in info.data.get(part) or ()}
            for keyword in exclude or ():
                if normalize_text(keyword) in wanted:
                    raise _invalid(
                        "conflict",
                        f"keyword {keyword!r} is both in {part!r} and in 'exclude': "
                        "no entry could match",
                    )
        return exclude

    @field_validator("fields")
    @classmethod
    def _distinct_fields(cls, fields: list[str] | None) -> list[str] | None:
        seen: set[str] = set()
        for name in fields or ():
            if name in seen:
                raise _invalid("duplicate", f"field {name!r} is listed twice in 'fields'")
            seen.add(name)
        return fields

    @property
    def selected_fields(self) -> tuple[str, ...]:
        """The fields the condition reads: ``fields`` as given, else title and summary."""
        return tuple(self.fields) if self.fields is not None else DEFAULT_FIELDS

    @model_validator(mode="after")
    def _not_empty(self) -> ConditionSpec:
        parts = (self.contains, self.all, self.exclude, self.regex, self.every_nth)
        if all(part is None for part in parts):
            raise _invalid(
                "rule",
                "'when' must set at least one of 'contains', 'regex', 'every_nth', 'all', "
                "'exclude' (or be omitted)",
            )
        return self


class TriggerSpec(_Spec):
    """When the trigger feed's EI opens: exactly one of ``every``, ``cron``, ``on``.

    ``slack`` is how long after the opening the probe may happen (the EI is
    ``[t, t + slack]``); it defaults to one chronon. ``on: "update"`` and
    ``on: "ping"`` are synonyms: open at each update notification of the feed.
    ``timezone`` only affects ``cron``. ``backfill`` N lets the first probe after the
    rule was created fire it on the N newest entries published before then; without
    it that probe only sets the rule's baseline (entries already there never fire it).
    """

    feed: FeedId
    every: PositiveDuration | None = None
    slack: Duration | None = None
    cron: Annotated[str, AfterValidator(_check_cron)] | None = None
    timezone: Annotated[str, AfterValidator(_check_timezone)] = "UTC"
    on: Literal["update", "ping"] | None = None
    when: ConditionSpec | None = None
    backfill: int | None = Field(default=None, ge=0, le=1000)
    """How many entries published before the rule existed its first probe may fire it on
    (the newest ones); by default none: the first probe sets a baseline (issue 23)."""

    @model_validator(mode="after")
    def _one_schedule(self) -> TriggerSpec:
        given = [name for name in ("every", "cron", "on") if getattr(self, name) is not None]
        if len(given) != 1:
            what = "none" if not given else " and ".join(repr(g) for g in given)
            raise _invalid("rule", f"a trigger needs exactly one of 'every', 'cron', 'on' (got {what})")
        if (
            self.every is not None
            and self.slack is not None
            and parse_duration(self.slack) > parse_duration(self.every)
        ):
            raise _invalid(
                "rule",
                f"'slack' {self.slack!r} exceeds 'every' {self.every!r}: "
                "the next probe window would open before this one closes",
            )
        return self


class QuerySpec(_Spec):
    """A query feed and its life: exactly one of ``within`` (a duration) or ``overwrite: true``."""

    feed: FeedId
    within: Duration | None = None
    overwrite: Literal[True] | None = None

    @model_validator(mode="after")
    def _one_life(self) -> QuerySpec:
        if (self.within is None) == (self.overwrite is None):
            raise _invalid("rule", "a query needs exactly one of 'within' (a duration) or 'overwrite': true")
        return self


class PeriodSpec(_Spec):
    """When the rule is active (paper 002 §2.1, the rule's period); either bound may be open."""

    start: AwareDatetime | None = None
    end: AwareDatetime | None = None

    @model_validator(mode="after")
    def _ordered(self) -> PeriodSpec:
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise _invalid("rule", f"period 'end' {self.end.isoformat()} is not after 'start' {self.start.isoformat()}")
        return self


class WatchConditionSpec(ConditionSpec):
    """A watch rule's ``when``: a watched feed's update counts only if one of its new entries
    matches. ``every_nth`` is a trigger's counter and is refused here."""

    @field_validator("every_nth")
    @classmethod
    def _no_counting(cls, every_nth: int | None) -> int | None:
        if every_nth is not None:
            raise _invalid(
                "field",
                "'every_nth' counts a trigger's entries; a watch rule's update counts when one "
                "of its new entries matches (use contains, all, exclude or regex)",
            )
        return every_nth


class WatchSpec(_Spec):
    """AuctionWatch(k): one EI ``[u, u + within]`` per feed, ``u`` its next update notification.

    With ``when``, an update of a watched feed counts only if some new entry of it matches
    (the probe that finds the entries decides; a ping alone cannot, see docs/rules.md)."""

    feeds: list[FeedId] = Field(min_length=1, max_length=100)
    within: Duration
    when: WatchConditionSpec | None = None

    @field_validator("feeds")
    @classmethod
    def _distinct(cls, feeds: list[str]) -> list[str]:
        seen: set[str] = set()
        for feed in feeds:
            if feed in seen:
                raise _invalid("duplicate", f"feed {feed!r} is listed twice; watched feeds must be distinct")
            seen.add(feed)
        return feeds


#: The events a notify target can ask for: a CEI resolved as captured, or as missed.
NOTIFY_EVENTS: tuple[str, ...] = ("captured", "missed")

def _default_events() -> list[Literal["captured", "missed"]]:
    return ["captured"]


NotifyUrl = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2048)]


class NotifySpec(_Spec):
    """Where to tell the user that a CEI resolved: exactly one of ``webhook`` (an http(s) URL,
    signed per the Standard Webhooks specification) or ``apprise`` (an Apprise URL such as
    ``mailto://…`` or ``json://host/path``), and the ``events`` it wants (default:
    ``["captured"]``).

    Only the shape is checked here; the service checks the URL itself (the SSRF guard for
    webhooks, Apprise's parser for Apprise URLs) and answers 422 naming the field.
    """

    webhook: NotifyUrl | None = None
    apprise: NotifyUrl | None = None
    events: list[Literal["captured", "missed"]] = Field(
        default_factory=_default_events, min_length=1, max_length=2
    )

    @model_validator(mode="after")
    def _one_target(self) -> NotifySpec:
        if (self.webhook is None) == (self.apprise is None):
            raise _invalid("notify", "a notify target needs exactly one of 'webhook' or 'apprise'")
        if len(set(self.events)) != len(self.events):
            raise _invalid("duplicate", "an event is listed twice in 'events'")
        return self

    @property
    def kind(self) -> Literal["webhook", "apprise"]:
        return "webhook" if self.webhook is not None else "apprise"

    @property
    def url(self) -> str:
        url = self.webhook if self.webhook is not None else self.apprise
        assert url is not None
        return url


NotifyList = Annotated[list[NotifySpec], Field(max_length=20)]


def _distinct_targets(targets: list[NotifySpec] | None) -> list[NotifySpec] | None:
    seen: set[tuple[str, str]] = set()
    for target in targets or ():
        if (target.kind, target.url) in seen:
            raise _invalid("duplicate", f"{target.kind} {target.url!r} is listed twice; list its events once")
        seen.add((target.kind, target.url))
    return targets


class RuleSpec(_Spec):
    """One notification rule: exactly one of ``trigger`` or ``watch``.

    A trigger with ``query`` probes the query feeds when it fires (the main paper's
    CEI); without ``query`` it is a **single-feed alert**: a rank-1 CEI, the trigger's
    EI alone, fired when its condition holds on the entries the deciding probe found.

    ``notify``, when given (even empty), replaces the profile's ``notify`` for this rule's CEIs.
    """

    name: Name
    trigger: TriggerSpec | None = None
    query: list[QuerySpec] | None = Field(default=None, min_length=1, max_length=100)
    watch: WatchSpec | None = None
    period: PeriodSpec | None = None
    notify: NotifyList | None = None

    @field_validator("notify")
    @classmethod
    def _distinct_notify(cls, targets: list[NotifySpec] | None) -> list[NotifySpec] | None:
        return _distinct_targets(targets)

    @model_validator(mode="after")
    def _one_kind(self) -> RuleSpec:
        if (self.trigger is None) == (self.watch is None):
            raise _invalid("rule", "a rule needs exactly one of 'trigger' or 'watch'")
        if self.watch is not None and self.query is not None:
            raise _invalid("rule", "a watch rule takes no 'query': its EIs are the watched feeds")
        return self

    @field_validator("query")
    @classmethod
    def _distinct_queries(cls, query: list[QuerySpec] | None) -> list[QuerySpec] | None:
        seen: set[str] = set()
        for q in query or ():
            if q.feed in seen:
                raise _invalid("duplicate", f"feed {q.feed!r} is queried twice; query feeds must be distinct")
            seen.add(q.feed)
        return query

    @property
    def kind(self) -> Literal["alert", "trigger", "watch"]:
        """``alert``: a trigger without ``query`` (a rank-1 CEI, the trigger's EI alone)."""
        if self.trigger is None:
            return "watch"
        return "trigger" if self.query is not None else "alert"


_EXAMPLES: list[JsonValue] = [
    {
        "name": "business analyst",
        "rules": [
            {
                "name": "oil news",
                "trigger": {"feed": "FEED_MISH", "every": "3m", "slack": "2m", "when": {"contains": ["oil"]}},
                "query": [{"feed": "FEED_CNN", "within": "10m"}, {"feed": "FEED_MONEY", "within": "10m"}],
            }
        ],
    },
    {"name": "auctions", "rules": [{"name": "watch 3", "watch": {"feeds": ["A", "B", "C"], "within": "10m"}}]},
]


class ProfileSpec(_Spec):
    """A named profile of notification rules, as submitted to ``POST /api/v1/profiles``."""

    # The main paper's motivating example (§2.1) and AuctionWatch(3) (§4), shown in the OpenAPI docs.
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"examples": _EXAMPLES})

    name: Name
    rules: list[RuleSpec] = Field(min_length=1, max_length=100)
    #: The default notify targets of the profile's rules (a rule's own ``notify`` replaces it).
    notify: NotifyList | None = None

    @field_validator("notify")
    @classmethod
    def _distinct_notify(cls, targets: list[NotifySpec] | None) -> list[NotifySpec] | None:
        return _distinct_targets(targets)

    def feed_ids(self) -> list[str]:
        """Every feed id the profile mentions, in order of first mention (for existence checks)."""
        ids: dict[str, None] = {}
        for rule in self.rules:
            if rule.trigger is not None:
                ids[rule.trigger.feed] = None
            for q in rule.query or ():
                ids[q.feed] = None
            if rule.watch is not None:
                ids.update(dict.fromkeys(rule.watch.feeds))
        return list(ids)


def error_messages(exc: Any) -> list[str]:
    """``"rules.0.trigger.every: invalid duration 'x3m': …"`` lines from a pydantic ValidationError."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        lines.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    return lines
