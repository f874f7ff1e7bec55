"""Issue 43, "what matched is told", in the store on both backends: the writer's steps carry
the entries that made a CEI fire into ``ceis.matched`` (migration 0010), the CEI reads them
back, and the notification written when the CEI resolves is version 2 with ``matched``."""

from __future__ import annotations

import datetime as dt

from proxy.notify.payload import Notification
from proxy.service._persist import AddCei, AddEi, Seal, Writer
from proxy.service.metrics import ServiceMetrics
from proxy.store import CeiStateChange, MatchedRecord, NewEi, Store
from proxy.store._types import MAX_MATCHED_PER_CEI
from tests.test_service_persist import _setup

PUBLISHED = dt.datetime(2026, 3, 1, 11, 30, tzinfo=dt.UTC)


def told(feed: int, title: str, kind: str = "contains", field: str | None = "title",
         text: str | None = "oil") -> MatchedRecord:
    return MatchedRecord(feed, title, f"https://example.org/{title}", PUBLISHED, kind, field, text)


async def test_the_writer_stores_what_matched_with_each_firing_step(store: Store) -> None:
    user, (a, b), pid, rid = await _setup(store)
    writer = Writer(store, ServiceMetrics())
    writer.start()
    writer.submit([
        # an alert: opened unsealed, fired by its seal
        AddCei("alert:0", pid, rid, 1, (NewEi(0, a, 1, 5),), sealed=False),
        # a watch rule's CEI: opened fired by a matching update, grown by another
        AddCei("watch:0", pid, rid, 1, (NewEi(0, a, 1, 5),), sealed=False, fired=True,
               matched=(told(a, "Oil rises"),)),
        # a CEI that only checked its trigger: nothing told
        AddCei("checked:0", pid, rid, 1, (NewEi(0, a, 1, 5),), sealed=False),
    ])
    writer.submit([
        Seal("alert:0", fired=True, matched=(told(a, "Brent", "regex", "summary", "(?i)brent"),
                                             told(a, "Any", "any", None, None))),
        AddEi("watch:0", NewEi(1, b, 2, 6, reveal=2), seal=True, matched=(told(b, "More oil"),)),
        Seal("checked:0"),
    ])
    await writer.stop()
    ceis = {c.id: c for c in await store.list_ceis(user, pid)}
    assert ceis["alert:0"].fired and ceis["alert:0"].matched == (
        told(a, "Brent", "regex", "summary", "(?i)brent"), told(a, "Any", "any", None, None))
    assert ceis["watch:0"].matched == (told(a, "Oil rises"), told(b, "More oil"))
    assert ceis["checked:0"].matched == () and not ceis["checked:0"].fired

    await store.resolve_ceis([CeiStateChange("alert:0", "captured", 3),
                              CeiStateChange("checked:0", "captured", 3)])
    events = {e.cei_id: Notification.model_validate_json(e.payload)
              for e in await store.list_events(user, limit=10)}
    doc = events["alert:0"]
    assert doc.version == 2
    assert [(m.feed_id, m.title, m.match, m.field, m.keyword, m.pattern, m.published)
            for m in doc.matched] == [
        (a, "Brent", "regex", "summary", None, "(?i)brent", PUBLISHED),
        (a, "Any", "any", None, None, None, PUBLISHED),
    ]
    assert events["checked:0"].version == 2 and events["checked:0"].matched == []


async def test_at_most_twenty_are_kept_the_first_told(store: Store) -> None:
    user, (a, _), pid, rid = await _setup(store)
    await store.add_ceis([("c:0", pid, rid, 0, False, [NewEi(0, a, 0, 1)])],
                         matched={"c:0": [told(a, f"first {i}") for i in range(15)]})
    await store.add_eis([], seal=["c:0"], fired=["c:0"],
                        matched={"c:0": [told(a, f"then {i}") for i in range(15)]})
    await store.seal_cei("c:0", fired=True, matched=[told(a, "too late")])
    (cei,) = await store.list_ceis(user, pid)
    assert len(cei.matched) == MAX_MATCHED_PER_CEI
    assert [m.title for m in cei.matched] == [f"first {i}" for i in range(15)] + [f"then {i}" for i in range(5)]


def test_a_version_1_document_still_reads_and_a_version_2_adds_only_matched() -> None:
    v1 = {
        "version": 1, "type": "captured", "event_id": 1, "created_at": "2026-03-01T12:00:00Z",
        "profile": {"id": 1, "name": "p"}, "rule": None,
        "cei": {"id": "c", "state": "captured", "fired": True, "release": 0,
                "resolved_chronon": 1, "resolved_at": None},
        "eis": [],
    }
    old = Notification.model_validate(v1)
    assert old.version == 1 and old.matched == []
    new = Notification.model_validate({**v1, "version": 2}).model_dump(mode="json")
    assert set(new) - set(v1) == {"matched"}
    assert {k: new[k] for k in v1 if k != "version"} == {k: v for k, v in v1.items() if k != "version"} | {
        "created_at": "2026-03-01T12:00:00Z"}
