"""Rule regexes run on RE2 (issue 24.5): the patterns that froze the service for 16 s are linear.

On Python's backtracking ``re`` each of these patterns takes exponential (or
25th-degree polynomial) time on the entry below; on RE2 a search costs at most
its compiled program's size per character of text. The tests assert the
results, and count that bound (instructions x characters) instead of timing.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from proxy.rules import ProfileSpec, RevealEi, SealCei, TriggerEvaluator
from proxy.rules._regex import MAX_PROGRAM_SIZE, MAX_TEXT, compile_safe_regex
from tests.test_api import Api, _feeds, api  # noqa: F401  (api is a fixture)
from tests.test_e2e_support import motivating
from tests.test_rules_evaluator import Entry

ENTRY = "aaaaaaaaaaaaaaaaaaaaaa!"  # the farm entry of issue 24

# pattern, whether it matches ENTRY (none but the one with an empty-matching group does)
PATHOLOGICAL = [
    ("a*a*a*a*a*a*a*a*a*a*a*a*b", False),
    ("(?i)(a|a?)+$", True),  # (a|a?)+ matches the empty string right before the end
    ("(.*a){25}", False),  # 22 a's, 25 needed
    ("(a+)+$", False),
]


@pytest.mark.parametrize(("pattern", "matches"), PATHOLOGICAL)
def test_pathological_patterns_give_the_right_answer(pattern: str, matches: bool) -> None:
    compiled = compile_safe_regex(pattern)
    assert (compiled.search(ENTRY) is not None) is matches
    # The same answer as Python's re where backtracking is still cheap (a short entry).
    short = "aaaa!"
    assert (compiled.search(short) is not None) is (re.search(pattern, short) is not None)


@pytest.mark.parametrize(("pattern", "matches"), PATHOLOGICAL)
def test_pathological_patterns_cost_linear_steps(pattern: str, matches: bool) -> None:
    """RE2 simulates its program over the text: at most ``programsize`` steps per character.

    Counted, not timed: a backtracking engine explores up to 2**22 paths on this
    entry for ``(a+)+$``; RE2's bound for the longest text a rule ever sees
    (MAX_TEXT characters per field) is a few hundred million steps at most.
    """
    size = compile_safe_regex(pattern).programsize
    assert size <= 300, f"{pattern}: {size} instructions"
    steps_for_entry = size * (len(ENTRY) + 1)
    assert steps_for_entry < 2**22 // 100  # far below the backtracking paths of (a+)+$
    # Linear: doubling the text doubles the bound, whatever the pattern.
    assert size * (2 * len(ENTRY) + 1) <= 2 * steps_for_entry
    assert size * MAX_TEXT <= MAX_PROGRAM_SIZE * MAX_TEXT


@pytest.mark.parametrize(("pattern", "matches"), PATHOLOGICAL)
def test_evaluator_decides_on_the_entry_of_the_issue(pattern: str, matches: bool) -> None:
    from tests.test_rules_evaluator import CNN, FEEDS, GRID, MISH, trigger_body

    body = trigger_body({"feed": "FEED_MISH", "every": "1m", "when": {"regex": pattern}})
    ev = TriggerEvaluator(GRID)
    ev.add_profile("p", ProfileSpec.model_validate(body), FEEDS)
    ev.on_tick(0)
    [op] = ev.on_probe(MISH, 0, True, [Entry(title=ENTRY, summary=ENTRY, content="!" * MAX_TEXT)])
    if matches:
        assert isinstance(op, RevealEi) and (op.cei_id, op.resource, op.start) == ("p/0:0", CNN, 0)
    else:
        assert op == SealCei("p/0:0")


@pytest.mark.parametrize(
    ("regex", "feature"),
    [
        ("(?<=oil)gas", "lookbehind '(?<=…)' is not supported"),
        (r"(oil)\1", "backreference '\\1' is not supported"),
        ("(?!oil)", "negative lookahead '(?!…)' is not supported"),
    ],
)
async def test_api_refuses_what_re2_cannot_compile_with_a_422_naming_the_feature(
    api: Api, regex: str, feature: str  # noqa: F811
) -> None:
    mish, cnn, money = await _feeds(api, 3)
    body: Any = motivating(mish, cnn, money)
    body["rules"][0]["trigger"]["when"] = {"regex": regex}
    r = await api.client.post("/api/v1/profiles", json=body, headers=api.h())
    assert r.status_code == 422, r.text
    [detail] = r.json()["errors"]
    assert detail["loc"] == ["body", "rules", 0, "trigger", "when", "regex"]
    assert feature in detail["msg"] and "RE2" in detail["msg"]
    # The pathological ones are accepted: they run in linear time.
    body["rules"][0]["trigger"]["when"] = {"regex": "(.*a){25}"}
    r = await api.client.post("/api/v1/profiles", json=body, headers=api.h())
    assert r.status_code == 201, r.text
