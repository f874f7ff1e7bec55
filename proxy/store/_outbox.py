"""The transactional outbox (issue 19): notify targets of profiles, and the events and
deliveries written in the SAME transaction as the CEI resolutions they announce.

A crash can therefore never keep a resolution without its notifications, nor
send a notification whose resolution was rolled back: the dispatcher only reads
committed ``deliveries`` rows.

The document of an event is rendered here, once (:class:`proxy.notify.payload.Notification`,
version 2): every target and every retry sends the same bytes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import secrets
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.notify.payload import (
    MAX_ENTRIES_PER_EI,
    CeiInfo,
    EntryInfo,
    FeedFailure,
    MatchedEntryInfo,
    NamedRef,
    Notification,
    NotificationEi,
)
from proxy.notify.signing import new_secret
from proxy.store._base import _among, _chunks
from proxy.store._feeds import Feeds
from proxy.store._models import (
    CeiRow,
    DeliveryRow,
    EiRow,
    EntryRow,
    FeedRegistrationRow,
    NotificationEventRow,
    NotifySubscriptionRow,
    NotifyTargetRow,
    ProbeRow,
    ProfileRow,
    RuleRow,
)
from proxy.store._types import CeiStateChange, MatchedRecord, NotifyTarget, RuleInput, TargetInput

#: Probe outcomes that saw the feed (proxy.feeds' Ok and NotModified, and a pushed document).
_SUCCESS = ("ok", "not_modified", "push")


def url_hash(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8")).hexdigest()


def new_msg_id() -> str:
    """A delivery's ``webhook-id``: unique, stable across its retries (Standard Webhooks)."""
    return "msg_" + secrets.token_urlsafe(18)


def _target(row: Any, secret: str | None = None) -> NotifyTarget:
    return NotifyTarget(
        id=row.id,
        user_id=row.user_id,
        kind=row.kind,
        url=row.url,
        disabled=bool(row.disabled),
        disabled_reason=row.disabled_reason,
        created_at=row.created_at,
        previous_secret_expires_at=row.previous_secret_expires_at,
        secret=secret,
    )


class Outbox(Feeds):
    """Notify targets and subscriptions of profiles; events and deliveries of resolutions."""

    #: Chronon → wall time of its start (the service's clock), for the documents' times.
    chronon_start: Callable[[int], dt.datetime] | None = None

    # --- targets and subscriptions (written with the profile) -----------------------

    async def _link_targets(
        self,
        conn: AsyncConnection,
        user_id: int,
        profile_id: int,
        profile_notify: Sequence[TargetInput] | None,
        rules: Sequence[tuple[int, RuleInput]],
        *,
        fresh: bool = False,
    ) -> tuple[NotifyTarget, ...]:
        """Replace the profile's subscriptions (``fresh``: a profile just inserted, which has
        none); create the user's targets it names for the first time (returned with their
        secrets: the only time they are shown)."""
        if not fresh:
            await conn.execute(
                delete(NotifySubscriptionRow).where(NotifySubscriptionRow.profile_id == profile_id)
            )
        wanted: list[tuple[int | None, TargetInput]] = [(None, t) for t in profile_notify or ()]
        for rule_id, rule in rules:
            effective = rule.notify if rule.notify is not None else profile_notify or ()
            wanted += [(rule_id, t) for t in effective]
        if not wanted:
            return ()
        keys = {(t.kind, url_hash(t.url)): t for _, t in wanted}
        targets = cast(Table, NotifyTargetRow.__table__)
        existing = {
            (row.kind, row.url_hash): row.id
            for row in await conn.execute(
                select(targets.c.id, targets.c.kind, targets.c.url_hash).where(
                    targets.c.user_id == user_id,
                    targets.c.url_hash.in_([h for _, h in keys]),
                )
            )
        }
        created: list[NotifyTarget] = []
        now = self._clock()
        for key, t in keys.items():
            if key in existing:
                continue
            secret = new_secret() if t.kind == "webhook" else None
            row = (
                await conn.execute(
                    insert(targets)
                    .values(user_id=user_id, kind=t.kind, url=t.url, url_hash=key[1],
                            secret=secret, created_at=now)
                    .returning(*targets.c)
                )
            ).one()
            existing[key] = row.id
            created.append(_target(row, secret))
        await conn.execute(
            insert(NotifySubscriptionRow),
            [
                {
                    "profile_id": profile_id,
                    "rule_id": rule_id,
                    "target_id": existing[(t.kind, url_hash(t.url))],
                    "events": ",".join(t.events),
                }
                for rule_id, t in wanted
            ],
        )
        return tuple(created)

    # --- events and deliveries (written with the resolution) ------------------------

    async def _cei_states(self, conn: AsyncConnection, cei_ids: Sequence[str]) -> dict[str, str]:
        states: dict[str, str] = {}
        for chunk in _chunks(list(dict.fromkeys(cei_ids))):
            states.update(
                (row.id, row.state)
                for row in await conn.execute(
                    select(CeiRow.id, CeiRow.state).where(_among(conn, CeiRow.id, chunk))
                )
            )
        return states

    async def _write_events(
        self, conn: AsyncConnection, changes: Sequence[CeiStateChange], before: dict[str, str]
    ) -> int:
        """One event per CEI these changes resolved (pending → captured/missed), with its
        deliveries; called after the changes are applied, in their transaction. Returns
        the events written."""
        resolved: dict[str, CeiStateChange] = {}
        for c in changes:
            if c.state in ("captured", "missed") and before.get(c.cei_id) == "pending":
                resolved.setdefault(c.cei_id, c)
        if not resolved:
            return 0
        ids = list(resolved)
        events = cast(Table, NotificationEventRow.__table__)
        done: set[str] = set()
        ceis: dict[str, Any] = {}
        eis: dict[str, list[Any]] = defaultdict(list)
        for chunk in _chunks(ids):
            done.update(
                (await conn.execute(select(events.c.cei_id).where(_among(conn, events.c.cei_id, chunk))))
                .scalars()
            )
            for row in await conn.execute(
                select(
                    CeiRow.id, CeiRow.profile_id, CeiRow.rule_id, CeiRow.release, CeiRow.fired,
                    CeiRow.matched,
                    ProfileRow.user_id, ProfileRow.name.label("profile_name"),
                    RuleRow.name.label("rule_name"),
                )
                .join(ProfileRow, ProfileRow.id == CeiRow.profile_id)
                .outerjoin(RuleRow, RuleRow.id == CeiRow.rule_id)
                .where(_among(conn, CeiRow.id, chunk))
            ):
                ceis[row.id] = row
            for ei in await conn.execute(
                select(EiRow).where(_among(conn, EiRow.cei_id, chunk)).order_by(EiRow.cei_id, EiRow.ordinal)
            ):
                eis[ei.cei_id].append(ei)
        todo = [cei_id for cei_id in ids if cei_id in ceis and cei_id not in done]
        if not todo:
            return 0
        urls = await self._registered_urls(conn, todo, ceis, eis)
        entries = await self._capture_entries(conn, [ei for c in todo for ei in eis[c]])
        failures = await self._window_failures(
            conn, [ei for c in todo for ei in eis[c] if ei.state == "missed"]
        )
        now = self._clock()
        rows = [
            {"user_id": ceis[c].user_id, "profile_id": ceis[c].profile_id, "cei_id": c,
             "type": resolved[c].state, "payload": "", "created_at": now}
            for c in todo
        ]
        event_ids = list(
            (
                await conn.execute(
                    insert(events).returning(events.c.id, sort_by_parameter_order=True), rows
                )
            ).scalars()
        )
        payloads = []
        for n, (cei_id, event_id) in enumerate(zip(todo, event_ids, strict=True), 1):
            if n % 100 == 0:
                # A round after a restart resolves a thousand CEIs and more: let the lease's
                # renewal and the chronon loop run every 100 documents (about 0.14 ms each, so ~14 ms).
                await asyncio.sleep(0)
            doc = self._document(
                event_id, now, resolved[cei_id], ceis[cei_id], eis[cei_id], urls, entries, failures
            )
            payloads.append({"b_id": event_id, "b_payload": doc.model_dump_json()})
        await conn.execute(
            update(events).where(events.c.id == bindparam("b_id"))
            .values(payload=bindparam("b_payload")),
            payloads,
        )
        await self._insert_deliveries(conn, todo, event_ids, ceis, resolved, now)
        return len(todo)

    async def _registered_urls(
        self, conn: AsyncConnection, todo: list[str], ceis: dict[str, Any],
        eis: dict[str, list[Any]],
    ) -> dict[tuple[int, int], str]:
        """(user, feed) → the URL as that user registered it (never the shared feed's URL)."""
        users = sorted({ceis[c].user_id for c in todo})
        feeds = sorted({ei.feed_id for c in todo for ei in eis[c]})
        out: dict[tuple[int, int], str] = {}
        for chunk in _chunks(feeds):
            for row in await conn.execute(
                select(FeedRegistrationRow.user_id, FeedRegistrationRow.feed_id,
                       FeedRegistrationRow.url)
                .where(_among(conn, FeedRegistrationRow.feed_id, chunk),
                       _among(conn, FeedRegistrationRow.user_id, users))
            ):
                out[(row.user_id, row.feed_id)] = row.url
        return out

    async def _capture_entries(
        self, conn: AsyncConnection, eis: list[Any]
    ) -> dict[tuple[int, int], list[Any]]:
        """(capturing probe, feed) → the entries that probe saw first, oldest first."""
        probes = sorted({ei.captured_probe_id for ei in eis if ei.captured_probe_id is not None})
        out: dict[tuple[int, int], list[Any]] = defaultdict(list)
        for chunk in _chunks(probes):
            for row in await conn.execute(
                select(EntryRow.first_seen_probe_id, EntryRow.feed_id, EntryRow.title,
                       EntryRow.link, EntryRow.published, EntryRow.summary)
                .where(_among(conn, EntryRow.first_seen_probe_id, chunk))
                .order_by(EntryRow.id)
            ):
                out[(row.first_seen_probe_id, row.feed_id)].append(row)
        return out

    async def _window_failures(
        self, conn: AsyncConnection, missed: list[Any]
    ) -> dict[int, Any]:
        """EI id → the last failed probe of its feed within its window (missed EIs only)."""
        if not missed:
            return {}
        lo = min(ei.start for ei in missed)
        hi = max(ei.finish for ei in missed)
        by_feed: dict[int, list[Any]] = defaultdict(list)
        for chunk in _chunks(sorted({ei.feed_id for ei in missed})):
            for row in await conn.execute(
                select(ProbeRow.feed_id, ProbeRow.chronon, ProbeRow.outcome,
                       ProbeRow.http_status, ProbeRow.error, ProbeRow.started_at)
                .where(_among(conn, ProbeRow.feed_id, chunk), ProbeRow.chronon >= lo,
                       ProbeRow.chronon <= hi, ProbeRow.outcome.not_in(_SUCCESS))
                .order_by(ProbeRow.id)
            ):
                by_feed[row.feed_id].append(row)
        out: dict[int, Any] = {}
        for ei in missed:
            inside = [p for p in by_feed.get(ei.feed_id, ()) if ei.start <= p.chronon <= ei.finish]
            if inside:
                out[ei.id] = inside[-1]
        return out

    def _document(
        self, event_id: int, now: dt.datetime, change: CeiStateChange, cei: Any, eis: list[Any],
        urls: dict[tuple[int, int], str], entries: dict[tuple[int, int], list[Any]],
        failures: dict[int, Any],
    ) -> Notification:
        start = self.chronon_start

        def at(chronon: int | None) -> dt.datetime | None:
            return None if start is None or chronon is None else start(chronon)

        items = []
        for ei in eis:
            found = (
                entries.get((ei.captured_probe_id, ei.feed_id), [])
                if ei.state == "captured" and ei.captured_probe_id is not None else []
            )
            failure = failures.get(ei.id)
            items.append(NotificationEi(
                ordinal=ei.ordinal,
                feed_id=ei.feed_id,
                feed_url=urls.get((cei.user_id, ei.feed_id), ""),
                state=ei.state,
                start=ei.start,
                finish=ei.finish,
                window_start=at(ei.start),
                window_end=at(ei.finish + 1),
                captured_chronon=ei.captured_chronon,
                captured_at=at(ei.captured_chronon),
                entries=[
                    EntryInfo(title=e.title, link=e.link, published=e.published, summary=e.summary)
                    for e in found[:MAX_ENTRIES_PER_EI]
                ],
                more_entries=max(0, len(found) - MAX_ENTRIES_PER_EI),
                missed_reason=(
                    None if ei.state != "missed"
                    else "feed_failing" if failure is not None else "window_passed"
                ),
                feed_failure=None if failure is None else FeedFailure(
                    outcome=failure.outcome, http_status=failure.http_status,
                    error=failure.error, chronon=failure.chronon, at=failure.started_at,
                ),
            ))
        state = change.state
        assert state in ("captured", "missed")
        return Notification(
            type=state,
            event_id=event_id,
            created_at=now,
            profile=NamedRef(id=cei.profile_id, name=cei.profile_name),
            rule=None if cei.rule_id is None or cei.rule_name is None
            else NamedRef(id=cei.rule_id, name=cei.rule_name),
            cei=CeiInfo(id=change.cei_id, state=state, fired=bool(cei.fired), release=cei.release,
                        resolved_chronon=change.resolved_chronon,
                        resolved_at=at(change.resolved_chronon)),
            eis=items,
            matched=[
                MatchedEntryInfo.of(r.feed_id, r.title, r.link, r.published, r.kind, r.field, r.text)
                for r in (MatchedRecord.from_json(m) for m in cei.matched or ())
            ],
        )

    async def _insert_deliveries(
        self, conn: AsyncConnection, todo: list[str], event_ids: list[int],
        ceis: dict[str, Any], resolved: dict[str, CeiStateChange], now: dt.datetime,
    ) -> None:
        """One delivery per (event, subscribed target wanting its type): the rule's
        subscriptions, or the profile's defaults for a CEI whose rule is gone."""
        rule_ids = sorted({ceis[c].rule_id for c in todo if ceis[c].rule_id is not None})
        orphans = sorted({ceis[c].profile_id for c in todo if ceis[c].rule_id is None})
        subs = cast(Table, NotifySubscriptionRow.__table__)
        targets = cast(Table, NotifyTargetRow.__table__)
        by_rule: dict[int, list[Any]] = defaultdict(list)
        by_profile: dict[int, list[Any]] = defaultdict(list)
        columns = (subs.c.rule_id, subs.c.profile_id, subs.c.target_id, subs.c.events,
                   targets.c.disabled, targets.c.disabled_reason)
        joined = subs.join(targets, targets.c.id == subs.c.target_id)
        for chunk in _chunks(rule_ids):
            for row in await conn.execute(
                select(*columns).select_from(joined).where(_among(conn, subs.c.rule_id, chunk))
            ):
                by_rule[row.rule_id].append(row)
        for chunk in _chunks(orphans):
            for row in await conn.execute(
                select(*columns).select_from(joined)
                .where(_among(conn, subs.c.profile_id, chunk), subs.c.rule_id.is_(None))
            ):
                by_profile[row.profile_id].append(row)
        rows = []
        for cei_id, event_id in zip(todo, event_ids, strict=True):
            cei = ceis[cei_id]
            found = by_rule[cei.rule_id] if cei.rule_id is not None else by_profile[cei.profile_id]
            seen: set[int] = set()
            for sub in found:
                if resolved[cei_id].state not in sub.events.split(",") or sub.target_id in seen:
                    continue
                seen.add(sub.target_id)
                disabled = bool(sub.disabled)
                rows.append({
                    "event_id": event_id,
                    "target_id": sub.target_id,
                    "msg_id": new_msg_id(),
                    # A disabled target (410 Gone) gets a dead letter that says so, at once:
                    # the user sees why it was not delivered, and can retry after enabling it.
                    "state": "failed" if disabled else "pending",
                    "last_error": (
                        f"target disabled: {sub.disabled_reason or 'disabled'}" if disabled else None
                    ),
                    "next_attempt_at": now,
                    "window_start": now,
                    "created_at": now,
                })
        if rows:
            await conn.execute(insert(cast(Table, DeliveryRow.__table__)), rows)

