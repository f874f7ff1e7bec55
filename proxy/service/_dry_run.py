"""A rule tried on its feeds' current documents: which entries it would match, and why.

``POST /api/v1/rules/test`` (docs/api.md, "Trying a rule"). The feeds are the user's own
(another user's feed is as unknown as a missing one, like a profile's: ids must not
leak); each document the rule reads (the trigger feed, or every watched feed) is fetched
once, whole (no validators: a 304 would show nothing), by the loop's prober, so the
SSRF guard and the per-host politeness limits (concurrency, minimum delay) apply as to
any probe. It is not the engine's probe: the chronon's budget does not pay for it and
nothing of it is stored (no new entries, no validators, no feed health), so a dry run
never changes what a rule will fire on.

A feed the server asked to leave alone (``Retry-After``, still in force) is not fetched,
and neither is a disabled one: the answer says so instead. Each user may try
:data:`DRY_RUN_BURST` rules at once and :data:`DRY_RUN_RATE_PER_MINUTE` a minute on
average (a token bucket per user, :class:`RateLimitedError`: 429 with ``Retry-After``):
a client looping on it must not turn the proxy into a fetcher of its feeds outside
the budget.

What it does not do: count ``every_nth`` (that count is the evaluator's, over the feed's
history), apply a rule's baseline, or say which entries are *new*: every entry of the
document is judged by the condition alone.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

import structlog

from proxy.errors import RateLimitedError
from proxy.feeds import FeedState
from proxy.feeds.results import (
    Entry,
    Gone,
    HttpError,
    NetworkError,
    NothingKnown,
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
from proxy.rules import Condition, Match, RuleSpec, UnknownFeedError
from proxy.service._ratelimit import TokenBuckets
from proxy.service._shared import Shared
from proxy.store import Feed

log = structlog.get_logger("proxy.service")

__all__ = ["EntryVerdict", "FeedTrial", "RuleTrial", "judge", "rule_feed_fields"]

#: What a rule without ``when`` makes of any entry: it counts.
ANY = Match("any")
#: Dry runs a user may start at once, and a minute on average (a person trying conditions
#: by hand stays well inside; a script looping on the route does not).
DRY_RUN_BURST = 10
DRY_RUN_RATE_PER_MINUTE = 30.0


@dataclass(frozen=True, slots=True)
class EntryVerdict:
    """One entry of a document and what the rule's condition made of it (``None``: no match)."""

    entry: Entry
    match: Match | None


@dataclass(frozen=True, slots=True)
class FeedTrial:
    """One feed's document as the dry run read it: its entries judged, or why it failed.

    ``status`` is the final HTTP status when there was a response; ``error`` the failure
    in words (``None`` after a 200)."""

    feed_id: int
    status: int | None
    entries: tuple[EntryVerdict, ...]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RuleTrial:
    """A rule tried on the documents it reads, in the order the rule names them."""

    kind: str
    feeds: tuple[FeedTrial, ...]


def rule_feed_fields(rule: RuleSpec) -> list[tuple[str, str]]:
    """``(loc, feed id)`` of every feed the rule names, ``loc`` relative to the rule."""
    if rule.watch is not None:
        return [(f"watch.feeds.{i}", feed) for i, feed in enumerate(rule.watch.feeds)]
    assert rule.trigger is not None
    return [("trigger.feed", rule.trigger.feed),
            *((f"query.{i}.feed", q.feed) for i, q in enumerate(rule.query or ()))]


def _read_feeds(rule: RuleSpec) -> list[int]:
    """The feeds whose entries the rule decides on: the trigger's, or each watched one.
    (Query feeds are probed when a rule fires; no condition reads them.)"""
    if rule.watch is not None:
        return [int(f) for f in rule.watch.feeds]
    assert rule.trigger is not None
    return [int(rule.trigger.feed)]


def judge(rule: RuleSpec, entries: Iterable[Entry]) -> tuple[EntryVerdict, ...]:
    """Each entry with what the rule's condition makes of it. Pure.

    The rule's ``when`` (a trigger's or a watch rule's) decides (:meth:`Condition.match`);
    without one every entry counts (``kind="any"``).
    """
    when = (rule.trigger.when if rule.trigger is not None
            else rule.watch.when if rule.watch is not None else None)
    condition = Condition.from_spec(when) if when is not None else None
    return tuple(EntryVerdict(e, condition.match(e) if condition is not None else ANY)
                 for e in entries)


def failure(result: ProbeResult) -> tuple[int | None, str]:
    """A failed probe's HTTP status (if a response came) and what went wrong, in words."""
    if isinstance(result, HttpError):
        return result.status, f"the server answered with HTTP error {result.status}"
    if isinstance(result, RateLimited):
        after = (f" until {result.retry_after:%Y-%m-%d %H:%M:%S} UTC"
                 if result.retry_after is not None else "")
        return result.status, f"the server asked the proxy to slow down ({result.status}){after}"
    if isinstance(result, Gone):
        return 410, "the server says the feed is gone for good (410)"
    if isinstance(result, NotModified):
        return 304, "the server answered 304 Not Modified to a request without validators"
    if isinstance(result, Timeout):
        return None, f"the server did not answer in time ({result.phase} timeout)"
    if isinstance(result, TooLarge):
        return None, f"the document is larger than the proxy accepts ({result.limit} bytes)"
    if isinstance(result, ParseError):
        detail = f": {result.detail}" if result.detail else ""
        return None, f"the document is not a feed the proxy can read ({result.reason}{detail})"
    if isinstance(result, Refused):
        return None, f"the URL was refused by the SSRF guard: {result.reason}"
    if isinstance(result, Redirected):
        return None, f"the redirects did not end: {result.reason}"
    if isinstance(result, NetworkError):
        return None, f"the server could not be reached: {result.reason}"
    return None, f"the probe ended with {result.outcome!r}"


class DryRuns:
    """Rules tried on their feeds' current documents (module docstring)."""

    def __init__(self, shared: Shared) -> None:
        self._s = shared
        self._buckets = TokenBuckets(DRY_RUN_RATE_PER_MINUTE / 60.0, DRY_RUN_BURST)

    async def try_rule(self, user_id: int, rule: RuleSpec) -> RuleTrial:
        """Fetch what ``rule`` reads and judge each entry; :class:`UnknownFeedError` (422,
        naming the field, e.g. ``trigger.feed``) for a feed the user did not register,
        :class:`RateLimitedError` past the user's dry runs (a refused rule costs none)."""
        s = self._s
        named = rule_feed_fields(rule)
        owned = {r.feed.id: r.feed for r in await s.store.registered_feeds(
            user_id, {int(f) for _, f in named if f.isdigit()})}
        for loc, feed in named:
            if not feed.isdigit() or int(feed) not in owned:
                raise UnknownFeedError(loc, feed)
        if (wait := self._buckets.take(user_id)) > 0:
            raise RateLimitedError(
                f"too many rule tests: at most {DRY_RUN_BURST} at once and "
                f"{DRY_RUN_RATE_PER_MINUTE:g} a minute; try again in {wait:.0f} s", wait)
        now = dt.datetime.fromtimestamp(s.wall(), dt.UTC)
        trials = await asyncio.gather(*(self._try_feed(rule, owned[f], now)
                                        for f in _read_feeds(rule)))
        log.info("rule_tried", user=user_id, kind=rule.kind, feeds=[t.feed_id for t in trials],
                 failed=sum(1 for t in trials if t.error is not None))
        return RuleTrial(rule.kind, tuple(trials))

    async def _try_feed(self, rule: RuleSpec, feed: Feed, now: dt.datetime) -> FeedTrial:
        s = self._s
        if feed.disabled:
            return FeedTrial(feed.id, None, (), f"the feed is disabled "
                             f"({feed.disabled_reason or 'no reason recorded'}): not fetched")
        if (feed.last_outcome == "rate_limited" and feed.next_allowed_at is not None
                and feed.next_allowed_at > now):
            # The server's own Retry-After is still in force: asking again would be impolite.
            return FeedTrial(feed.id, None, (), "not fetched: the server asked the proxy to wait "
                             f"until {feed.next_allowed_at:%Y-%m-%d %H:%M:%S} UTC")
        prober = s.loop_prober
        if prober is None:
            raise RuntimeError("ProxyService is not started")
        # On the loop's event loop, where the prober's HTTP sessions live (an injected one
        # sends it home); no validators, so the whole current document comes back.
        result = await s.host.run(prober.probe(FeedState(url=feed.url), NothingKnown(), now=now))
        if isinstance(result, Ok):
            return FeedTrial(feed.id, 200, judge(rule, result.entries))
        status, error = failure(result)
        return FeedTrial(feed.id, status, (), error)
