"""proxy.rules.matching: whole-word keywords and phrases, the parts of `when`, what matched,
and the per-feed KeywordIndex giving exactly what each rule's Condition gives."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.rules.matching import (
    FIELDS,
    Condition,
    FieldName,
    KeywordIndex,
    Match,
    normalize_text,
)
from proxy.rules.schemas import ConditionSpec


@dataclass(frozen=True)
class E:
    title: str | None = None
    summary: str | None = None
    content: str | None = None
    link: str | None = None
    author: str | None = None
    categories: tuple[str, ...] = ()


def _kw(keyword: str, text: str) -> bool:
    return Condition(contains=[keyword]).match(E(title=text)) is not None


@pytest.mark.parametrize(
    ("keyword", "text", "matches"),
    [
        ("oil", "Oil, prices up", True),
        ("oil", "prices (oil) up", True),
        ("oil", "oil-price", True),
        ("oil", "oil.", True),
        ("oil", "soil erosion", False),
        ("oil", "oily rags", False),
        ("oil", "oil_price", False),
        ("oil", "oil2", False),
        ("oil", "soil and oil", True),  # a later occurrence is whole-word
        ("OIL", "crude oil", True),
        ("ÖL", "Das öl ist teuer", True),
        ("öl", "HEIZÖL", False),
        ("straße", "STRASSE gesperrt", True),
        ("STRASSE", "die Straße", True),
        ("crude oil", "Crude   Oil rises", True),
        ("crude oil", "crude\n\toil", True),
        ("crude  oil", "crude oil", True),  # the keyword's whitespace is normalized too
        ("crude oil", "crude-oil", False),  # a phrase is words separated by whitespace
        ("crude oil", "crude oils", False),
        ("c++", "Learning C++11 today", True),  # no boundary needed after '+'
        ("c++", "abc++", False),  # but one before 'c'
        ("c++", "(c++)", True),
        ("++", "a++b", True),  # no word character at either end: a substring
        ("#rust", "love #Rust!", True),
        ("#rust", "love#rust", True),  # '#' is not a word character: no boundary needed before it
        ("#rust", "#rusty", False),
        ("naïve", "NAÏVE approach", True),
        ("日本", "東京 日本 ニュース", True),
        ("日本", "日本語", False),  # CJK letters are word characters
    ],
)
def test_keywords_match_whole_words(keyword: str, text: str, matches: bool) -> None:
    assert _kw(keyword, text) is matches


@pytest.mark.parametrize(
    ("condition", "entry", "expected"),
    [
        # contains: any of; the first keyword as written, with its first field in fields order
        (Condition(contains=["gas", "Oil"]), E(title="oil", summary="gas"), Match("contains", "summary", "gas")),
        (Condition(contains=["Oil", "gas"]), E(title="oil", summary="gas"), Match("contains", "title", "Oil")),
        (Condition(contains=["oil"], fields=["summary", "title"]), E(title="oil", summary="oil"),
         Match("contains", "summary", "oil")),
        (Condition(contains=["oil"]), E(content="oil"), None),  # content is not a default field
        (Condition(contains=["oil"], fields=["content"]), E(content="oil"), Match("contains", "content", "oil")),
        # all: each somewhere, not necessarily the same field
        (Condition(all=["oil", "opec"]), E(title="oil", summary="OPEC meets"), Match("all", "title", "oil")),
        (Condition(all=["oil", "opec"]), E(title="oil"), None),
        (Condition(contains=["gas"], all=["oil"]), E(title="oil gas"), Match("contains", "title", "gas")),
        (Condition(contains=["gas"], all=["oil"]), E(title="gas"), None),
        # exclude: none anywhere selected
        (Condition(contains=["oil"], exclude=["olive"]), E(title="oil", summary="olive oil"), None),
        (Condition(contains=["oil"], exclude=["olive"]), E(title="oil", content="olive"),
         Match("contains", "title", "oil")),
        (Condition(exclude=["sport"]), E(title="news"), Match("any")),
        (Condition(exclude=["sport"]), E(title="Sport!"), None),
        (Condition(every_nth=3), E(), Match("any")),
        # regex: on the original text, some selected field
        (Condition(regex=r"\bBrent\b"), E(summary="Brent crude"), Match("regex", "summary", r"\bBrent\b")),
        (Condition(regex=r"\bbrent\b"), E(summary="Brent crude"), None),
        (Condition(regex=r"(?i)\bbrent\b"), E(summary="Brent crude"), Match("regex", "summary", r"(?i)\bbrent\b")),
        (Condition(contains=["crude"], regex="Brent"), E(title="crude", summary="Brent"),
         Match("contains", "title", "crude")),
        (Condition(contains=["crude"], regex="WTI"), E(title="crude", summary="Brent"), None),
        # the other fields
        (Condition(contains=["oil"], fields=["link"]), E(link="https://ex.org/oil-prices"), Match("contains", "link", "oil")),
        (Condition(contains=["reuters"], fields=["author"]), E(author="Jane Doe (Reuters)"),
         Match("contains", "author", "reuters")),
        (Condition(contains=["energy"], fields=["categories"]), E(categories=("Markets", "Energy")),
         Match("contains", "categories", "energy")),
        (Condition(contains=["markets energy"], fields=["categories"]), E(categories=("Markets", "Energy")), None),
        (Condition(regex="(?m)^Energy$", fields=["categories"]), E(categories=("Markets", "Energy")),
         Match("regex", "categories", "(?m)^Energy$")),
    ],
)
def test_parts_and_what_matched(condition: Condition, entry: E, expected: Match | None) -> None:
    assert condition.match(entry) == expected
    index: KeywordIndex[str] = KeywordIndex()
    index.add("r", condition)
    assert index.match(entry) == ({} if expected is None else {"r": expected})


def test_condition_from_spec() -> None:
    spec = ConditionSpec.model_validate(
        {"contains": [" Crude Oil "], "exclude": ["olive"], "fields": ["content", "title"], "every_nth": 2}
    )
    cond = Condition.from_spec(spec)
    assert cond.fields == ("content", "title") and cond.every_nth == 2
    assert cond.match(E(content="crude  OIL")) == Match("contains", "content", "Crude Oil")


def test_normalize_text() -> None:
    assert normalize_text("  Straße\u00a0\tÖL\n ") == "strasse öl"


def test_index_add_replace_remove() -> None:
    index: KeywordIndex[int] = KeywordIndex()
    index.add(1, Condition(contains=["oil"]))
    index.add(2, Condition(contains=["oil"], exclude=["gas"]))
    index.add(3, Condition(regex="x"))
    entry = E(title="oil and gas")
    assert set(index.match(entry)) == {1}
    index.add(1, Condition(contains=["gas"], fields=["summary"]))  # replaces rule 1
    assert index.match(entry) == {}
    index.remove(2)
    index.remove(2)  # unknown ids are ignored
    index.add(4, Condition(exclude=["oil"], fields=["summary"]))
    assert index.match(entry) == {4: Match("any")}
    assert len(index) == 3 and 4 in index and 2 not in index
    for rule_id in (1, 3, 4):
        index.remove(rule_id)
    assert index.match(entry) == {} and len(index) == 0


def test_index_reads_only_selected_fields() -> None:
    index: KeywordIndex[str] = KeywordIndex()
    index.add("t", Condition(contains=["oil"], fields=["title"]))
    index.add("s", Condition(contains=["oil"], exclude=["gas"], fields=["summary"]))
    assert index.match(E(title="gas", summary="oil")) == {"s": Match("contains", "summary", "oil")}
    assert index.match(E(title="oil", summary="oil gas")) == {"t": Match("contains", "title", "oil")}


# --- the index agrees with the conditions one by one ---------------------------------------

_WORDS = ["oil", "Oil", "soil", "oily", "ÖL", "öl", "heizöl", "straße", "STRASSE", "strasse",
          "c++", "C", "crude", "gas", "_", "x_y", "ﬁ", "fi", "日本", "語", "#tag", "++", "a1"]
_SEPS = [" ", "  ", "\n", "\t", ", ", "(", ")", "-", ".", "", "\u00a0", "/"]

texts = st.lists(st.tuples(st.sampled_from(_WORDS), st.sampled_from(_SEPS)), max_size=12).map(
    lambda parts: "".join(w + s for w, s in parts)
)
keywords = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=2).map(" ".join)
keyword_lists = st.one_of(st.none(), st.lists(keywords, min_size=1, max_size=3))
field_lists = st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3, unique=True)


@st.composite
def conditions(draw: st.DrawFn) -> Condition:
    contains, all_, exclude = draw(keyword_lists), draw(keyword_lists), draw(keyword_lists)
    regex = draw(st.one_of(st.none(), st.sampled_from(["(?i)oil", r"\bgas\b", "日本", "^C"])))
    fields: list[FieldName] = draw(field_lists)
    return Condition(contains=contains or (), all=all_ or (), exclude=exclude or (), regex=regex, fields=fields)


entries = st.builds(
    E,
    title=st.one_of(st.none(), texts),
    summary=st.one_of(st.none(), texts),
    content=st.one_of(st.none(), texts),
    link=st.one_of(st.none(), texts),
    author=st.one_of(st.none(), texts),
    categories=st.lists(texts, max_size=3).map(tuple),
)


class _ByWordRuns(KeywordIndex[int]):
    """Single-word keywords found by the text's word runs however few (a big index's way)."""

    word_runs_from = 0


@pytest.mark.parametrize("kind", [KeywordIndex, _ByWordRuns], ids=["automaton", "word-runs"])
@settings(max_examples=300, deadline=None)
@given(rules=st.lists(conditions(), min_size=1, max_size=8), batch=st.lists(entries, min_size=1, max_size=4),
       removed=st.sets(st.integers(0, 7), max_size=3))
def test_index_equals_conditions_one_by_one(
    kind: type[KeywordIndex[int]], rules: list[Condition], batch: list[E], removed: set[int],
) -> None:
    index: KeywordIndex[int] = kind()
    for i, cond in enumerate(rules):
        index.add(i, cond)
    for entry in batch:
        expected = {i: m for i, c in enumerate(rules) if (m := c.match(entry)) is not None}
        assert index.match(entry) == expected
    for i in removed:
        index.remove(i)
    for entry in batch:
        expected = {
            i: m for i, c in enumerate(rules) if i not in removed and (m := c.match(entry)) is not None
        }
        assert index.match(entry) == expected


def _oracle(keyword: str, text: str) -> bool:
    # An independent statement of whole-word matching with Python's re: \w is isalnum() or "_".
    folded = normalize_text(keyword)
    words = [re.escape(w) for w in folded.split(" ")]
    body = r"\s+".join(words)
    left = r"(?<!\w)" if re.match(r"\w", folded[0]) else ""
    right = r"(?!\w)" if re.match(r"\w", folded[-1]) else ""
    return re.search(left + body + right, text.casefold()) is not None


@settings(max_examples=500, deadline=None)
@given(keyword=keywords, text=texts)
def test_keyword_semantics_against_an_re_oracle(keyword: str, text: str) -> None:
    assert _kw(keyword, text) is _oracle(keyword, text)
