"""The notification document, version 2: what a webhook receives, what ``/events`` streams.

One JSON document per resolved CEI (an *event*), the same bytes for every target
and every retry (the store renders it once, in the transaction that resolves the
CEI). Its shape is this module's pydantic models, which are also the OpenAPI
schema of ``GET /api/v1/events`` and the reference of ``docs/notifications.md``.

Versioning: ``version`` is 2 since "what matched is told" (issue 43): version 2
is version 1 plus ``matched`` (the entries that made the rule fire, with the
field and the keyword or pattern that matched). Every field of version 1 is
unchanged, so a receiver of version 1 that ignores unknown fields and does not
insist on ``version == 1`` reads version 2 as before. Documents stored before
(events written by an older release) stay version 1 and read back as such,
with an empty ``matched``. Fields may be added within a version (receivers must
ignore unknown fields); renaming, removing or retyping a field makes a new version.

This module does no I/O: the store fills it, the dispatcher and the SSE route
only read it.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "NOTIFICATION_VERSION",
    "CeiInfo",
    "EntryInfo",
    "FeedFailure",
    "MatchedEntryInfo",
    "NamedRef",
    "Notification",
    "NotificationEi",
]

NOTIFICATION_VERSION: Literal[2] = 2

#: At most this many new entries are listed per EI (``more_entries`` counts the rest).
MAX_ENTRIES_PER_EI = 20


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True)


class NamedRef(_Doc):
    """A profile or rule: its id and name."""

    id: int
    name: str


class EntryInfo(_Doc):
    """A new entry the capturing probe found on the EI's feed."""

    title: str | None
    link: str | None
    published: dt.datetime | None
    summary: str | None


class MatchedEntryInfo(_Doc):
    """An entry that made the rule fire, and what in it matched (version 2, issue 43)."""

    feed_id: int = Field(description="The feed the entry was found on (see `eis` for its URL).")
    title: str | None
    link: str | None
    published: dt.datetime | None
    match: Literal["contains", "all", "regex", "any"] = Field(
        description=(
            "Which part of the rule's `when` matched: a keyword of `contains` or `all`, the "
            "`regex`, or `any` (the rule has no keyword nor regex: every new entry counts)."
        ),
    )
    field: str | None = Field(
        None, description="The entry field it matched in (`title`, `summary`, `content`, "
                          "`link`, `author`, `categories`); null for `any`.")
    keyword: str | None = Field(
        None, description="The keyword as the rule wrote it (`contains`, `all`), else null.")
    pattern: str | None = Field(None, description="The regex (`regex`), else null.")

    @classmethod
    def of(cls, feed_id: int, title: str | None, link: str | None,
           published: dt.datetime | None, kind: str, field: str | None,
           text: str | None) -> MatchedEntryInfo:
        """From what the store keeps (``kind``, ``field``, ``text``: keyword or pattern)."""
        match = kind if kind in ("contains", "all", "regex") else "any"
        return cls(
            feed_id=feed_id, title=title, link=link, published=published,
            match=match,
            field=field if match != "any" else None,
            keyword=text if match in ("contains", "all") else None,
            pattern=text if match == "regex" else None,
        )


class FeedFailure(_Doc):
    """The last failed probe of the EI's feed within the EI's window."""

    outcome: str = Field(description="The probe's outcome, e.g. `timeout`, `http_error`.")
    http_status: int | None
    error: str | None
    chronon: int | None
    at: dt.datetime


class NotificationEi(_Doc):
    """One EI of the CEI: its feed, window and what became of it."""

    ordinal: int
    feed_id: int
    feed_url: str = Field(description="The feed's URL as the profile's owner registered it.")
    state: Literal["pending", "captured", "missed"]
    start: int = Field(description="First chronon of the window.")
    finish: int = Field(description="Last chronon of the window.")
    window_start: dt.datetime | None
    window_end: dt.datetime | None = Field(description="End of the window (exclusive).")
    captured_chronon: int | None
    captured_at: dt.datetime | None
    entries: list[EntryInfo] = Field(
        default_factory=list,
        description="New entries the capturing probe found on this feed (captured EIs only).",
    )
    more_entries: int = Field(0, description="New entries not listed (over the limit of 20).")
    missed_reason: Literal["window_passed", "feed_failing"] | None = Field(
        None,
        description=(
            "Why a missed EI was missed: its window passed without a successful probe, "
            "or the feed failed when probed in the window (see `feed_failure`)."
        ),
    )
    feed_failure: FeedFailure | None = None


class CeiInfo(_Doc):
    """The resolved CEI."""

    id: str
    state: Literal["captured", "missed"]
    fired: bool = Field(
        False,
        description=(
            "The rule's condition held (its query EIs joined): a person's \"it happened\". "
            "False when the trigger was only checked; such a CEI is captured when the "
            "check was made in time (issue 23)."
        ),
    )
    release: int
    resolved_chronon: int | None
    resolved_at: dt.datetime | None


class Notification(_Doc):
    """A CEI of one of your profiles was resolved (``type``: ``captured`` or ``missed``)."""

    version: Literal[1, 2] = Field(
        NOTIFICATION_VERSION,
        description="2 (documents stored by a release before issue 43 read back as 1).")
    type: Literal["captured", "missed"]
    event_id: int = Field(description="Monotonic id of the event (the SSE `id:`).")
    created_at: dt.datetime = Field(description="When the resolution was stored.")
    profile: NamedRef
    rule: NamedRef | None = Field(description="Null when the rule was replaced meanwhile.")
    cei: CeiInfo
    eis: list[NotificationEi]
    matched: list[MatchedEntryInfo] = Field(
        default_factory=list,
        description=(
            "Version 2: the entries that made the rule fire (at most 20), with what matched "
            "in each. Empty when the rule did not fire, and for a temporal trigger fired "
            "only by entries earlier probes found."
        ),
    )
