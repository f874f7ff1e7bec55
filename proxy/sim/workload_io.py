"""Read and write the interchange format (``shared/spec/workload-format.md``, version 1).

Two documents: a workload (``proxy-workload/1``) and a result
(``proxy-result/1``).  The readers check the JSON shape first, naming the
field by its path (``ceis[3].eis[1]``), then the model rules through
:meth:`proxy.core.model.Workload.validate`, which names the offending CEI.

Deliberately not here: scoring (``proxy.sim.score``) and any knowledge of
policies; a result's claims are read as written and checked elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.core.model import CEI, EI, Budget, Workload, WorkloadError

WORKLOAD_FORMAT = "proxy-workload/1"
RESULT_FORMAT = "proxy-result/1"


class FormatError(WorkloadError):
    """A file is not valid JSON or does not have the spec's shape; the message names the path."""


@dataclass(frozen=True, slots=True)
class ResultFile:
    """A schedule and what its producer claims about it (spec: "Schedule / result file")."""

    policy: str
    captured: int
    total: int
    completeness: float
    probes: int
    schedule: tuple[tuple[int, int], ...]
    meta: dict[str, object] = field(default_factory=dict, compare=False)


# ---------------------------------------------------------------------------
# workloads


def workload_to_json(workload: Workload) -> dict[str, object]:
    """The JSON document of ``workload``; EIs with a reveal get the 4-element form."""
    ceis: list[dict[str, object]] = []
    for cei in workload.ceis:
        doc: dict[str, object] = {"id": cei.id, "profile": cei.profile}
        if cei.release is not None:
            doc["release"] = cei.release
        doc["eis"] = [
            [ei.resource, ei.start, ei.finish]
            if ei.reveal is None
            else [ei.resource, ei.start, ei.finish, ei.reveal]
            for ei in cei.eis
        ]
        ceis.append(doc)
    out: dict[str, object] = {
        "format": WORKLOAD_FORMAT,
        "chronons": workload.chronons,
        "budget": workload.budget.to_json(),
        "resources": workload.resources,
        "ceis": ceis,
    }
    if workload.meta:
        out["meta"] = workload.meta
    return out


def dumps_workload(workload: Workload) -> str:
    """Serialise compactly: one CEI per line keeps large files diffable and small."""
    doc = workload_to_json(workload)
    ceis = doc.pop("ceis")
    assert isinstance(ceis, list)
    head = json.dumps(doc, separators=(", ", ": "))[:-1]
    lines = ",\n  ".join(json.dumps(c, separators=(",", ":")) for c in ceis)
    return f'{head}, "ceis": [\n  {lines}\n]}}\n' if ceis else f'{head}, "ceis": []}}\n'


def write_workload(workload: Workload, path: Path) -> None:
    """Validate ``workload`` and write it to ``path`` (UTF-8)."""
    workload.validate()
    path.write_text(dumps_workload(workload), encoding="utf-8")


def workload_from_json(doc: object) -> Workload:
    """Build and validate a :class:`Workload` from a parsed JSON document.

    Raises :class:`FormatError` (a :class:`WorkloadError`) for a wrong shape
    and :class:`WorkloadError` for a rule the spec's readers must enforce.
    """
    top = _mapping(doc, "the document")
    _check_format(top, WORKLOAD_FORMAT)
    chronons = _int(top, "chronons", "chronons")
    resources = _int(top, "resources", "resources")
    budget = _budget(top.get("budget"), "budget")
    raw_ceis = top.get("ceis")
    if not isinstance(raw_ceis, list):
        raise FormatError(f"ceis: expected a list of CEIs, got {_kind(raw_ceis)}")
    ceis = tuple(_cei(raw, f"ceis[{i}]") for i, raw in enumerate(raw_ceis))
    meta = top.get("meta", {})
    if not isinstance(meta, dict):
        raise FormatError(f"meta: expected an object, got {_kind(meta)}")
    workload = Workload(chronons=chronons, budget=budget, resources=resources, ceis=ceis, meta=meta)
    workload.validate()
    return workload


def loads_workload(text: str) -> Workload:
    return workload_from_json(_parse(text))


def read_workload(path: Path) -> Workload:
    """Read a workload file; errors say which file and what is wrong in it."""
    try:
        return loads_workload(path.read_text(encoding="utf-8"))
    except WorkloadError as exc:
        raise type(exc)(f"{path}: {exc}") from exc


# ---------------------------------------------------------------------------
# results


def result_to_json(result: ResultFile) -> dict[str, object]:
    out: dict[str, object] = {
        "format": RESULT_FORMAT,
        "policy": result.policy,
        "captured": result.captured,
        "total": result.total,
        "completeness": round(result.completeness, 6),
        "probes": result.probes,
        "schedule": [[t, r] for t, r in result.schedule],
    }
    if result.meta:
        out["meta"] = result.meta
    return out


def dumps_result(result: ResultFile) -> str:
    doc = result_to_json(result)
    return json.dumps(doc, separators=(",", ":")) + "\n"


def write_result(result: ResultFile, path: Path) -> None:
    path.write_text(dumps_result(result), encoding="utf-8")


def result_from_json(doc: object) -> ResultFile:
    """Build a :class:`ResultFile` from parsed JSON; the claims are not checked here."""
    top = _mapping(doc, "the document")
    _check_format(top, RESULT_FORMAT)
    policy = top.get("policy")
    if not isinstance(policy, str):
        raise FormatError(f"policy: expected a string, got {_kind(policy)}")
    captured = _int(top, "captured", "captured")
    total = _int(top, "total", "total")
    completeness = top.get("completeness")
    if isinstance(completeness, bool) or not isinstance(completeness, int | float):
        raise FormatError(f"completeness: expected a number, got {_kind(completeness)}")
    raw_schedule = top.get("schedule")
    if not isinstance(raw_schedule, list):
        raise FormatError(f"schedule: expected a list of [chronon, resource], got {_kind(raw_schedule)}")
    schedule: list[tuple[int, int]] = []
    for i, pair in enumerate(raw_schedule):
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(_is_int(v) for v in pair)
        ):
            raise FormatError(f"schedule[{i}]: expected [chronon, resource] integers, got {pair!r}")
        schedule.append((pair[0], pair[1]))
    probes = _int(top, "probes", "probes") if "probes" in top else len(schedule)
    meta = top.get("meta", {})
    if not isinstance(meta, dict):
        raise FormatError(f"meta: expected an object, got {_kind(meta)}")
    return ResultFile(
        policy=policy,
        captured=captured,
        total=total,
        completeness=float(completeness),
        probes=probes,
        schedule=tuple(schedule),
        meta=meta,
    )


def loads_result(text: str) -> ResultFile:
    return result_from_json(_parse(text))


def read_result(path: Path) -> ResultFile:
    try:
        return loads_result(path.read_text(encoding="utf-8"))
    except WorkloadError as exc:
        raise type(exc)(f"{path}: {exc}") from exc


# ---------------------------------------------------------------------------
# shape checks


def _parse(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc


def _kind(value: object) -> str:
    if value is None:
        return "nothing (missing or null)"
    return f"{type(value).__name__} {value!r}"[:80]


def _is_int(value: object) -> bool:
    # JSON true/false arrive as bool, a subclass of int: they are not chronons.
    return isinstance(value, int) and not isinstance(value, bool)


def _mapping(doc: object, where: str) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise FormatError(f"{where}: expected a JSON object, got {_kind(doc)}")
    return doc


def _check_format(top: Mapping[str, Any], expected: str) -> None:
    got = top.get("format")
    if got != expected:
        raise FormatError(f"format: expected {expected!r}, got {got!r}")


def _int(obj: Mapping[str, Any], key: str, path: str) -> int:
    value = obj.get(key)
    if not _is_int(value):
        raise FormatError(f"{path}: expected an integer, got {_kind(value)}")
    assert isinstance(value, int)
    return value


def _budget(value: object, path: str) -> Budget:
    if _is_int(value):
        assert isinstance(value, int)
        return Budget(value)
    if isinstance(value, list):
        for i, v in enumerate(value):
            if not _is_int(v):
                raise FormatError(f"{path}[{i}]: expected an integer, got {_kind(v)}")
        return Budget(tuple(value))
    raise FormatError(f"{path}: expected an integer or a list of integers, got {_kind(value)}")


def _cei(raw: object, path: str) -> CEI:
    obj = _mapping(raw, path)
    cid = obj.get("id")
    if not isinstance(cid, str):
        raise FormatError(f"{path}.id: expected a string, got {_kind(cid)}")
    named = f"{path} (CEI {cid!r})"
    profile = obj.get("profile")
    if not isinstance(profile, str):
        raise FormatError(f"{named}.profile: expected a string, got {_kind(profile)}")
    release: int | None = None
    if "release" in obj:
        release = _int(obj, "release", f"{named}.release")
    raw_eis = obj.get("eis")
    if not isinstance(raw_eis, list):
        raise FormatError(f"{named}.eis: expected a list of EIs, got {_kind(raw_eis)}")
    eis: list[EI] = []
    for j, e in enumerate(raw_eis):
        if not isinstance(e, list) or len(e) not in (3, 4) or not all(_is_int(v) for v in e):
            raise FormatError(
                f"{named}.eis[{j}]: expected [resource, start, finish] or "
                f"[resource, start, finish, reveal] integers, got {e!r}"
            )
        eis.append(EI(e[0], e[1], e[2], e[3] if len(e) == 4 else None))
    return CEI(id=cid, profile=profile, eis=tuple(eis), release=release)

