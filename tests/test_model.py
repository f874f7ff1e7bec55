"""Workload validation names the offending CEI (spec: "Readers must reject …")."""

from __future__ import annotations

import pytest

from proxy.core.model import CEI, EI, Budget, Workload, WorkloadError


def _wl(*ceis: CEI, budget: Budget | None = None) -> Workload:
    return Workload(chronons=10, budget=budget or Budget(1), resources=3, ceis=ceis)


def test_valid_workload_passes() -> None:
    _wl(CEI("c0", "p0", (EI(0, 1, 2), EI(2, 3, 9)))).validate()


@pytest.mark.parametrize(
    ("ei", "fragment"),
    [
        (EI(5, 1, 2), "unknown resource 5"),
        (EI(0, 3, 2), "start 3 > finish 2"),
        (EI(0, 1, 10), "outside chronons 0..9"),
        (EI(0, -1, 2), "outside chronons 0..9"),
    ],
)
def test_bad_ei_names_the_cei(ei: EI, fragment: str) -> None:
    with pytest.raises(WorkloadError, match="CEI 'bad'") as info:
        _wl(CEI("ok", "p", (EI(0, 0, 0),)), CEI("bad", "p", (EI(1, 1, 1), ei))).validate()
    assert fragment in str(info.value)


def test_budget_list_length_must_equal_chronons() -> None:
    with pytest.raises(WorkloadError, match="budget list has 3 entries"):
        _wl(CEI("c", "p", (EI(0, 0, 0),)), budget=Budget((1, 1, 1))).validate()


def test_default_release_is_smallest_start() -> None:
    cei = CEI("c", "p", (EI(0, 4, 5), EI(1, 2, 8)))
    assert cei.effective_release == 2
    assert cei.reveal_of(EI(0, 4, 5)) == 2
    assert cei.reveal_of(EI(0, 4, 5, 6)) == 6
