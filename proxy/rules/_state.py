"""The evaluator's runtime state per rule, and reading it back (issue 46: the evaluator split
by purpose): what a rule remembers between events, JSON-serialisable through
:meth:`~proxy.rules.evaluator.TriggerEvaluator.snapshot_state`, and :func:`rule_progress`,
which reads a saved state for a person ("what is it waiting for?").
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.errors import ValidationError

__all__ = [
    "CARRY_MAX",
    "STATE_VERSION",
    "OpenCeis",
    "RuleProgress",
    "RuleStateError",
    "TriggerState",
    "WatchState",
    "carry_list",
    "carry_probe",
    "opt_int",
    "pinged_list",
    "restore_rule_state",
    "rule_progress",
]

STATE_VERSION = 1


class RuleStateError(ValidationError):
    """A stored rule state cannot be restored (unknown rule, wrong kind or version, bad shape)."""


@dataclass(slots=True)
class TriggerState:
    seq: int = 0
    next_fire: int | None = None  # temporal rules: the next fire chronon once anchored
    last_open: int | None = None  # the chronon the last CEI opened (dedupes repeated pings)
    nth_count: int = 0
    open: dict[str, tuple[int, int]] = field(default_factory=dict)  # cei id -> trigger EI window
    since: int | None = None  # the chronon the rule was installed in (None: unknown, no bound)
    baselined: bool = True  # False until the first successful probe of the feed after install
    # Temporal rules: the start chronons (ascending, distinct) of the probes since the rule's last
    # check that found an entry meeting its condition (its baseline's picks, then new entries),
    # for the next check. Persisted with the state; at most CARRY_MAX.
    carry: list[int] = field(default_factory=list)

    def snapshot(self, pinged: list[list[int]]) -> dict[str, Any]:
        """JSON-serialisable, with the rule's last ping per feed (``[[feed, chronon], ...]``)."""
        return {
            "version": STATE_VERSION,
            "kind": "trigger",
            "seq": self.seq,
            "next_fire": self.next_fire,
            "last_open": self.last_open,
            "nth_count": self.nth_count,
            "open": [[cei, s, f] for cei, (s, f) in self.open.items()],
            "since": self.since,
            "baselined": self.baselined,
            "carry": list(self.carry),
            "pinged": pinged,
        }

    @classmethod
    def restore(cls, data: Mapping[str, Any]) -> TriggerState:
        """What :meth:`snapshot` wrote (version and kind checked by the caller); ``KeyError``,
        ``TypeError`` or ``ValueError`` for a malformed one."""
        return cls(
            seq=int(data["seq"]),
            next_fire=opt_int(data["next_fire"]),
            last_open=opt_int(data["last_open"]),
            nth_count=int(data["nth_count"]),
            open={str(c): (int(s), int(f)) for c, s, f in data["open"]},
            # States saved before issue 23 have neither: no bound, baseline taken.
            since=opt_int(data.get("since")),
            baselined=bool(data.get("baselined", True)),
            # States saved before the carry was persisted have none.
            carry=carry_list(data.get("carry", [])),
        )


@dataclass(slots=True)
class WatchState:
    seq: int = 0
    cei_id: str | None = None  # the CEI being built
    alive: bool = True  # False once the engine missed it: keep building, emit nothing
    covered: dict[int, int] = field(default_factory=dict)  # resource -> EI start in the current CEI
    prev_last_start: int = -1  # the last EI start of the previous CEI
    since: int | None = None  # the chronon the rule was installed in: earlier updates are not its

    def snapshot(self, pinged: list[list[int]]) -> dict[str, Any]:
        """JSON-serialisable, with the rule's last ping per feed (``[[feed, chronon], ...]``)."""
        return {
            "version": STATE_VERSION,
            "kind": "watch",
            "seq": self.seq,
            "cei_id": self.cei_id,
            "alive": self.alive,
            "covered": [[r, s] for r, s in self.covered.items()],
            "prev_last_start": self.prev_last_start,
            "since": self.since,
            "pinged": pinged,
        }

    @classmethod
    def restore(cls, data: Mapping[str, Any]) -> WatchState:
        """What :meth:`snapshot` wrote (version and kind checked by the caller); ``KeyError``,
        ``TypeError`` or ``ValueError`` for a malformed one."""
        return cls(
            seq=int(data["seq"]),
            cei_id=None if data["cei_id"] is None else str(data["cei_id"]),
            alive=bool(data["alive"]),
            covered={int(r): int(s) for r, s in data["covered"]},
            prev_last_start=int(data["prev_last_start"]),
            since=opt_int(data.get("since")),
        )


def restore_rule_state(
    rule_id: str, kind: Literal["trigger", "watch"], data: Mapping[str, Any],
) -> tuple[TriggerState | WatchState, dict[int, int]]:
    """A saved state of a rule of ``kind`` read back, and its last ping per feed; checked whole
    before the evaluator changes anything (:class:`RuleStateError` names the rule)."""
    if data.get("version") != STATE_VERSION or data.get("kind") != kind:
        raise RuleStateError(
            f"rule {rule_id!r}: state has version {data.get('version')!r} kind {data.get('kind')!r}, "
            f"expected version {STATE_VERSION} kind {kind!r}"
        )
    try:
        # States saved before pings were stored have none: a ping just before the restart
        # may then be counted again by the probe that confirms it.
        pinged = {int(r): int(t) for r, t in data.get("pinged", [])}
        state = TriggerState.restore(data) if kind == "trigger" else WatchState.restore(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise RuleStateError(f"rule {rule_id!r}: malformed state ({exc!r})") from None
    return state, pinged


def pinged_list(pinged: Mapping[int, int]) -> list[list[int]]:
    """A rule's last ping per feed as saved, ``[[feed, chronon], ...]`` by feed."""
    return [[r, t] for r, t in sorted(pinged.items())]


class OpenCeis:
    """The CEIs the evaluator may still grow or seal, each with the rule that holds it, and
    when a trigger CEI left undecided is swept (its window's end plus ``grace`` chronons:
    the engine has missed it by then, unless a probe that started inside the window is still
    in flight; probes never last this long). A watch rule's CEI is never swept: it is built
    until it is complete or dead."""

    def __init__(self, grace: int) -> None:
        self.grace = grace
        self._rule: dict[str, str] = {}  # open CEI id -> rule id
        self._sweep: list[tuple[int, str]] = []  # (trigger finish + grace, cei id); stale once decided

    def hold(self, cei_id: str, rule_id: str, finish: int | None = None) -> None:
        """``rule_id`` holds ``cei_id`` open; a trigger CEI (``finish``: its window's end) is swept."""
        self._rule[cei_id] = rule_id
        if finish is not None:
            heapq.heappush(self._sweep, (finish + self.grace, cei_id))

    def release(self, cei_id: str) -> str | None:
        """Forget ``cei_id``; the rule that held it, or None if none did."""
        return self._rule.pop(cei_id, None)

    def rule_of(self, cei_id: str) -> str | None:
        return self._rule.get(cei_id)

    def expired(self, t: int) -> Iterator[tuple[str, str]]:
        """``(cei id, rule id)`` of the held trigger CEIs swept before chronon ``t``; the caller
        releases them."""
        while self._sweep and self._sweep[0][0] < t:
            _, cei_id = heapq.heappop(self._sweep)
            rule_id = self._rule.get(cei_id)
            if rule_id is not None:  # else decided, missed or removed meanwhile
                yield cei_id, rule_id

    def ids(self) -> list[str]:
        return sorted(self._rule)

    def __contains__(self, cei_id: object) -> bool:
        return cei_id in self._rule


CARRY_MAX = 64
"""Probes a temporal trigger rule remembers between two checks (``TriggerState.carry``). A
check fires on any of those that started by its own start, so only probes that started
after the check's start and ended before it need more than the oldest: when more than
this many are kept, the second oldest goes (the oldest still fires the next check)."""


def carry_probe(state: TriggerState, started: int) -> None:
    """Remember that a probe started at ``started`` (not yet remembered) found an entry meeting
    the rule's condition. A check reads those of probes that started by its own probe's start
    (probes may end out of order)."""
    bisect.insort(state.carry, started)
    if len(state.carry) > CARRY_MAX:
        del state.carry[1]


def carry_list(value: Any) -> list[int]:
    """A stored carry: ascending distinct chronons, at most ``CARRY_MAX`` (``ValueError`` otherwise)."""
    if not isinstance(value, list):
        raise ValueError(f"carry must be a list, not {type(value).__name__}")
    carry = [int(t) for t in value]
    if carry != sorted(set(carry)) or len(carry) > CARRY_MAX:
        raise ValueError(f"carry must hold at most {CARRY_MAX} ascending distinct chronons: {value!r}")
    return carry


def opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


# --------------------------------------------------------------------------- reading a saved state


@dataclass(frozen=True, slots=True)
class RuleProgress:
    """Where one rule stands, read from its saved state (:func:`rule_progress`): what a user
    asks when a rule has not fired ("what is it waiting for?"). Chronons and feed resources,
    as the evaluator counts them; the service names them in wall time and feed ids.

    Trigger rules: ``next_fire`` the chronon of a temporal rule's next check (``None``: not
    anchored yet, it starts at the next tick; always ``None`` for ``on:`` rules), ``open``
    the CEIs fired and not yet decided (id, trigger window), ``baselined`` False until the
    first successful probe of the feed after the rule was made, ``last_open`` the chronon the
    last CEI opened. Watch rules: ``building`` the CEI being assembled (``None`` between
    two), ``alive`` False once the engine missed it (reported missed, still built silently),
    ``covered`` each feed's update in it, ``after`` the chronon only later updates count after
    (the previous CEI's last update; -1 before the first).
    """

    kind: Literal["trigger", "watch"]
    next_fire: int | None = None
    open: tuple[tuple[str, int, int], ...] = ()
    baselined: bool = True
    last_open: int | None = None
    building: str | None = None
    alive: bool = True
    covered: Mapping[int, int] = field(default_factory=dict)
    after: int = -1


def rule_progress(data: Mapping[str, Any]) -> RuleProgress:
    """Read a :meth:`TriggerEvaluator.snapshot_state` (live, or as stored with the rule);
    :class:`RuleStateError` if it is not one this build writes."""
    kind = data.get("kind")
    if data.get("version") != STATE_VERSION or kind not in ("trigger", "watch"):
        raise RuleStateError(
            f"state has version {data.get('version')!r} kind {kind!r}, expected version {STATE_VERSION}")
    try:
        if kind == "trigger":
            return RuleProgress(
                "trigger", next_fire=opt_int(data["next_fire"]),
                open=tuple(sorted((str(c), int(s), int(f)) for c, s, f in data["open"])),
                baselined=bool(data.get("baselined", True)), last_open=opt_int(data["last_open"]),
            )
        return RuleProgress(
            "watch",
            building=None if data["cei_id"] is None else str(data["cei_id"]), alive=bool(data["alive"]),
            covered={int(r): int(s) for r, s in data["covered"]}, after=int(data["prev_last_start"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RuleStateError(f"malformed state ({exc!r})") from None
