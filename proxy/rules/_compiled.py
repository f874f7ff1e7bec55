"""The evaluator's compiled rules: what a :class:`~proxy.rules.schemas.RuleSpec` becomes once its
feeds are engine resources and its durations chronons (issue 46: the evaluator split by purpose).

Frozen values, built once per rule by :func:`compile_rule` and read by the evaluator; no
runtime state lives here (that is :mod:`proxy.rules._state`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from proxy.errors import ValidationError
from proxy.rules.durations import parse_duration, to_chronons
from proxy.rules.matching import Condition
from proxy.rules.ports import ChrononMapping, first_chronon_from
from proxy.rules.schemas import RuleSpec

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

__all__ = [
    "ALERT_SLACK",
    "CompiledRule",
    "Period",
    "Query",
    "TriggerRule",
    "UnknownFeedError",
    "WatchRule",
    "compile_rule",
    "conditional_watch",
    "selective",
    "waits_for_updates",
    "window_of",
]

ALERT_SLACK = "15m"
"""A single-feed alert's default ``slack`` (a trigger without ``query``, issue 43): how long
after the feed's update the probe that finds it still captures the alert. Fifteen minutes,
the poll interval of a typical feed reader; at least one chronon."""


class UnknownFeedError(ValidationError):
    """A rule names a feed id that ``resolve_feed`` does not know; ``loc`` is the field path."""

    def __init__(self, loc: str, feed_id: str) -> None:
        self.loc = loc
        self.feed_id = feed_id
        super().__init__(f"{loc}: unknown feed {feed_id!r}")


def selective(condition: Condition) -> bool:
    """Whether ``condition`` picks entries (keywords or a regex), not only counts them."""
    return bool(condition.contains or condition.all or condition.exclude or condition.regex)


@dataclass(frozen=True, slots=True)
class Query:
    resource: int
    within: int | None  # None: overwrite life


@dataclass(frozen=True, slots=True)
class Period:
    first: int | None  # first active chronon
    last: int | None  # last active chronon

    def active(self, t: int) -> bool:
        return (self.first is None or t >= self.first) and (self.last is None or t <= self.last)


@dataclass(frozen=True, slots=True)
class TriggerRule:
    rule_id: str
    profile_id: str
    resource: int
    mode: Literal["every", "cron", "notify"]
    every: int  # chronons; 0 unless mode == "every"
    slack: int
    cron: CronTrigger | None
    condition: Condition | None
    queries: tuple[Query, ...]
    period: Period
    backfill: int  # entries from before the rule its first probe may fire on


@dataclass(frozen=True, slots=True)
class WatchRule:
    rule_id: str
    profile_id: str
    resources: tuple[int, ...]
    within: int
    period: Period
    # issue 43: a watched feed's update counts only if one of its new entries matches
    condition: Condition | None = None


CompiledRule = TriggerRule | WatchRule


def conditional_watch(rule: CompiledRule) -> bool:
    """Whether ``rule`` is a watch rule with a ``when``: only matching entries are updates for
    it, so a ping (which holds no entries) cannot advance it; the probe that finds them does."""
    return isinstance(rule, WatchRule) and rule.condition is not None


def waits_for_updates(rule: CompiledRule) -> bool:
    """Whether ``rule`` learns of its feeds' updates only from pings or probes."""
    return isinstance(rule, WatchRule) or rule.mode == "notify"


def window_of(rule: CompiledRule) -> int:
    """How soon after an update a probe must see it for ``rule`` (a waiting rule)."""
    return rule.within if isinstance(rule, WatchRule) else rule.slack


def compile_rule(
    clock: ChrononMapping,
    profile_id: str,
    rule_id: str,
    rule: RuleSpec,
    lookup: Callable[[str], int],
    loc: str,
) -> CompiledRule:
    """Compile one validated rule: feeds resolved by ``lookup`` (a ``LookupError`` becomes
    :class:`UnknownFeedError` naming the field under ``loc``), durations in chronons."""
    def resource(feed_id: str, where: str) -> int:
        try:
            return int(lookup(feed_id))
        except LookupError:
            raise UnknownFeedError(f"{loc}.{where}", feed_id) from None

    def chronons(text: str, *, minimum: int = 0) -> int:
        return to_chronons(parse_duration(text), clock.length, minimum=minimum)

    period = Period(None, None)
    if rule.period is not None:
        period = Period(
            None if rule.period.start is None else first_chronon_from(clock, rule.period.start),
            None if rule.period.end is None else first_chronon_from(clock, rule.period.end) - 1,
        )
    if rule.watch is not None:
        return WatchRule(
            rule_id=rule_id,
            profile_id=profile_id,
            resources=tuple(resource(f, f"watch.feeds.{j}") for j, f in enumerate(rule.watch.feeds)),
            within=chronons(rule.watch.within),
            period=period,
            condition=None if rule.watch.when is None else Condition.from_spec(rule.watch.when),
        )
    trigger = rule.trigger
    assert trigger is not None  # guaranteed by RuleSpec
    condition = None if trigger.when is None else Condition.from_spec(trigger.when)
    cron = None
    if trigger.cron is not None:
        from apscheduler.triggers.cron import CronTrigger

        cron = CronTrigger.from_crontab(trigger.cron, timezone=trigger.timezone)
    mode: Literal["every", "cron", "notify"] = (
        "every" if trigger.every is not None else "cron" if cron is not None else "notify"
    )
    return TriggerRule(
        rule_id=rule_id,
        profile_id=profile_id,
        resource=resource(trigger.feed, "trigger.feed"),
        mode=mode,
        every=chronons(trigger.every, minimum=1) if trigger.every is not None else 0,
        # The default slack is one chronon: a window the scheduler can actually choose in;
        # a single-feed alert's is ALERT_SLACK (a reader's poll interval), at least that.
        slack=(chronons(trigger.slack) if trigger.slack is not None
               else 1 if rule.query is not None
               else max(1, chronons(ALERT_SLACK))),
        cron=cron,
        condition=condition,
        queries=tuple(
            Query(resource(q.feed, f"query.{j}.feed"), None if q.within is None else chronons(q.within))
            for j, q in enumerate(rule.query or ())
        ),
        period=period,
        backfill=trigger.backfill or 0,
    )
