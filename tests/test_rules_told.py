"""Issue 43, "what matched is told" and ``when`` on watch rules: the evaluator's operations
carry the entries that made a rule fire, and a watch rule's update counts only if one of
its new entries matches. Fake chronons, exact operations (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from proxy.rules import MatchedEntry, OpenCei, ProfileSpec, RevealEi, SealCei, TriggerEvaluator
from proxy.rules.ports import MAX_MATCHED
from tests.test_rules_evaluator import (
    CNN,
    FEEDS,
    GRID,
    MISH,
    MONEY,
    MOTIVATING,
    Entry,
    alert_body,
    evaluator,
)

A, B = 10, 11
T6 = GRID.start_of(6)


def watch_body(when: dict[str, Any] | None, feeds: tuple[str, ...] = ("A", "B")) -> dict[str, Any]:
    watch: dict[str, Any] = {"feeds": list(feeds), "within": "10m"}
    if when is not None:
        watch["when"] = when
    return {"name": "w", "rules": [{"name": "watch", "watch": watch}]}


# --------------------------------------------------------------------------- what matched is told


def test_an_alert_tells_the_matching_entries_with_field_and_keyword() -> None:
    ev = evaluator(alert_body({"contains": ["gold", "oil"], "fields": ["summary", "title"]}))
    ev.on_notification(MISH, 4)
    (seal,) = ev.on_probe(MISH, 5, True, [
        Entry(title="Weather", link="https://x/1"),
        Entry(title="Oil prices jump", summary="crude OIL", link="https://x/2", published=T6),
        Entry(title="Gold and oil", link="https://x/3"),
    ])
    assert isinstance(seal, SealCei) and seal.fired
    assert seal.matched == (
        # contains in the order written (gold first), fields in the order written (summary first)
        MatchedEntry(MISH, "Oil prices jump", "https://x/2", T6, "contains", "summary", "oil"),
        MatchedEntry(MISH, "Gold and oil", "https://x/3", None, "contains", "title", "gold"),
    )


def test_a_regex_tells_its_pattern_and_a_rule_without_when_tells_every_entry() -> None:
    ev = evaluator(alert_body({"regex": "(?i)brent \\$\\d+"}))
    ev.on_notification(MISH, 1)
    (seal,) = ev.on_probe(MISH, 1, True, [Entry(title="no"), Entry(summary="Brent $90")])
    assert isinstance(seal, SealCei)
    assert seal.matched == (MatchedEntry(MISH, None, None, None, "regex", "summary", "(?i)brent \\$\\d+"),)
    ev = evaluator(alert_body())
    ev.on_notification(MISH, 1)
    (seal,) = ev.on_probe(MISH, 1, True, [Entry(title="a"), Entry(title="b")])
    assert isinstance(seal, SealCei)
    assert [(m.title, m.kind, m.field, m.text) for m in seal.matched] == [
        ("a", "any", None, None), ("b", "any", None, None)]


def test_an_alert_that_does_not_fire_tells_nothing_and_at_most_twenty_are_told() -> None:
    ev = evaluator(alert_body({"contains": ["oil"]}))
    ev.on_notification(MISH, 1)
    (seal,) = ev.on_probe(MISH, 1, True, [Entry(title="gold")])
    assert isinstance(seal, SealCei) and not seal.fired and seal.matched == ()
    ev.on_notification(MISH, 2)
    (seal,) = ev.on_probe(MISH, 2, True, [Entry(title=f"oil {i}") for i in range(30)])
    assert isinstance(seal, SealCei)
    assert [m.title for m in seal.matched] == [f"oil {i}" for i in range(MAX_MATCHED)]


def test_a_trigger_with_queries_tells_on_its_first_query_ei_only() -> None:
    ev = evaluator(MOTIVATING)
    ev.on_tick(0)
    first, last = ev.on_probe(MISH, 1, True, [Entry(title="gold"), Entry(summary="Oil spill", link="l")])
    assert (first, last) == (RevealEi("p/0:0", CNN, 1, 11, False), RevealEi("p/0:0", MONEY, 1, 11, True))
    assert isinstance(first, RevealEi) and isinstance(last, RevealEi)
    assert first.matched == (MatchedEntry(MISH, None, "l", None, "contains", "summary", "oil"),)
    assert last.matched == ()


def test_what_is_told_is_not_part_of_an_operations_equality() -> None:
    told = (MatchedEntry(MISH, "t", None, None, "any", None, None),)
    assert SealCei("c", fired=True, matched=told) == SealCei("c")
    assert RevealEi("c", 1, 0, 1, True, matched=told) == RevealEi("c", 1, 0, 1, True)


# --------------------------------------------------------------------------- when on watch rules


def test_a_watched_update_counts_only_if_an_entry_matches() -> None:
    ev = evaluator(profile_id="w", body=watch_body({"contains": ["oil"], "exclude": ["opinion"]}))
    ev.on_probe(A, 0, True, [Entry(title="old")])
    ev.on_probe(B, 0, True, [Entry(title="old")])
    # New entries on A, none matching: no update for the rule.
    assert ev.on_probe(A, 3, True, [Entry(title="gold", published=GRID.start_of(2)),
                                    Entry(title="Opinion: oil", published=GRID.start_of(2))],
                       previous_success=0) == []
    # A matching entry dated at 5: the update at 5 opens the CEI and tells the entry.
    (opened,) = ev.on_probe(A, 6, True, [Entry(title="gold", published=GRID.start_of(4)),
                                         Entry(title="Oil rises", published=GRID.start_of(5))],
                            previous_success=3)
    assert opened == OpenCei("w/0:0", "w", "w/0", ((A, 5, 15),), sealed=False)
    assert isinstance(opened, OpenCei)
    assert opened.matched == (MatchedEntry(A, "Oil rises", None, GRID.start_of(5), "contains", "title", "oil"),)
    # B's matching entry completes it.
    (revealed,) = ev.on_probe(B, 8, True, [Entry(summary="oil", published=GRID.start_of(7))],
                              previous_success=0)
    assert revealed == RevealEi("w/0:0", B, 7, 17, seal=True)
    assert isinstance(revealed, RevealEi) and revealed.matched[0].field == "summary"


def test_a_watch_rule_without_when_still_counts_every_update() -> None:
    ev = evaluator(profile_id="w", body=watch_body(None, feeds=("A",)))
    ev.on_probe(A, 0, True, [Entry(title="old")])
    (opened,) = ev.on_probe(A, 3, True, [Entry(title="gold", published=GRID.start_of(2))], previous_success=0)
    assert opened == OpenCei("w/0:0", "w", "w/0", ((A, 2, 12),), sealed=True)
    assert isinstance(opened, OpenCei) and opened.matched == ()


def test_a_ping_does_not_advance_a_watch_rule_with_when_its_probe_does() -> None:
    ev = evaluator(profile_id="w", body=watch_body({"contains": ["oil"]}, feeds=("A",)))
    ev.on_probe(A, 0, True, [Entry(title="old")])
    assert ev.on_notification(A, 2) == []
    (opened,) = ev.on_probe(A, 3, True, [Entry(title="oil", published=GRID.start_of(2))], previous_success=0)
    assert opened == OpenCei("w/0:0", "w", "w/0", ((A, 2, 12),), sealed=True)


def test_the_first_probe_after_install_reads_only_matching_entries_dated_since() -> None:
    ev = TriggerEvaluator(GRID)
    ev.add_profile("w", ProfileSpec.model_validate(watch_body({"contains": ["oil"]}, feeds=("A",))),
                   FEEDS, since=4)
    ops = ev.on_probe(A, 8, True, [Entry(title="gold", published=GRID.start_of(5)),
                                   Entry(title="oil", published=GRID.start_of(3)),
                                   Entry(title="oil again", published=GRID.start_of(6))])
    assert ops == [OpenCei("w/0:0", "w", "w/0", ((A, 6, 16),), sealed=True)]
    assert isinstance(ops[0], OpenCei) and [m.title for m in ops[0].matched] == ["oil again"]


def test_removing_a_watch_rule_takes_its_keywords_out_of_every_watched_feeds_index() -> None:
    ev = evaluator(profile_id="w", body=watch_body({"contains": ["oil"]}))
    assert set(ev._index) == {A, B}
    ev.remove_profile("w")
    assert not ev._index


@pytest.mark.parametrize(
    ("when", "loc", "words"),
    [
        ({"every_nth": 3}, ("rules", 0, "watch", "when", "every_nth"), "every_nth"),
        ({"contains": []}, ("rules", 0, "watch", "when", "contains"), "at least 1"),
        ({"contains": ["oil"], "fields": ["body"]}, ("rules", 0, "watch", "when", "fields", 0), "unknown field"),
        ({"regex": "(a"}, ("rules", 0, "watch", "when", "regex"), "regular expression"),
        ({"contains": ["oil"], "exclude": ["OIL"]}, ("rules", 0, "watch", "when", "exclude"), "both"),
        ({"contain": ["oil"]}, ("rules", 0, "watch", "when", "contain"), "Extra"),
        ({}, ("rules", 0, "watch", "when"), "at least one"),
    ],
)
def test_every_mistake_in_a_watch_rules_when_names_its_field(
    when: dict[str, Any], loc: tuple[Any, ...], words: str
) -> None:
    with pytest.raises(ValidationError) as info:
        ProfileSpec.model_validate(watch_body(when))
    (error,) = info.value.errors()
    assert error["loc"] == loc
    assert words.lower() in error["msg"].lower()
