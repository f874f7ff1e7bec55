"""Entry identity and new-entry detection."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

import pytest

from proxy.feeds.identity import MAX_IDENTITY_CHARS, entry_identity, split_new
from proxy.feeds.results import Entry, KnownEntries, MemoryKnownEntries

D = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"id": "urn:1", "link": "http://l/1"}, "urn:1"),
        ({"id": "  urn:1 \n", "link": None}, "urn:1"),
        ({"id": "", "link": "http://l/1"}, "http://l/1"),
        ({"id": "   ", "link": " http://l/1 "}, "http://l/1"),
        ({"id": None, "link": "http://l/1"}, "http://l/1"),
    ],
)
def test_identity_prefers_id_then_link(kwargs: dict[str, str | None], expected: str) -> None:
    assert entry_identity(title="t", summary="s", published=D, **kwargs) == expected


def test_identity_hash_of_title_summary_date() -> None:
    a = entry_identity(id=None, link=None, title="T", summary="S", published=D)
    assert a.startswith("sha256:") and len(a) == 7 + 64
    assert a == entry_identity(id=None, link=None, title="T", summary="S", published=D)
    assert a != entry_identity(id=None, link=None, title="T", summary="S2", published=D)
    assert a != entry_identity(id=None, link=None, title="T", summary="S", published=None)
    # Field boundaries matter: ("ab", "c") is not ("a", "bc").
    assert entry_identity(id=None, link=None, title="ab", summary="c", published=None) != entry_identity(
        id=None, link=None, title="a", summary="bc", published=None
    )
    # Markup and whitespace do not (parsers sanitise differently).
    assert entry_identity(
        id=None, link=None, title="T", summary="<p>Hello  <b>world</b>&amp;</p>", published=None
    ) == entry_identity(id=None, link=None, title="T", summary="Hello world&", published=None)


def test_long_identities_are_hashed() -> None:
    long_id = "urn:" + "x" * MAX_IDENTITY_CHARS
    ident = entry_identity(id=long_id, link=None, title=None, summary=None, published=None)
    assert ident.startswith("sha256:") and len(ident) <= MAX_IDENTITY_CHARS


def _entry(identity: str) -> Entry:
    return Entry(identity=identity, title=identity, link=None, summary=None, content=None, published=None)


class CountingKnown:
    """A KnownEntries that records what it was asked (to check the one-query contract)."""

    def __init__(self, seen: set[str]) -> None:
        self.seen = seen
        self.calls: list[set[str]] = []

    def known(self, identities: Collection[str]) -> set[str]:
        self.calls.append(set(identities))
        return self.seen & set(identities)


def test_split_new_dedups_keeps_order_and_asks_once() -> None:
    entries = [_entry("a"), _entry("b"), _entry("a"), _entry("c")]
    known = CountingKnown({"b", "zzz"})
    assert isinstance(known, KnownEntries)
    kept, new = split_new(entries, known)
    assert [e.identity for e in kept] == ["a", "b", "c"]
    assert [e.identity for e in new] == ["a", "c"]
    assert known.calls == [{"a", "b", "c"}]  # one call, only this document's identities


def test_split_new_with_long_history_only_asks_about_the_document() -> None:
    history = MemoryKnownEntries(f"old-{i}" for i in range(100_000))
    history.add(["doc-1"])
    _kept, new = split_new([_entry("doc-1"), _entry("doc-2")], history)
    assert [e.identity for e in new] == ["doc-2"]
    assert len(history) == 100_001  # split_new never records anything


def test_split_new_empty_document_does_not_query() -> None:
    known = CountingKnown(set())
    assert split_new([], known) == ((), ())
    assert known.calls == []
