"""What the evaluator tells with its operations (issue 43): new entries matched once per
probe against their feed's :class:`~proxy.rules.matching.KeywordIndex`, and the entries
that made a rule fire (issue 46: the evaluator split by purpose).
"""

from __future__ import annotations

import dataclasses

from proxy.rules.matching import KeywordIndex, Match
from proxy.rules.ports import MAX_MATCHED, EntryLike, MatchedEntry, Op, OpenCei, RevealEi

__all__ = ["ANY", "Prepared", "matching", "telling", "told"]

#: What a rule without keywords nor regex makes of any new entry: it counts.
ANY = Match("any")


class Prepared:
    """A new entry, matched once per probe against its feed's :class:`KeywordIndex`, however
    many rules read it (issue 43: one automaton per feed, not a loop over rules)."""

    __slots__ = ("_matches", "entry")

    def __init__(self, entry: EntryLike) -> None:
        self.entry = entry
        self._matches: dict[str, Match] | None = None

    def matches(self, index: KeywordIndex[str]) -> dict[str, Match]:
        if self._matches is None:
            self._matches = index.match(self.entry)
        return self._matches


def telling(ops: list[Op], matched: tuple[MatchedEntry, ...]) -> list[Op]:
    """``ops`` with ``matched`` told by the first one that opens or grows a CEI (a watch rule's
    update: the entries that made it count)."""
    for i, op in enumerate(ops):
        if isinstance(op, OpenCei | RevealEi):
            ops[i] = dataclasses.replace(op, matched=matched)
            break
    return ops


def matching(rule_id: str, index: KeywordIndex[str] | None, entries: list[Prepared]) -> list[Prepared]:
    """The entries that meet rule ``rule_id``'s condition in its feed's ``index`` (every entry
    when ``index`` is None: the rule picks no entries by keywords nor regex)."""
    if index is None:
        return entries
    return [e for e in entries if rule_id in e.matches(index)]


def told(
    rule_id: str, index: KeywordIndex[str] | None, resource: int, entries: list[Prepared]
) -> tuple[MatchedEntry, ...]:
    """The first :data:`~proxy.rules.ports.MAX_MATCHED` entries meeting rule ``rule_id``'s
    condition, with what matched (``kind="any"`` for every entry when ``index`` is None)."""
    out: list[MatchedEntry] = []
    for e in entries:
        m = ANY if index is None else e.matches(index).get(rule_id)
        if m is None:
            continue
        entry = e.entry
        # getattr, as matching.entry_text: an entry may lack a field (tests', the simulator's).
        out.append(MatchedEntry(resource, getattr(entry, "title", None), getattr(entry, "link", None),
                                entry.published, m.kind, m.field, m.text))
        if len(out) == MAX_MATCHED:
            break
    return tuple(out)
