"""The named policies on hand-made pools with known answers, and the registry."""

from __future__ import annotations

import pytest

from proxy.core.engine import Engine
from proxy.core.policies import (
    OFFLINE_NAMES,
    MEdf,
    Mrsf,
    Preemption,
    SEdf,
    UnknownPolicyError,
    get_policy,
    policy_names,
)
from tests.reference_engine import ALL_POLICIES


def example2_engine() -> Engine:
    """Main paper §3.1, Example 2 / Figure 5, at T = 10 with C_T = 1.

    CEI1 (black) has four EIs: the first two already captured, EI1 active with
    5 chronons left, one more of 14 chronons not started yet.  CEI2 (gray) has
    three EIs: EI2 active with 6 chronons left and two not started (4 + 6).
    """
    eng = Engine(7)
    eng.add_cei("CEI1", "black", [(0, 0, 2), (1, 3, 5), (2, 8, 14), (3, 20, 33)])
    eng.advance(1)
    eng.probe([0])
    eng.advance(4)
    eng.probe([1])
    eng.advance(10)
    eng.add_cei("CEI2", "gray", [(4, 9, 15), (5, 20, 23), (6, 25, 30)])
    return eng


def test_example2_values_match_the_paper() -> None:
    eng = example2_engine()
    cands = eng.cei_candidates()
    by_res = dict(zip(cands.resource.tolist(), range(len(cands)), strict=True))
    assert sorted(by_res) == [2, 4]  # EI1 on resource 2, EI2 on resource 4
    ei1, ei2 = by_res[2], by_res[4]
    sedf = SEdf(Preemption.PREEMPTIVE).value(eng, cands).tolist()
    mrsf = Mrsf(Preemption.PREEMPTIVE).value(eng, cands).tolist()
    medf = MEdf(Preemption.PREEMPTIVE).value(eng, cands).tolist()
    assert (sedf[ei1], sedf[ei2]) == (5, 6)
    assert (mrsf[ei1], mrsf[ei2]) == (2, 3)
    assert (medf[ei1], medf[ei2]) == (19, 16)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # "S-EDF will stick with CEI1", "MRSF will stick with CEI1, choosing EI1",
        # "CEI1 will be preempted, since M-EDF favors EI2".
        ("s-edf-p", [2]),
        ("mrsf-p", [2]),
        ("m-edf-p", [4]),
        # Without preemption CEI1 (already started) wins for every policy.
        ("s-edf-np", [2]),
        ("mrsf-np", [2]),
        ("m-edf-np", [2]),
    ],
)
def test_example2_decisions(policy: str, expected: list[int]) -> None:
    assert example2_engine().select(1, policy) == expected


def test_non_preemptive_serves_started_cei_before_a_better_fresh_one() -> None:
    eng = Engine(4)
    eng.add_cei("started", "p", [(0, 0, 0), (1, 0, 9)])
    eng.probe([0])  # captures started's first EI at chronon 0
    eng.advance(1)
    eng.add_cei("fresh", "p", [(2, 1, 2)])  # S-EDF 2, MRSF 1, M-EDF 2: better on every value
    assert eng.select(1, "s-edf-p") == [2]
    assert eng.select(1, "mrsf-p") == [2]
    assert eng.select(1, "m-edf-p") == [2]
    assert eng.select(1, "s-edf-np") == [1]
    assert eng.select(1, "mrsf-np") == [1]
    assert eng.select(1, "m-edf-np") == [1]
    assert eng.select(2, "mrsf-np") == [1, 2]


def test_tie_break_finish_then_id_string_then_resource() -> None:
    eng = Engine(10)
    # Same MRSF value 1 everywhere; finishes 5, 5, 5, 4.
    eng.add_cei("b", "p", [(3, 0, 5)])
    eng.add_cei("a10", "p", [(7, 0, 5)])
    eng.add_cei("a9", "p", [(1, 0, 5)])  # "a10" < "a9" as strings
    eng.add_cei("z", "p", [(9, 0, 4)])  # earliest finish wins first
    assert eng.select(4, "mrsf-p") == [9, 7, 1, 3]
    eng.add_cei("c", "p", [(6, 0, 3), (5, 0, 3)])  # MRSF 2: behind every value-1 CEI; resource breaks ties
    assert eng.select(6, "mrsf-p") == [9, 7, 1, 3, 5, 6]


def test_mrsf_counts_known_eis_not_yet_started_and_medf_their_full_width() -> None:
    eng = Engine(3)
    eng.add_cei("x", "p", [(0, 0, 3), (1, 5, 9)])  # future EI: MRSF 2, M-EDF 4 + 5
    cands = eng.cei_candidates()
    assert Mrsf(Preemption.PREEMPTIVE).value(eng, cands).tolist() == [2]
    assert MEdf(Preemption.PREEMPTIVE).value(eng, cands).tolist() == [9]
    eng.advance(2)
    cands = eng.cei_candidates()
    assert MEdf(Preemption.PREEMPTIVE).value(eng, cands).tolist() == [2 + 5]


def test_wic_counts_distinct_windows_largest_first_ties_by_resource() -> None:
    eng = Engine(5)
    eng.add_cei("a", "p", [(3, 0, 4)])
    eng.add_cei("b", "q", [(3, 0, 4)])  # same window on 3: counts once
    eng.add_cei("c", "p", [(1, 0, 2)])
    eng.add_cei("d", "p", [(1, 0, 3)])  # two distinct windows on 1
    eng.add_cei("e", "p", [(4, 0, 0)])
    eng.add_cei("f", "p", [(0, 0, 9)])
    eng.add_cei("g", "p", [(2, 5, 9)])  # not active yet
    assert eng.select(5, "wic") == [1, 0, 3, 4]


def test_round_robin_cycles_over_all_resources() -> None:
    eng = Engine(5)
    picks = []
    for t in range(4):
        eng.advance(t)
        picks.append(eng.select(2, "round-robin"))
    assert picks == [[0, 1], [2, 3], [4, 0], [1, 2]]
    assert eng.select(2, "round-robin", exclude={1}) == [2]
    assert eng.select(9, "round-robin") == [2, 3, 4, 0, 1]  # C > n: each resource once


def test_registry_names_and_errors() -> None:
    assert policy_names() == [
        "s-edf-np", "s-edf-p", "mrsf-np", "mrsf-p", "m-edf-np", "m-edf-p", "wic", "round-robin", "adm-edf",
    ]
    for name in policy_names():
        assert get_policy(name).name == name
    with pytest.raises(UnknownPolicyError) as err:
        get_policy("mrsf")
    assert "'mrsf'" in str(err.value)
    assert all(name in str(err.value) for name in policy_names())
    assert isinstance(err.value, ValueError)
    for name in OFFLINE_NAMES:
        with pytest.raises(UnknownPolicyError, match="offline"):
            get_policy(name)
    with pytest.raises(UnknownPolicyError):
        Engine(1).select(1, "edf")


def _huge_engine() -> Engine:
    """Values and windows too wide to pack into one int64 key, and huge resource ids."""
    eng = Engine()
    big = 2**40
    for i in range(40):
        r = (i * 7919) % 13 + (2**55 if i % 3 == 0 else 0)
        eng.add_cei(f"h{i % 7}-{i}", "p", [(r, 0, big + i % 5), (i % 4, 0, (i * 31) % 50)])
    eng.probe([1])
    return eng


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_wide_keys_fall_back_to_exact_sorting(policy: str) -> None:
    from tests.test_engine_props import numpy_path

    eng = _huge_engine()
    expected = [eng.select(b, policy) for b in range(8)]
    with numpy_path(True):
        assert [eng.select(b, policy) for b in range(8)] == expected
    assert len(expected[7]) == 7
