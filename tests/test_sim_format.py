"""The interchange format round-trips and its reader rejects bad files, naming what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.core.model import CEI, EI, Budget, Workload, WorkloadError
from proxy.sim.workload_io import (
    FormatError,
    ResultFile,
    dumps_result,
    dumps_workload,
    loads_result,
    loads_workload,
    read_workload,
    write_workload,
)


def _workload(budget: Budget | None = None) -> Workload:
    return Workload(
        chronons=40,
        budget=budget or Budget(2),
        resources=5,
        ceis=(
            CEI("c0", "p0", (EI(0, 5, 12), EI(4, 15, 30))),
            CEI("c1", "p1", (EI(1, 0, 0), EI(2, 3, 9, 6)), release=2),
            CEI("c2", "p0", (EI(3, 39, 39),)),
        ),
        meta={"generator": "hand", "seed": 7},
    )


def _doc(**changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "format": "proxy-workload/1",
        "chronons": 10,
        "budget": 1,
        "resources": 3,
        "ceis": [{"id": "ok", "profile": "p", "eis": [[0, 0, 1]]},
                 {"id": "x", "profile": "p", "eis": [[1, 2, 3]]}],
    }
    doc.update(changes)
    return doc


@pytest.mark.parametrize("budget", [Budget(2), Budget(tuple(i % 3 for i in range(40)))])
def test_workload_round_trips(tmp_path: Path, budget: Budget) -> None:
    wl = _workload(budget)
    path = tmp_path / "w.json"
    write_workload(wl, path)
    back = read_workload(path)
    assert back == wl
    assert back.meta == {"generator": "hand", "seed": 7}
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["format"] == "proxy-workload/1"
    # 3- and 4-element EIs and the optional release survive as written.
    assert doc["ceis"][1] == {"id": "c1", "profile": "p1", "release": 2, "eis": [[1, 0, 0], [2, 3, 9, 6]]}
    assert "release" not in doc["ceis"][0]


def test_reads_the_spec_example() -> None:
    text = """{"format": "proxy-workload/1", "chronons": 1000, "budget": 1, "resources": 400,
      "ceis": [{"id": "c0", "profile": "p0", "release": 12, "eis": [[5, 12, 22], [17, 15, 30]]}],
      "meta": {"generator": "free-form, ignored by readers"}}"""
    wl = loads_workload(text)
    assert wl.ceis == (CEI("c0", "p0", (EI(5, 12, 22), EI(17, 15, 30)), release=12),)
    assert wl.budget.at(999) == 1


def test_empty_workload_round_trips() -> None:
    wl = Workload(chronons=3, budget=Budget(1), resources=1, ceis=())
    assert loads_workload(dumps_workload(wl)) == wl


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        (_doc(format="proxy-workload/2"), "format: expected 'proxy-workload/1', got 'proxy-workload/2'"),
        (_doc(chronons="10"), "chronons: expected an integer, got str '10'"),
        (_doc(chronons=True), "chronons: expected an integer, got bool True"),
        (_doc(resources=None), "resources: expected an integer"),
        (_doc(budget=1.5), "budget: expected an integer or a list of integers"),
        (_doc(budget=[1] * 9 + ["x"]), "budget[9]: expected an integer"),
        (_doc(budget=[1, 1]), "budget list has 2 entries, expected chronons=10"),
        (_doc(ceis={}), "ceis: expected a list of CEIs"),
        (_doc(meta=[]), "meta: expected an object"),
    ],
)
def test_rejects_bad_top_level(doc: dict[str, object], fragment: str) -> None:
    with pytest.raises(WorkloadError) as info:
        loads_workload(json.dumps(doc))
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("cei", "fragment"),
    [
        ({"id": 3, "profile": "p", "eis": []}, "ceis[1].id: expected a string"),
        ({"id": "bad", "eis": [[0, 0, 0]]}, "ceis[1] (CEI 'bad').profile: expected a string"),
        ({"id": "bad", "profile": "p", "eis": [[0, 0]]}, "ceis[1] (CEI 'bad').eis[0]: expected [resource, start, finish]"),
        ({"id": "bad", "profile": "p", "eis": [[0, 0, 0, 1, 2]]}, "ceis[1] (CEI 'bad').eis[0]"),
        ({"id": "bad", "profile": "p", "eis": [[0, 1, 2], [0, 1.0, 2]]}, "ceis[1] (CEI 'bad').eis[1]"),
        ({"id": "bad", "profile": "p", "eis": "nope"}, "ceis[1] (CEI 'bad').eis: expected a list"),
        ({"id": "bad", "profile": "p", "release": "1", "eis": [[0, 1, 2]]}, "ceis[1] (CEI 'bad').release"),
        ({"id": "bad", "profile": "p", "eis": [[3, 1, 2]]}, "CEI 'bad', EI #0 [3, 1, 2]: unknown resource 3"),
        ({"id": "bad", "profile": "p", "eis": [[0, 5, 2]]}, "CEI 'bad', EI #0 [0, 5, 2]: start 5 > finish 2"),
        ({"id": "bad", "profile": "p", "eis": [[0, 5, 10]]}, "CEI 'bad', EI #0 [0, 5, 10]: outside chronons 0..9"),
        ({"id": "bad", "profile": "p", "eis": [[0, -1, 3]]}, "CEI 'bad', EI #0 [0, -1, 3]: outside chronons 0..9"),
        ({"id": "bad", "profile": "p", "eis": [[0, 2, 5, 1]]}, "CEI 'bad', EI #0 [0, 2, 5, 1]: reveal 1 before the CEI's release 2"),
        ({"id": "bad", "profile": "p", "eis": []}, "CEI 'bad': has no EIs"),
        ({"id": "ok", "profile": "p", "eis": [[0, 0, 0]]}, "CEI 'ok': duplicate id"),
        ({"id": "bad", "profile": "p", "release": 10, "eis": [[0, 0, 0]]}, "CEI 'bad': release 10 outside 0..9"),
    ],
)
def test_rejects_bad_cei_naming_it(cei: dict[str, object], fragment: str) -> None:
    doc = _doc(ceis=[{"id": "ok", "profile": "p", "eis": [[0, 0, 1]]}, cei])
    with pytest.raises(WorkloadError) as info:
        loads_workload(json.dumps(doc))
    assert fragment in str(info.value)


def test_rejects_invalid_json_with_position() -> None:
    with pytest.raises(FormatError, match=r"not valid JSON: .* line 1 column"):
        loads_workload('{"format": ')


def test_rejects_non_object_document() -> None:
    with pytest.raises(FormatError, match="the document: expected a JSON object, got list"):
        loads_workload("[]")


def test_read_workload_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_doc(chronons=0)), encoding="utf-8")
    with pytest.raises(WorkloadError, match=r"bad\.json: chronons must be positive"):
        read_workload(path)


def test_result_round_trips() -> None:
    res = ResultFile(
        policy="mrsf-p", captured=1, total=3, completeness=1 / 3, probes=3,
        schedule=((0, 1), (0, 4), (7, 2)), meta={"runtime_s": 0.5},
    )
    back = loads_result(dumps_result(res))
    assert back.schedule == res.schedule
    assert (back.policy, back.captured, back.total, back.probes) == ("mrsf-p", 1, 3, 3)
    assert back.completeness == pytest.approx(1 / 3, abs=1e-6)
    assert back.meta == {"runtime_s": 0.5}


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"format": "proxy-workload/1"}, "format: expected 'proxy-result/1'"),
        ({"policy": 3}, "policy: expected a string"),
        ({"captured": "1"}, "captured: expected an integer"),
        ({"completeness": "0.5"}, "completeness: expected a number"),
        ({"schedule": [[0, 1], [2]]}, "schedule[1]: expected [chronon, resource] integers"),
        ({"schedule": [[0, True]]}, "schedule[0]"),
        ({"schedule": None}, "schedule: expected a list"),
    ],
)
def test_result_reader_rejects(change: dict[str, object], fragment: str) -> None:
    doc: dict[str, object] = {
        "format": "proxy-result/1", "policy": "p", "captured": 0, "total": 0,
        "completeness": 0.0, "probes": 0, "schedule": [],
    }
    doc.update(change)
    with pytest.raises(FormatError) as info:
        loads_result(json.dumps(doc))
    assert fragment in str(info.value)
