"""Where a profile's rules stand: what each waits for, in wall time and feed ids.

``GET /api/v1/profiles/{id}/status`` answers the question a user asks when a rule
has not fired: is it waiting for an update, and of which feed; when is its next
check; has it fired and waits for the probe that decides it? The answer is read
from each rule's evaluator state (:func:`proxy.rules.rule_progress`: live on the
process that runs the chronon loop, as last stored elsewhere), the feeds' health
as stored, and their update models (when each feed is expected to change next).

Nothing here does I/O: :meth:`ProxyService.profile_status` gathers the inputs and
:func:`profile_status` names them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError as PydanticValidationError

from proxy.rules import FeedModelEstimate, RuleProgress, RuleSpec, RuleStateError, rule_progress
from proxy.rules.ports import ChrononMapping
from proxy.store import Cei, Profile, RegisteredFeed

__all__ = ["FeedStatus", "ProfileStatus", "RuleState", "RuleStatus", "profile_status"]

At = Callable[[int], dt.datetime]
"""A chronon's start in wall time."""

RuleState = Literal[
    "pending", "not_started", "ended", "baseline", "deciding", "capturing", "scheduled", "waiting",
    "building", "unknown",
]
"""One word per rule (``docs/api.md``, "Rule status")."""


@dataclass(frozen=True, slots=True)
class FeedStatus:
    """One feed a profile's rules read: its health as stored and when it should change next."""

    id: int
    url: str  # the user's own registration URL, never the shared one
    last_probe_at: dt.datetime | None
    last_outcome: str | None
    consecutive_errors: int
    next_allowed_at: dt.datetime | None
    disabled: bool
    model_kind: str | None
    next_expected_update_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class RuleStatus:
    """One rule: ``state`` in a word, ``explanation`` in a sentence, and the facts behind them."""

    id: int
    name: str
    kind: Literal["trigger", "watch"]
    state: RuleState
    explanation: str
    waiting_for: tuple[int, ...] = ()  # feeds whose next update the rule waits for
    seen: tuple[tuple[int, dt.datetime], ...] = ()  # watch: each feed's update in the CEI being built
    building_cei: str | None = None  # watch: the CEI being built
    building_missed: bool = False  # watch: that CEI was missed; it is still built, silently
    updates_from: dt.datetime | None = None  # watch: the next CEI counts updates from this instant on
    next_check_at: dt.datetime | None = None  # temporal trigger: the next check (once anchored)
    open_ceis: tuple[tuple[str, dt.datetime, dt.datetime], ...] = ()  # trigger: fired, not decided
    last_fired_at: dt.datetime | None = None  # trigger: when its last CEI opened
    pending_ceis: int = 0  # the rule's CEIs not resolved yet (captured or missed)
    # Their EIs no probe has captured yet: (CEI id, feed id, window start, window end), by end.
    probes_due: tuple[tuple[str, int, dt.datetime, dt.datetime], ...] = ()


@dataclass(frozen=True, slots=True)
class ProfileStatus:
    profile_id: int
    at: dt.datetime
    source: Literal["live", "saved"]  # the loop's evaluator, or the states as last stored
    rules: tuple[RuleStatus, ...]
    feeds: tuple[FeedStatus, ...]


def profile_status(
    profile: Profile,
    states: Mapping[int, Any],
    feeds: Mapping[int, RegisteredFeed],
    models: Mapping[int, FeedModelEstimate | None],
    clock: ChrononMapping,
    now: dt.datetime,
    source: Literal["live", "saved"],
    pending: Sequence[Cei] = (),
) -> ProfileStatus:
    """``states``: rule id -> the rule's evaluator state (``None`` or missing: not installed
    yet); ``feeds`` and ``models`` by feed id (``models``: POSIX seconds); ``pending``: the
    profile's CEIs not resolved yet, as stored."""
    feed_of = {r.feed.resource: fid for fid, r in feeds.items()}
    at: At = clock.start_of
    ceis: dict[int, list[Cei]] = {}
    for cei in pending:
        if cei.rule_id is not None:
            ceis.setdefault(cei.rule_id, []).append(cei)
    rules = []
    for rule in profile.rules:
        mine = ceis.get(rule.id, [])
        due = sorted(((c.id, ei.feed_id, at(ei.start), at(ei.finish + 1)) for c in mine for ei in c.eis
                      if ei.state == "pending"), key=lambda d: (d[3], d[0], d[1]))
        base = RuleStatus(rule.id, rule.name, "trigger", "unknown", "", pending_ceis=len(mine),
                          probes_due=tuple(due))
        rules.append(_rule(base, rule.spec, states.get(rule.id), feed_of, at, now))
    out = []
    for fid in sorted({f for rule in profile.rules for f in rule.feed_ids}):
        reg = feeds.get(fid)
        if reg is None:  # the user's registration went away; the rule still names it
            continue
        model = models.get(fid)
        f = reg.feed
        out.append(FeedStatus(
            id=fid, url=reg.registration.url, last_probe_at=f.last_probe_at, last_outcome=f.last_outcome,
            consecutive_errors=f.consecutive_errors, next_allowed_at=f.next_allowed_at, disabled=f.disabled,
            model_kind=None if model is None else model.kind,
            next_expected_update_at=None if model is None else model.next_expected_at(),
        ))
    return ProfileStatus(profile.id, now, source, tuple(rules), tuple(out))


def _rule(
    base: RuleStatus, raw_spec: Any, state: Any, feed_of: Mapping[int, int], at: At, now: dt.datetime,
) -> RuleStatus:
    try:
        spec = RuleSpec.model_validate(raw_spec)
    except PydanticValidationError:
        return _with(base, "unknown", "the stored rule no longer validates")
    base = dataclasses.replace(base, kind="watch" if spec.watch is not None else "trigger")
    if spec.period is not None:
        if spec.period.start is not None and now < spec.period.start:
            return _with(base, "not_started", f"its period starts at {_iso(spec.period.start)}")
        if spec.period.end is not None and now > spec.period.end:
            return _with(base, "ended", f"its period ended at {_iso(spec.period.end)}")
    if state is None:
        return _with(base, "pending", "the chronon loop has not installed it yet")
    try:
        progress = rule_progress(state)
    except RuleStateError as exc:
        return _with(base, "unknown", f"its state does not read: {exc}")

    def fid(resource: int) -> int:
        return feed_of.get(resource, -1)

    if spec.watch is not None:
        return _watch(base, [int(f) for f in spec.watch.feeds], progress, fid, at)
    assert spec.trigger is not None
    return _trigger(base, int(spec.trigger.feed), spec.trigger.on is not None, progress, at)


def _watch(base: RuleStatus, feeds: list[int], p: RuleProgress, fid: Callable[[int], int], at: At) -> RuleStatus:
    seen = tuple(sorted(((fid(r), at(t)) for r, t in p.covered.items()), key=lambda x: x[1]))
    covered = {f for f, _ in seen}
    waiting = tuple(f for f in dict.fromkeys(feeds) if f not in covered)
    start = None if p.after < 0 else at(p.after + 1)
    names = _feeds(waiting)
    if p.building is None:
        state: RuleState = "waiting"
        explanation = f"waiting for an update of {names}" + (
            f" from {_iso(start)} on" if start is not None else "")
    else:
        state = "building"
        explanation = f"{p.building} has {len(seen)} of {len(covered) + len(waiting)} feeds; waiting for {names}"
        if not p.alive:
            explanation += (" (already missed; it still takes the other feeds' updates, so the next CEI"
                            " starts after them)")
    return _with(base, state, explanation, waiting_for=waiting, seen=seen, building_cei=p.building,
                 building_missed=p.building is not None and not p.alive, updates_from=start)


def _trigger(base: RuleStatus, feed: int, on_update: bool, p: RuleProgress, at: At) -> RuleStatus:
    opened = tuple((c, at(s), at(f + 1)) for c, s, f in p.open)
    last = None if p.last_open is None else at(p.last_open)
    nxt = None if p.next_fire is None else at(p.next_fire)
    common: dict[str, Any] = {"open_ceis": opened, "last_fired_at": last, "next_check_at": nxt}
    if not p.baselined:
        return _with(base, "baseline", f"waiting for the first successful probe of feed {feed}: "
                     "its entries set the baseline new ones are counted from", waiting_for=(feed,), **common)
    if opened:
        ends = ", ".join(_iso(end) for _, _, end in opened)
        return _with(base, "deciding", f"fired; waiting for a probe of feed {feed} before {ends}",
                     waiting_for=(feed,), **common)
    if base.probes_due:
        first: dict[int, dt.datetime] = {}
        for _, f, _, end in base.probes_due:  # by window end: each feed's first deadline
            first.setdefault(f, end)
        todo = ", ".join(f"feed {f} before {_iso(end)}" for f, end in first.items())
        return _with(base, "capturing", f"fired; still to probe {todo}",
                     waiting_for=(feed,) if on_update else (), **common)
    if on_update:
        return _with(base, "waiting", f"waiting for an update of feed {feed} (a ping, or a probe "
                     "that finds new entries)", waiting_for=(feed,), **common)
    if nxt is None:
        return _with(base, "scheduled", "its schedule starts at the next tick", **common)
    return _with(base, "scheduled", f"next check at {_iso(nxt)}", **common)


def _with(base: RuleStatus, state: RuleState, explanation: str, **changes: Any) -> RuleStatus:
    return dataclasses.replace(base, state=state, explanation=explanation, **changes)


def _feeds(ids: tuple[int, ...]) -> str:
    if len(ids) == 1:
        return f"feed {ids[0]}"
    return "feeds " + ", ".join(str(i) for i in ids)


def _iso(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
