"""``proxy bench live --rule-kind trigger|mixed`` (issue 43 item 7): the workloads, and a tiny run of each."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proxy.bench.live import (
    BenchError,
    check_rule_kind,
    live_equivalent,
    poisson_workload,
    reader_view,
)
from proxy.bench.workload_rules import MIXED_CYCLE, rules_workload
from proxy.cli import app
from proxy.rules.schemas import ProfileSpec


def _base(seed: int = 3):
    return poisson_workload(resources=12, profiles=9, chronons=60, lam=8, rank=3, window=5, seed=seed)


def test_a_trigger_workload_is_seeded_and_its_ceis_are_the_matching_updates_then_the_queries() -> None:
    bw = rules_workload(_base(), "trigger", seed=3)
    assert bw == rules_workload(_base(), "trigger", seed=3)  # the same seed, the same workload
    assert bw.rules is not None and bw.rules.kind == "trigger"
    assert bw.rules != rules_workload(_base(), "trigger", seed=4).rules
    check_rule_kind("trigger", bw)
    with pytest.raises(BenchError, match="needs a workload built for it"):
        check_rule_kind("mixed", bw)
    k, w = bw.workload.chronons, bw.window
    for p, (name, rule) in enumerate(zip(bw.profile_names, bw.rules.profiles, strict=True)):
        assert rule.kind == "trigger" and rule.keyword == f"topic{p}"
        t, *queries = rule.feeds
        assert queries and t not in queries and bw.watched[p] == rule.feeds
        ceis = [c for c in bw.workload.ceis if c.profile == name]
        tagged = [u for u in bw.updates[t] if rule.keyword in bw.rules.keywords.get((t, u), ()) and u + 1 < k]
        assert [c.eis[0].start for c in ceis] == tagged  # one CEI per update carrying the keyword
        for c in ceis:
            u = c.eis[0].start
            assert c.eis[0].resource == t and c.eis[0].finish == min(u + w, k - 1)
            assert [(e.resource, e.start, e.finish) for e in c.eis[1:]] == [
                (q, u + 1, min(u + 1 + w, k - 1)) for q in queries]
    tagged_all = sum(1 for words in bw.rules.keywords.values() for _ in words)
    updates = sum(len(bw.updates[r.feeds[0]]) for r in bw.rules.profiles)
    assert 0.25 < tagged_all / updates < 0.75  # about MATCH_SHARE
    # The updates without the keyword are held by the live-equivalent simulator, never scored.
    eq = live_equivalent(bw)
    held = [c for c in eq.ceis if c.id.startswith("tail-")]
    assert len(held) == updates - tagged_all and all(len(c.eis) == 1 for c in held)
    assert len(eq.ceis) == len(bw.workload.ceis) + len(held)
    assert reader_view(bw).ceis  # the readers read it as any other


def test_each_schedule_is_scored_on_query_eis_from_its_own_trigger_probe() -> None:
    from proxy.bench.metrics import ProbeRec, cei_outcome

    bw = rules_workload(_base(), "trigger", seed=3)
    assert bw.rules is not None
    anchor = bw.rules.anchored(bw.window)
    cei = bw.workload.ceis[0]
    t, *queries = cei.eis
    u, w = t.start, bw.window
    late = t.start + 3  # the trigger probed three chronons into its window
    probes = [ProbeRec(t.resource, late, late + 0.01), *(ProbeRec(q.resource, late + w, late + w + 0.01) for q in queries)]
    (own,) = anchor([cei], probes)
    assert own.eis[0] == t
    assert [(e.resource, e.start, e.finish) for e in own.eis[1:]] == [(q.resource, late, late + w) for q in queries]
    # Captured on its own CEI; the generated one (query EIs from u + 1) would miss the query probes.
    assert cei_outcome([own], probes).captured == 1
    assert cei_outcome([cei], probes).captured == 0
    # A trigger probe that ran before the entry was published does not fire it; no probe: kept as is.
    assert anchor([cei], probes, {(t.resource, u): late + 0.5}) == (cei,)
    assert anchor([cei], []) == (cei,)


def test_the_posted_rules_are_valid_and_the_farm_writes_the_keywords() -> None:
    bw = rules_workload(_base(), "mixed", seed=3)
    assert bw.rules is not None
    kinds = [r.kind for r in bw.rules.profiles]
    assert kinds == [MIXED_CYCLE[p % 3] for p in range(len(kinds))]
    for p, rule in enumerate(bw.rules.profiles):
        body = bw.rules.rule_body(p, [100 + r for r in rule.feeds], "1s")
        spec = ProfileSpec.model_validate({"name": f"p{p}", "rules": [body]})
        kind = spec.rules[0].kind if spec.rules[0].watch is None else "watch"
        assert kind == rule.kind, body
        if rule.kind == "trigger":
            assert body["trigger"]["when"] == {"contains": [rule.keyword]}
            assert [q["feed"] for q in body["query"]] == [str(100 + r) for r in rule.feeds[1:]]
        elif rule.kind == "alert":
            assert len(rule.feeds) == 1
            name = bw.profile_names[p]
            assert [c.eis[0].start for c in bw.workload.ceis if c.profile == name] == list(bw.updates[rule.feeds[0]])
    # Entry seq 1 is the placeholder; update i of feed r is entry 2 + i.
    text = bw.rules.entry_text(bw)
    for (r, u), words in bw.rules.keywords.items():
        title, _ = text(str(r), 2 + bw.updates[r].index(u))
        assert all(re.search(rf"\b{w}\b", title) for w in words), title
    quiet = [(r, i) for r, ups in enumerate(bw.updates) for i, u in enumerate(ups) if (r, u) not in bw.rules.keywords]
    assert quiet and all("topic" not in text(str(r), 2 + i)[0] for r, i in quiet)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["trigger", "mixed"])
def test_a_tiny_live_run_of_trigger_and_mixed_rules_through_the_cli(tmp_path: Path, kind: str) -> None:
    """The rules reach the service as posted, a trigger fires on its keyword and probes its query
    feeds, and the run is scored and set beside the readers as the other kinds are."""
    res = CliRunner().invoke(app, [
        "bench", "live", "--feeds", "8", "--profiles", "6", "--chronons", "40", "--lam", "6",
        "--rank", "2", "--window", "5", "--budget", "3", "--chronon-seconds", "0.2",
        "--service", "inline", "--reader-orders", "4", "--rule-kind", kind, "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    tag = f"poisson-mrsf-p-C3-{kind}"
    number = r"\d+\.\d%"
    assert re.search(rf"^{tag}: live {number}  sim {number}  sim\(lag\) {number}  probes [1-9]\d*  "
                     rf"round-robin {number}  adaptive {number}$", res.output, re.M), res.output
    result = json.loads((tmp_path / f"{tag}.json").read_text())
    assert result["config"]["rule_kind"] == kind and result["ceis"] > 0
    assert 0 <= result["live"]["cei_completeness"] <= 1
    assert result["readers"]["round-robin"]["probes"] == result["live"]["probes"]
    with sqlite3.connect(tmp_path / f"{tag}.sqlite3") as db:
        specs = [json.loads(s) for (s,) in db.execute("SELECT spec FROM rules")]
        ranks = {n for (n,) in db.execute("SELECT COUNT(*) FROM eis GROUP BY cei_id")}
    triggers = [s for s in specs if s.get("query")]
    assert triggers and all("contains" in s["trigger"]["when"] for s in triggers)
    if kind == "mixed":
        assert any("watch" in s for s in specs) and any("trigger" in s and not s.get("query") for s in specs)
    # Some trigger fired on its keyword: its CEI holds the query EIs beside the trigger's.
    assert max(ranks) >= 2, ranks
