"""Which entries a rule's ``when`` matches, and what matched: keywords, phrases, a regex.

Pure functions of an entry and a condition: no I/O, no clock. Counting for
``every_nth`` is the evaluator's job; this module only says whether one entry
matches and, when it does, what matched (for the notification).

**Fields.** A condition reads the entry fields listed in its ``fields``
(default ``title`` and ``summary``). The feed layer fills them from feedparser
(or the fast parser, which agrees with it on these documents):

=============  ===============================  ==========================================
field          RSS 2.0                          Atom 1.0
=============  ===============================  ==========================================
``title``      ``<title>``                      ``<title>``
``summary``    ``<description>``                ``<summary>``
``content``    ``<content:encoded>``            ``<content>``
``link``       ``<link>`` (else a permalink     ``<link rel="alternate" href>`` (or a
               ``<guid>``)                      ``<link>`` without ``rel``)
``author``     ``<author>`` or ``<dc:creator>`` ``<author><name>`` (and its email)
``categories`` each ``<category>``              each ``<category term>``
=============  ===============================  ==========================================

Categories are joined into one text with ``"\\x00"`` (never whitespace, never
a word character, refused in keywords) so a phrase cannot span two
categories; for ``regex`` they are joined with ``"\\n"``, so ``(?m)^oil$``
means "a category is exactly oil". Each text is capped at
:data:`proxy.rules._regex.MAX_TEXT` characters.

**Keywords** (``contains``, ``all``, ``exclude``). The text of a field and the
keyword are both Unicode case-folded (:meth:`str.casefold`: "ÖL" is "öl",
"STRASSE" and "straße" are both "strasse") and whitespace-normalized (every
run of whitespace, as :meth:`str.split` sees it, becomes one space, leading
and trailing whitespace goes). A keyword of several words ("crude oil") is a
phrase: its words in that order, any run of whitespace between them. A
keyword matches **whole-word**: on each side where the keyword's own end
character is a word character, the folded text's neighbouring character (if
any) must not be one, a *word character* being one for which
``ch.isalnum() or ch == "_"``. So "oil" matches "Oil," "(oil)" and "oil-price"
but not "soil", "oily" or "oil_price"; "c++" needs a boundary before the
``c`` only, so it matches "C++11" but not "abc++"; "++" (no word character at
either end) matches anywhere as a substring. Boundaries are judged on the
folded text (a ligature "ﬁ" folds to "fi", two word characters).

**An entry matches** a condition when every given part holds:

* ``contains``: at least one of the keywords occurs in some selected field;
* ``all``: each keyword occurs in some selected field (not necessarily the same);
* ``exclude``: no keyword occurs in any selected field;
* ``regex``: an RE2 search finds it in some selected field's *original* text
  (not folded nor normalized: write ``(?i)`` for case-insensitivity).

A condition with only ``exclude`` (or only ``every_nth``) matches every entry
without an excluded keyword (every entry).

**What matched** (:class:`Match`) is the first positive part, in this order:
the first keyword of ``contains`` (in the order written) that occurs, with the
first selected field (in ``fields`` order) it occurs in; else the first
keyword of ``all``; else ``regex`` with the first field it is found in; else
nothing positive (``kind="any"``). The keyword is reported as written.

:class:`KeywordIndex` matches one entry against many rules of a feed at once
(one Aho–Corasick automaton over every keyword, scanned once per field) and
gives exactly what :meth:`Condition.match` gives rule by rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, Literal, TypeVar

import ahocorasick

from proxy.rules._regex import MAX_TEXT, CompiledRegex, compile_safe_regex
from proxy.rules.ports import EntryFields

if TYPE_CHECKING:
    from proxy.rules.schemas import ConditionSpec

__all__ = [
    "DEFAULT_FIELDS",
    "FIELDS",
    "Condition",
    "EntryFields",
    "KeywordIndex",
    "Match",
    "entry_text",
    "normalize_text",
]

FieldName = Literal["title", "summary", "content", "link", "author", "categories"]
#: The entry fields a condition may read, in the order their texts are prepared.
FIELDS: tuple[FieldName, ...] = ("title", "summary", "content", "link", "author", "categories")
DEFAULT_FIELDS: tuple[FieldName, ...] = ("title", "summary")

# Joins categories for keywords: neither whitespace nor a word character (see the docstring).
_CATEGORY_JOIN = "\x00"
# A maximal run of word characters. For str patterns CPython's re takes a word character to be
# exactly ``ch.isalnum() or ch == "_"`` (_sre's SRE_UNI_IS_WORD), our definition: a keyword made
# of word characters only occurs whole-word exactly where it is one of these runs.
_WORD_RUN = re.compile(r"\w+")


def normalize_text(text: str) -> str:
    """Case-folded, each whitespace run one space, no leading or trailing whitespace."""
    return " ".join(text.casefold().split())


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def entry_text(entry: EntryFields, field: FieldName, *, for_regex: bool = False) -> str:
    """The original text of one field (capped), as keywords (``for_regex=False``) or regex read it."""
    if field == "categories":
        cats = getattr(entry, "categories", None) or ()
        text = ("\n" if for_regex else _CATEGORY_JOIN).join(cats)
    else:
        text = getattr(entry, field, None) or ""
    return text[:MAX_TEXT]


@dataclass(frozen=True, slots=True)
class Match:
    """What made an entry match a condition, for the notification ("matched 'oil' in title").

    ``kind`` is the part that matched; ``field`` the entry field; ``text`` the
    keyword as the rule wrote it, or the regex pattern. ``kind="any"`` (a
    condition with only ``exclude`` or ``every_nth``) has neither.
    """

    kind: Literal["contains", "all", "regex", "any"]
    field: FieldName | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class _Keyword:
    written: str  # as the rule wrote it (stripped), for Match.text
    folded: str  # normalize_text(written): what is searched
    left: bool  # a boundary is needed before it (its first character is a word character)
    right: bool  # ... and after it

    @classmethod
    def of(cls, written: str) -> _Keyword:
        folded = normalize_text(written)
        if not folded:
            raise ValueError(f"keyword {written!r} is empty once whitespace is removed")
        return cls(written, folded, _is_word(folded[0]), _is_word(folded[-1]))

    def at(self, text: str, end: int) -> bool:
        """Whether the occurrence ending at index ``end`` (inclusive) is whole-word."""
        start = end - len(self.folded) + 1
        if self.left and start > 0 and _is_word(text[start - 1]):
            return False
        return not (self.right and end + 1 < len(text) and _is_word(text[end + 1]))

    def occurs_in(self, text: str) -> bool:
        """The reference search (str.find at every start): no automaton."""
        start = text.find(self.folded)
        while start >= 0:
            if self.at(text, start + len(self.folded) - 1):
                return True
            start = text.find(self.folded, start + 1)
        return False


class Condition:
    """A compiled ``when``: :meth:`match` one entry (``every_nth`` is counted by the evaluator)."""

    __slots__ = ("all", "contains", "every_nth", "exclude", "fields", "regex")

    def __init__(
        self,
        *,
        contains: Iterable[str] = (),
        all: Iterable[str] = (),  # the schema's name for it (shadows the builtin here only)
        exclude: Iterable[str] = (),
        regex: str | None = None,
        fields: Iterable[FieldName] = DEFAULT_FIELDS,
        every_nth: int | None = None,
    ) -> None:
        self.contains = tuple(_Keyword.of(k) for k in contains)
        self.all = tuple(_Keyword.of(k) for k in all)
        self.exclude = tuple(_Keyword.of(k) for k in exclude)
        self.regex: CompiledRegex | None = None if regex is None else compile_safe_regex(regex)
        self.fields: tuple[FieldName, ...] = tuple(dict.fromkeys(fields))
        unknown = [f for f in self.fields if f not in FIELDS]
        if unknown or not self.fields:
            raise ValueError(f"fields must be a non-empty subset of {FIELDS}, got {self.fields}")
        self.every_nth = every_nth

    @classmethod
    def from_spec(cls, spec: ConditionSpec) -> Condition:
        """Compile a validated ``when``."""
        return cls(
            contains=spec.contains or (),
            all=spec.all or (),
            exclude=spec.exclude or (),
            regex=spec.regex,
            fields=spec.selected_fields,  # type: ignore[arg-type]  # validated names of FIELDS
            every_nth=spec.every_nth,
        )

    def __repr__(self) -> str:
        parts = [
            f"{name}={[k.written for k in getattr(self, name)]!r}"
            for name in ("contains", "all", "exclude")
            if getattr(self, name)
        ]
        if self.regex is not None:
            parts.append(f"regex={self.regex.pattern!r}")
        return f"Condition({', '.join([*parts, f'fields={list(self.fields)!r}'])})"

    def match(self, entry: EntryFields) -> Match | None:
        """What matched in ``entry`` (see the module docstring), or ``None`` if it does not match."""
        folded: dict[FieldName, str] = {}

        def text(field: FieldName) -> str:
            if field not in folded:
                folded[field] = normalize_text(entry_text(entry, field))
            return folded[field]

        def first_field(keyword: _Keyword) -> FieldName | None:
            return next((f for f in self.fields if keyword.occurs_in(text(f))), None)

        return self._decide(_RawTexts(entry), first_field)

    def _decide(
        self, raw: _RawTexts, first_field: Callable[[_Keyword], FieldName | None]
    ) -> Match | None:
        # The reference order of the parts; KeywordIndex.match inlines the same steps on its hits.
        if any(first_field(k) is not None for k in self.exclude):
            return None
        found: Match | None = None
        if self.contains:
            for keyword in self.contains:
                field = first_field(keyword)
                if field is not None:
                    found = Match("contains", field, keyword.written)
                    break
            else:
                return None
        for keyword in self.all:
            field = first_field(keyword)
            if field is None:
                return None
            if found is None:
                found = Match("all", field, keyword.written)
        if self.regex is not None:
            regex = self.regex
            field = next((f for f in self.fields if regex.search(raw.text(f))), None)
            if field is None:
                return None
            if found is None:
                found = Match("regex", field, regex.pattern)
        return found if found is not None else Match("any")


class _RawTexts:
    """An entry's original texts as regexes read them, each prepared once however many rules ask."""

    __slots__ = ("_entry", "_texts")

    def __init__(self, entry: EntryFields) -> None:
        self._entry = entry
        self._texts: dict[FieldName, str] = {}

    def text(self, field: FieldName) -> str:
        text = self._texts.get(field)
        if text is None:
            text = self._texts[field] = entry_text(self._entry, field, for_regex=True)
        return text


_BIT: Mapping[FieldName, int] = {f: 1 << i for i, f in enumerate(FIELDS)}
_FIELD_OF_BIT: Mapping[int, FieldName] = {1 << i: f for i, f in enumerate(FIELDS)}


class _Rule:
    """A condition flattened for :meth:`KeywordIndex.match`'s inner loop (the same semantics)."""

    __slots__ = ("all", "condition", "contains", "exclude", "mask", "order", "regex", "simple")

    def __init__(self, condition: Condition) -> None:
        self.condition = condition
        self.mask = 0  # bit i: FIELDS[i] is selected
        for field in condition.fields:
            self.mask |= _BIT[field]
        self.contains = tuple((k.folded, k.written) for k in condition.contains)
        self.all = tuple((k.folded, k.written) for k in condition.all)
        self.exclude = tuple(k.folded for k in condition.exclude)
        self.regex = condition.regex
        # None: the fields are in FIELDS order, so the first one a keyword occurs in is the
        # lowest bit of its mask; else the (bit, field) pairs in the rule's order.
        canonical = list(condition.fields) == [f for f in FIELDS if f in condition.fields]
        self.order = None if canonical else tuple((_BIT[f], f) for f in condition.fields)
        # Only contains (and exclude), in FIELDS order: it matches when no exclude keyword hits
        # and what matched is the first contains keyword that does: decided by set operations.
        self.simple = bool(canonical and self.contains and not self.all and self.regex is None)

    def first(self, where: int) -> FieldName:
        """The rule's first field in the (non-empty) field mask ``where``."""
        if self.order is None:
            return _FIELD_OF_BIT[where & -where]
        return next(f for bit, f in self.order if where & bit)


RuleId = TypeVar("RuleId", bound=Hashable)
K1 = TypeVar("K1", bound=Hashable)
K2 = TypeVar("K2", bound=Hashable)


def _discard(index: dict[K1, dict[K2, set[RuleId]]], outer: K1, inner: K2, rule_id: RuleId) -> None:
    """Take ``rule_id`` out of ``index[outer][inner]``, dropping what it leaves empty."""
    groups = index[outer]
    groups[inner].discard(rule_id)
    if not groups[inner]:
        del groups[inner]
        if not groups:
            del index[outer]


class KeywordIndex(Generic[RuleId]):
    """Many rules' conditions on one feed, matched together: one scan of each field per entry.

    Every keyword of every rule (``contains``, ``all`` and ``exclude``) is a key of
    one Aho–Corasick automaton (pyahocorasick), rebuilt lazily on the first
    :meth:`match` after an :meth:`add` or :meth:`remove`; once there are
    :attr:`word_runs_from` single-word keywords, those are found instead as the
    text's runs of word characters that are keywords (one set intersection, in C:
    a whole-word occurrence of a word is exactly such a run), and the automaton
    keeps the phrases and the keywords with other characters. :meth:`match` folds
    each field some rule reads once, scans it once, keeps the whole-word hits,
    and evaluates only the rules reached from a hit keyword through an inverted
    index (keyword → rules with it in ``contains`` or ``all``), plus the rules
    with neither (only ``exclude``/``regex``/``every_nth``), which are checked
    directly. *Simple* rules (only ``contains`` and ``exclude``, fields in the
    order of :data:`FIELDS`), most rules, are never evaluated one by one: they
    sit in groups by (keyword, its position in ``contains``, fields), and a hit
    keyword decides each group it heads at once, the earliest position winning
    (what matched is a rule's first ``contains`` keyword that occurs); the rules
    an ``exclude`` hit rules out are one set union, taken away at the end. The
    result is what each rule's :meth:`Condition.match` would give (a property
    test holds it to that).

    Adding or removing a rule costs its keywords, not the index's size; the
    automaton is then rebuilt on the next :meth:`match` (about a second for
    50,000 rules, ``docs/bench-rules.md``), so batch changes between entries.
    """

    word_runs_from: ClassVar[int] = 6000
    """How many single-word keywords make finding them by the text's word runs pay: a fixed
    cost per entry (``docs/bench-rules.md``), where the automaton's grows with its keywords."""

    def __init__(self) -> None:
        self._rules: dict[RuleId, _Rule] = {}
        # folded keyword → the rules reached through it that must be evaluated (contains/all)
        self._positive: dict[str, set[RuleId]] = {}
        # folded keyword → (its position in contains, field mask, as written) → the *simple*
        # rules (only contains and exclude, fields in FIELDS order) with it there: a hit decides
        # them all at once, with one shared Match, unless an earlier keyword of theirs hit too.
        self._groups: dict[str, dict[tuple[int, int, str], set[RuleId]]] = {}
        # folded keyword → field mask → the simple rules that exclude it
        self._excluders: dict[str, dict[int, set[RuleId]]] = {}
        self._depth = 0  # the most contains keywords of a simple rule added (positions to order)
        self._uses: dict[str, int] = {}  # folded keyword → uses of any kind: the automaton's keys
        self._unindexed: set[RuleId] = set()  # rules with no contains/all keyword
        self._automaton: ahocorasick.Automaton | None = None
        # The keywords of word characters only, found by the text's word runs, not the automaton.
        self._words: frozenset[str] = frozenset()
        self._field_uses = [0] * len(FIELDS)  # how many rules read each field
        self._matches: dict[tuple[str, FieldName, str], Match] = {}

    def __len__(self) -> int:
        return len(self._rules)

    def __contains__(self, rule_id: object) -> bool:
        return rule_id in self._rules

    @staticmethod
    def _routes(rule: _Rule) -> tuple[list[tuple[str, tuple[int, int, str]]], list[str], set[str]]:
        """How a rule is reached: a simple rule's groups and excluded keywords, or the keywords
        to evaluate another rule from."""
        condition = rule.condition
        if rule.simple:
            groups = [(k.folded, (i, rule.mask, k.written)) for i, k in enumerate(condition.contains)]
            return groups, list(dict.fromkeys(k.folded for k in condition.exclude)), set()
        return [], [], {k.folded for k in (*condition.contains, *condition.all)}

    def add(self, rule_id: RuleId, condition: Condition) -> None:
        """Index ``condition`` under ``rule_id`` (replacing the rule's previous one)."""
        if rule_id in self._rules:
            self.remove(rule_id)
        rule = self._rules[rule_id] = _Rule(condition)
        groups, excluded, positive = self._routes(rule)
        for folded, key in groups:
            self._groups.setdefault(folded, {}).setdefault(key, set()).add(rule_id)
        for folded in excluded:
            self._excluders.setdefault(folded, {}).setdefault(rule.mask, set()).add(rule_id)
        self._depth = max(self._depth, len(groups))
        for folded in positive:
            self._positive.setdefault(folded, set()).add(rule_id)
        if not groups and not positive:
            self._unindexed.add(rule_id)
        for keyword in (*condition.contains, *condition.all, *condition.exclude):
            self._uses[keyword.folded] = self._uses.get(keyword.folded, 0) + 1
        for i, field in enumerate(FIELDS):
            self._field_uses[i] += field in condition.fields
        self._automaton = None

    def remove(self, rule_id: RuleId) -> None:
        """Forget ``rule_id``; a rule not in the index is ignored."""
        rule = self._rules.pop(rule_id, None)
        if rule is None:
            return
        condition = rule.condition
        groups, excluded, positive = self._routes(rule)
        for folded, key in groups:
            _discard(self._groups, folded, key, rule_id)
        for folded in excluded:
            _discard(self._excluders, folded, rule.mask, rule_id)
        for folded in positive:
            users = self._positive[folded]
            users.discard(rule_id)
            if not users:
                del self._positive[folded]
        for keyword in (*condition.contains, *condition.all, *condition.exclude):
            left = self._uses[keyword.folded] - 1
            if left:
                self._uses[keyword.folded] = left
            else:
                del self._uses[keyword.folded]
        for i, field in enumerate(FIELDS):
            self._field_uses[i] -= field in condition.fields
        self._unindexed.discard(rule_id)
        self._matches.clear()  # bounded by the keywords indexed now
        self._automaton = None

    def _build(self) -> ahocorasick.Automaton:
        """The automaton over the keywords; with many single-word ones, those go to ``_words``."""
        automaton = ahocorasick.Automaton()
        words = [folded for folded in self._uses if _WORD_RUN.fullmatch(folded)]
        if len(words) < self.word_runs_from:
            words = []
        apart = set(words)
        for folded in self._uses:
            if folded in apart:
                continue
            keyword = _Keyword.of(folded)
            automaton.add_word(folded, (folded, keyword.left, keyword.right, len(folded)))
        if len(automaton):
            automaton.make_automaton()
        self._words = frozenset(words)
        return automaton

    def match(self, entry: EntryFields) -> dict[RuleId, Match]:
        """Every rule whose condition ``entry`` matches, with what matched."""
        if not self._rules:
            return {}
        automaton = self._automaton
        if automaton is None:
            automaton = self._automaton = self._build()
        scan = len(automaton) > 0
        words = self._words
        hits: dict[str, int] = {}  # folded keyword → mask of the fields it occurs in
        for field, readers in zip(FIELDS, self._field_uses, strict=True):
            bit = _BIT[field]
            if not readers or not (scan or words):
                continue
            text = normalize_text(entry_text(entry, field))
            if not text:
                continue
            if words:
                # Single-word keywords: a set intersection with the text's word runs, in C,
                # rather than an automaton hit and two boundary checks in Python each.
                for folded in words.intersection(_WORD_RUN.findall(text)):
                    hits[folded] = hits.get(folded, 0) | bit
            if not scan:
                continue
            last = len(text) - 1
            for end, (folded, left, right, size) in automaton.iter(text):
                start = end - size + 1
                if left and start > 0:
                    ch = text[start - 1]
                    if ch.isalnum() or ch == "_":
                        continue
                if right and end < last:
                    ch = text[end + 1]
                    if ch.isalnum() or ch == "_":
                        continue
                hits[folded] = hits.get(folded, 0) | bit
        out: dict[RuleId, Match] = {}
        raw = _RawTexts(entry)
        rules = self._rules
        hit = hits.get
        field_of_bit = _FIELD_OF_BIT
        # Matches are immutable values: one object per (kind, field, keyword) serves every rule
        # and entry (a frozen dataclass costs ~1 µs to make, and an entry may match hundreds).
        made = self._matches
        made_get = made.get
        candidates: set[RuleId] = set(self._unindexed)
        positive, all_groups, excluders = self._positive, self._groups, self._excluders
        # The simple rules: each hit group, by the position of its keyword in the rules'
        # contains; later positions are applied first, so a rule's earliest hit keyword wins.
        layers: list[list[tuple[int, str, set[RuleId]]]] = [[] for _ in range(self._depth)]
        excluded: set[RuleId] = set()
        for folded, where_any in hits.items():
            groups = all_groups.get(folded)
            if groups:
                for (pos, mask, written), rule_ids in groups.items():
                    where = where_any & mask
                    if where:
                        layers[pos].append((where, written, rule_ids))
            against = excluders.get(folded)
            if against:
                for mask, rule_ids in against.items():
                    if where_any & mask:
                        excluded |= rule_ids
            users = positive.get(folded)
            if users:
                candidates |= users
        for layer in reversed(layers):
            for where, written, rule_ids in layer:
                field = field_of_bit[where & -where]
                key = ("contains", field, written)
                found = made_get(key)
                if found is None:
                    found = made[key] = Match("contains", field, written)
                out.update(dict.fromkeys(rule_ids, found))
        if excluded and out:
            for rule_id in excluded:
                out.pop(rule_id, None)
        # The inner loop of Condition._decide on the hits, without a call per keyword: the
        # property test in tests/test_rules_matching.py holds the two to the same answers.
        for rule_id in candidates:
            rule = rules[rule_id]
            mask = rule.mask
            if rule.exclude and any(hit(k, 0) & mask for k in rule.exclude):
                continue
            found = None
            if rule.contains:
                for folded, written in rule.contains:
                    where = hit(folded, 0) & mask
                    if where:
                        field = field_of_bit[where & -where] if rule.order is None else rule.first(where)
                        key = ("contains", field, written)
                        found = made_get(key)
                        if found is None:
                            found = made[key] = Match("contains", field, written)
                        break
                else:
                    continue
            missing = False
            for folded, written in rule.all:
                where = hit(folded, 0) & mask
                if not where:
                    missing = True
                    break
                if found is None:
                    found = Match("all", rule.first(where), written)
            if missing:
                continue
            regex = rule.regex
            if regex is not None:
                searched: FieldName | None = next(
                    (f for f in rule.condition.fields if regex.search(raw.text(f))), None
                )
                if searched is None:
                    continue
                if found is None:
                    found = Match("regex", searched, regex.pattern)
            out[rule_id] = found if found is not None else Match("any")
        return out
