"""What the trigger evaluator exchanges with the rest of the proxy: entries in, engine operations out.

The operations are small frozen values (style.md §2) that the service applies
to the engine with :func:`apply_ops` and persists. :class:`ChrononMapping` is
the chronon clock the service already has (``proxy.service.clock``), reduced to
the arithmetic the evaluator needs; nothing here reads the time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

__all__ = [
    "MAX_MATCHED",
    "ChrononGrid",
    "ChrononMapping",
    "EnginePort",
    "EntryFields",
    "EntryLike",
    "MatchedEntry",
    "Op",
    "OpenCei",
    "RevealEi",
    "SealCei",
    "apply_ops",
    "first_chronon_from",
]


class EntryFields(Protocol):
    """The entry fields a condition reads (:mod:`proxy.rules.matching`; the feed layer's
    ``Entry`` satisfies it). Every one may be absent: ``None`` (or an empty ``categories``)
    reads as no text."""

    @property
    def title(self) -> str | None: ...

    @property
    def summary(self) -> str | None: ...

    @property
    def content(self) -> str | None: ...

    @property
    def link(self) -> str | None: ...

    @property
    def author(self) -> str | None: ...

    @property
    def categories(self) -> tuple[str, ...]: ...


class EntryLike(EntryFields, Protocol):
    """What the evaluator reads from a new entry: the fields a condition reads, and
    ``published`` (timezone-aware, or ``None`` when the feed gives none), which dates
    the update a probe discovered (:func:`proxy.rules.updates.estimate_update_chronon`).
    """

    @property
    def published(self) -> datetime | None: ...


@dataclass(frozen=True, slots=True)
class MatchedEntry:
    """A new entry that made a rule fire, and what in it matched (issue 43: "what matched
    is told"). ``resource`` is the feed it was found on; ``kind``, ``field`` and ``text`` are
    :class:`proxy.rules.matching.Match`'s (``kind="any"``: the rule has no keyword nor regex,
    every new entry counts)."""

    resource: int
    title: str | None
    link: str | None
    published: datetime | None
    kind: str
    field: str | None
    text: str | None


#: At most this many matched entries ride on one operation (the notification lists them).
MAX_MATCHED = 20


class EnginePort(Protocol):
    """The part of ``proxy.core.engine.Engine`` that :func:`apply_ops` drives."""

    def add_cei(
        self, cei_id: str, profile: str, eis: Sequence[tuple[int, int, int]], *, sealed: bool = True
    ) -> None: ...

    def reveal_ei(self, cei_id: str, resource: int, start: int, finish: int, *, seal: bool = False) -> int: ...

    def seal(self, cei_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class OpenCei:
    """Release a new CEI now: ``engine.add_cei(cei_id, profile_id, eis, sealed=sealed)``."""

    cei_id: str
    profile_id: str
    rule_id: str
    eis: tuple[tuple[int, int, int], ...]  # (resource, start, finish)
    sealed: bool
    # Whether the CEI already counts as fired (its rule's condition held): a watch CEI's
    # EIs are updates, so it has; a trigger CEI fires when its query EIs join (issue 23).
    # Not part of equality: it is bookkeeping for the store, not an engine operation.
    fired: bool = field(default=False, compare=False)
    # The entries that made the rule fire, told with this operation (bookkeeping, as fired):
    # a watch rule's update whose feed has a ``when``.
    matched: tuple[MatchedEntry, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class RevealEi:
    """An EI joins an open CEI: ``engine.reveal_ei(cei_id, resource, start, finish, seal=seal)``."""

    cei_id: str
    resource: int
    start: int
    finish: int
    seal: bool
    # The entries that made the rule fire, told with this operation (bookkeeping, not part of
    # equality): a trigger's matching entries ride on its first query EI, a watch rule's on
    # the EI of the update they made count.
    matched: tuple[MatchedEntry, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class SealCei:
    """No EI will join this CEI any more: ``engine.seal(cei_id)``."""

    cei_id: str
    # A single-feed alert fires by its seal (its rule's condition held), having no query
    # EI to reveal. Not part of equality: bookkeeping for the store, as OpenCei.fired.
    fired: bool = field(default=False, compare=False)
    # A single-feed alert's matching entries (bookkeeping, as fired).
    matched: tuple[MatchedEntry, ...] = field(default=(), compare=False)


Op = OpenCei | RevealEi | SealCei


def apply_ops(engine: EnginePort, ops: Iterable[Op]) -> None:
    """Apply evaluator operations to the engine, in order (the service also persists them)."""
    for op in ops:
        if isinstance(op, OpenCei):
            engine.add_cei(op.cei_id, op.profile_id, op.eis, sealed=op.sealed)
        elif isinstance(op, RevealEi):
            engine.reveal_ei(op.cei_id, op.resource, op.start, op.finish, seal=op.seal)
        else:
            engine.seal(op.cei_id)


class ChrononMapping(Protocol):
    """Chronons ↔ instants: chronon ``t`` covers ``[start_of(t), start_of(t + 1))``.

    ``proxy.service.clock.ChrononClock`` satisfies it (the service passes its
    own clock); :class:`ChrononGrid` is a plain implementation for tests and
    the simulator. The evaluator only does arithmetic with it, never asks the time.
    """

    @property
    def length(self) -> float: ...

    def chronon_at(self, when: datetime) -> int: ...

    def start_of(self, t: int) -> datetime: ...


@dataclass(frozen=True, slots=True)
class ChrononGrid:
    """A :class:`ChrononMapping` from an origin (the start of chronon 0) and a length in seconds."""

    origin: datetime
    length: float = 60.0

    def __post_init__(self) -> None:
        if self.origin.tzinfo is None:
            raise ValueError("ChrononGrid.origin must be timezone-aware (UTC recommended)")
        if not (self.length > 0 and math.isfinite(self.length)):
            raise ValueError(f"chronon length must be a positive number of seconds, got {self.length!r}")

    def start_of(self, t: int) -> datetime:
        return self.origin + timedelta(seconds=t * self.length)

    def chronon_at(self, when: datetime) -> int:
        return math.floor(round((when - self.origin).total_seconds() / self.length, 9))


def first_chronon_from(clock: ChrononMapping, moment: datetime) -> int:
    """The first chronon that begins at or after ``moment``."""
    c = clock.chronon_at(moment)
    return c if clock.start_of(c) >= moment else c + 1
