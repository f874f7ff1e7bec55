"""``/api/v1/rules/test``: a rule tried on its feeds' current documents (a dry run).

The handler only validates and translates; the service fetches and judges
(:mod:`proxy.service._dry_run`).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from proxy.api.deps import Service, UserId
from proxy.api.problems import problem_responses
from proxy.rules import RuleSpec
from proxy.service import EntryVerdict, FeedTrial, RuleTrial

router = APIRouter(prefix="/api/v1", tags=["rules"])


class MatchOut(BaseModel):
    """What made the entry match: the part of ``when``, the field, the keyword or regex."""

    kind: Literal["contains", "all", "regex", "any"] = Field(
        description="`any`: nothing positive was asked (no `when`, only `exclude`, a watch rule).")
    field: str | None
    text: str | None


class TriedEntryOut(BaseModel):
    """One entry of the document, and whether the rule's condition matches it."""

    title: str | None
    link: str | None
    published: dt.datetime | None
    matches: bool
    match: MatchOut | None

    @classmethod
    def of(cls, v: EntryVerdict) -> TriedEntryOut:
        m = v.match
        return cls(title=v.entry.title, link=v.entry.link, published=v.entry.published,
                   matches=m is not None,
                   match=None if m is None else MatchOut(kind=m.kind, field=m.field, text=m.text))


class TriedFeedOut(BaseModel):
    """One feed's document as fetched now: every entry judged, or why it could not be read."""

    feed: int
    status: int | None = Field(description="The final HTTP status; null when no response came.")
    entries: list[TriedEntryOut]
    error: str | None = Field(default=None, description="Why the fetch failed, in words.")

    @classmethod
    def of(cls, t: FeedTrial) -> TriedFeedOut:
        return cls(feed=t.feed_id, status=t.status, entries=[TriedEntryOut.of(v) for v in t.entries],
                   error=t.error)


class RuleTestOut(BaseModel):
    """The dry run's answer: for the trigger feed (or each watched feed), its entries."""

    kind: Literal["alert", "trigger", "watch"]
    feeds: list[TriedFeedOut]

    @classmethod
    def of(cls, trial: RuleTrial) -> RuleTestOut:
        return cls.model_validate({"kind": trial.kind,
                                   "feeds": [TriedFeedOut.of(t) for t in trial.feeds]})


@router.post("/rules/test", response_model=RuleTestOut, responses=problem_responses(422, 429))
async def dry_run(body: RuleSpec, service: Service, user: UserId) -> RuleTestOut:
    """Try one rule (as in a profile's `rules`) on the current documents of the feeds it reads:
    every entry with whether it would match and why. Your own feeds only (422 naming the field
    otherwise); fetched now through the proxy's fetcher, its SSRF guard and politeness limits,
    outside the probe budget; nothing is stored. `every_nth` is not counted and the rule's
    baseline does not apply: each entry is judged by the condition alone (docs/api.md).
    Ten at once and 30 a minute per user; past that, 429 with `Retry-After`."""
    return RuleTestOut.of(await service.try_rule(user, body))
