"""The independent scorer on hand-made schedules whose answers are worked out by hand."""

from __future__ import annotations

import pytest

from proxy.core.model import CEI, EI, Budget, Workload
from proxy.sim.score import check_result, score_schedule
from proxy.sim.workload_io import ResultFile

# Three CEIs on 3 resources, K = 10, budget 1 per chronon except chronon 9 (0).
WL = Workload(
    chronons=10,
    budget=Budget((1, 1, 1, 1, 1, 1, 1, 1, 1, 0)),
    resources=3,
    ceis=(
        CEI("a", "p0", (EI(0, 0, 2), EI(1, 1, 3))),  # needs r0 in 0..2 and r1 in 1..3
        CEI("b", "p1", (EI(0, 2, 4),)),  # shares r0 at chronon 2 with "a"
        CEI("c", "p1", (EI(2, 5, 5), EI(1, 6, 8))),
    ),
)


@pytest.mark.parametrize(
    ("schedule", "captured"),
    [
        ([], set()),
        ([(2, 0)], {"b"}),  # r0 at 2 captures a's first EI and b, but a lacks r1
        ([(2, 0), (3, 1)], {"a", "b"}),  # intra-resource overlap is shared
        ([(0, 0), (1, 1)], {"a"}),
        ([(3, 0), (1, 1)], {"b"}),  # r0 at 3 is outside a's [0, 2]
        ([(5, 2), (8, 1)], {"c"}),
        ([(5, 2), (9, 1)], set()),  # 9 is past c's [6, 8] on r1 (and over budget)
        ([(2, 0), (3, 1), (5, 2), (6, 1)], {"a", "b", "c"}),
    ],
)
def test_captures(schedule: list[tuple[int, int]], captured: set[str]) -> None:
    score = score_schedule(WL, schedule)
    assert score.captured_ids == frozenset(captured)
    assert score.captured == len(captured)
    assert score.total == 3
    assert score.completeness == pytest.approx(len(captured) / 3)
    assert score.probes == len(schedule)


def test_valid_schedule_has_no_problems() -> None:
    assert score_schedule(WL, [(2, 0), (3, 1)]).ok


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        ([(2, 0), (2, 1)], "chronon 2: 2 probes exceed the budget of 1"),
        ([(9, 0)], "chronon 9: 1 probes exceed the budget of 0"),
        ([(3, 3)], "probe [3, 3]: unknown resource 3 (resources are 0..2)"),
        ([(10, 1)], "probe [10, 1]: chronon 10 outside 0..9"),
        ([(-1, 1)], "probe [-1, 1]: chronon -1 outside 0..9"),
        ([(4, 1), (4, 1)], "probe [4, 1]: listed twice"),
    ],
)
def test_reports_each_broken_rule(schedule: list[tuple[int, int]], problem: str) -> None:
    assert problem in score_schedule(WL, schedule).problems


def test_invalid_probes_do_not_capture() -> None:
    score = score_schedule(WL, [(2, 7), (12, 0)])
    assert score.captured == 0
    assert len(score.problems) == 2


def _result(schedule: list[tuple[int, int]], captured: int, completeness: float, **kw: int) -> ResultFile:
    return ResultFile(
        policy="hand", captured=captured, total=kw.get("total", 3), completeness=completeness,
        probes=kw.get("probes", len(schedule)), schedule=tuple(schedule),
    )


def test_honest_claim_passes_with_four_decimal_rounding() -> None:
    _, problems = check_result(WL, _result([(2, 0)], 1, 0.3333))
    assert problems == []


@pytest.mark.parametrize(
    ("result", "fragment"),
    [
        (_result([(2, 0)], 2, 0.6667), "claims captured 2, but the schedule captures 1"),
        (_result([(2, 0)], 1, 0.5), "claims completeness 0.5, but re-scoring gives 0.333333"),
        (_result([(2, 0)], 1, 1 / 3, total=4), "claims total 4, but the workload holds 3 CEIs"),
        (_result([(2, 0)], 1, 1 / 3, probes=5), "claims 5 probes, but the schedule lists 1"),
        (_result([(2, 0), (2, 1)], 1, 1 / 3), "chronon 2: 2 probes exceed the budget of 1"),
    ],
)
def test_wrong_claims_are_reported(result: ResultFile, fragment: str) -> None:
    _, problems = check_result(WL, result)
    assert any(fragment in p for p in problems), problems


def test_empty_workload_scores_zero() -> None:
    wl = Workload(chronons=2, budget=Budget(1), resources=1, ceis=())
    score = score_schedule(wl, [(0, 0)])
    assert (score.captured, score.total, score.completeness) == (0, 0, 0.0)
