"""The live benchmark end to end on a tiny workload, and its CLI and report."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proxy.bench.live import BenchError, LiveConfig, poisson_workload, run_benchmark, within_text
from proxy.bench.report import load_results, write_report
from proxy.cli import app


def test_within_text_needs_whole_seconds() -> None:
    assert within_text(10, 0.1) == "1s"
    assert within_text(10, 0.2) == "2s"
    with pytest.raises(BenchError, match="whole"):
        within_text(10, 0.25)


def test_poisson_workload_keeps_every_update_and_each_profiles_feeds() -> None:
    bw = poisson_workload(resources=20, profiles=10, chronons=100, lam=5, rank=2, window=5, seed=3)
    starts = {(e.resource, e.start) for c in bw.workload.ceis for e in c.eis}
    updates = {(r, u) for r, ups in enumerate(bw.updates) for u in ups}
    assert starts <= updates  # every EI is an update the farm will publish
    for cei in bw.workload.ceis:
        i = bw.profile_names.index(cei.profile)
        assert tuple(e.resource for e in cei.eis) == bw.watched[i]
        assert all(e.reveal == e.start for e in cei.eis)  # reveal=update


@pytest.mark.slow
async def test_tiny_live_run_agrees_with_its_ground_truth(tmp_path: Path) -> None:
    bw = poisson_workload(resources=8, profiles=5, chronons=40, lam=5, rank=2, window=5, seed=2)
    cfg = LiveConfig(policy="mrsf-p", budget=3, chronon_seconds=0.2, service="inline", lead_chronons=5)
    r = await run_benchmark(bw, cfg, tmp_path, "tiny")
    live = r["live"]
    assert r["publications"] == sum(len(u) for u in bw.updates)  # the farm played the whole schedule
    assert live["pings"].get("sent", 0) >= 0.9 * r["publications"]
    assert live["probes"] > 0 and live["budget_max"] <= 3
    assert live["failed_probes"] == 0
    # The service opened the generator's EIs from pings (a few may land a chronon late on a
    # loaded machine, which also regroups that profile's later CEIs).
    assert live["eis_agree"] >= 0.6 * live["eis_total"]
    assert 0 < live["cei_completeness"] <= 1
    # Every published entry the probes saw is in the database.
    assert live["entries_stored"] >= live["entry_completeness"] * r["publications"] - 1e-9
    assert r["readers"]["round-robin"]["probes"] == live["probes"]
    saved = json.loads((tmp_path / "tiny.json").read_text())
    assert saved["live"]["cei_completeness"] == live["cei_completeness"]
    # Re-analysis from the database and the publication log reproduces the run's figures.
    from proxy.bench.live import analyse, records_from_run

    again = analyse(bw, cfg, await records_from_run(bw, cfg, tmp_path, "tiny", saved))
    for key in ("cei_completeness", "entry_completeness", "probes", "eis_agree", "entries_stored"):
        assert again["live"][key] == live[key], key
    assert again["sim_lag"] == r["sim_lag"]
    # The readers' figures are the mean over feed orders; with one order, the feeds' own.
    for kind in ("round-robin", "adaptive"):
        reader = r["readers"][kind]
        assert reader["orders"] == 64
        assert reader["completeness_p5"] <= reader["completeness"] <= reader["completeness_p95"]
    one = analyse(bw, replace(cfg, reader_orders=1), await records_from_run(bw, cfg, tmp_path, "tiny", saved))
    for kind in ("round-robin", "adaptive"):
        assert one["readers"][kind]["orders"] == 1
        assert one["readers"][kind]["completeness"] == r["readers"][kind]["completeness_feed_order"]


@pytest.mark.slow
async def test_pull_only_first_documents_are_dated_on_the_run_s_own_timeline(tmp_path: Path) -> None:
    """Each feed's placeholder entry is dated just before the rules exist, not on the farm's epoch.

    Dated months back, it read as months of silence: every feed's update model took it for a
    dead one, and the live run drifted from its replica (docs/discovery.md, "Other workloads").
    """
    import sqlite3

    bw = poisson_workload(resources=6, profiles=4, chronons=20, lam=4, rank=2, window=5, seed=4)
    cfg = LiveConfig(policy="adm-edf", budget=2, chronon_seconds=0.2, service="inline", lead_chronons=3,
                     ping_drop_rate=1.0)
    r = await run_benchmark(bw, cfg, tmp_path, "pull")
    assert r["live"]["probes"] > 0
    with sqlite3.connect(tmp_path / "pull.sqlite3") as db:
        first_probe = db.execute("select min(started_at) from probes").fetchone()[0]
        oldest = db.execute("select min(published) from entries").fetchone()[0]
        created = db.execute("select min(created_at) from profiles").fetchone()[0]
        # Per probed feed, its oldest stored entry: the placeholder.
        placeholders = [row[0] for row in db.execute("select min(published) from entries group by feed_id")]
    span = dt.datetime.fromisoformat(first_probe) - dt.datetime.fromisoformat(oldest)
    # Within the lead and a chronon or two of set-up: seconds, not the months to the farm's epoch.
    assert dt.timedelta(0) <= span < dt.timedelta(seconds=30), (oldest, first_probe)
    # Dated before the rules were made: backlog, not a change the rules waited for.
    assert placeholders and all(p < created for p in placeholders), (placeholders, created)



def _assert_contract_lines(output: str, tag: str) -> None:
    """The two summary lines of ``proxy bench live`` that are its contract, every figure computed."""
    number = r"\d+\.\d%"
    assert re.search(rf"^{tag}: live {number}  sim {number}  sim\(lag\) {number}  probes [1-9]\d*  "
                     rf"round-robin {number}  adaptive {number}$", output, re.M), output
    two = r"(?:\d+\.\d|-)/(?:\d+\.\d|-)"
    assert re.search(rf"^{tag}: detection delay p50/p90 \(chronons\): live {two}  "
                     rf"round-robin {two}  adaptive {two}$", output, re.M), output

def _fake_result(tag: str, policy: str, budget: int, live: float) -> dict[str, object]:
    reader = {"probes": 100, "completeness": 0.1, "probes_to_match": 900, "completeness_at_match": live}
    return {
        "tag": tag, "workload": "poisson", "description": "hand-made", "command": "proxy bench live …",
        "config": {"policy": policy, "budget": budget, "chronon_seconds": 0.2, "ping_drop_rate": 0.0,
                   "ping_delay": 0.0},
        "chronons": 4, "feeds": 2, "profiles": 1, "ceis": 2, "publications": 3,
        "live": {"cei_completeness": live, "service_states": {"captured": 2}, "entry_completeness": 1.0,
                 "delay_chronons": {"p50": 0.5, "p90": 1.5}, "delays": [0.5, 1.5], "probes": 100,
                 "budget_mean": 0.5, "budget_full_share": 0.25, "eis_agree": 3, "eis_total": 4},
        "sim": {"cei_completeness": 0.9}, "sim_lag": {"cei_completeness": 0.9},
        "readers": {"round-robin": reader, "adaptive": reader},
        "curves": {"live": [None, 0.5, 1.0, 1.0], "sim": [None, 1, 1, 1], "sim_lag": [None, 1, 1, 1]},
    }


def test_report_writes_table_targets_and_pngs(tmp_path: Path) -> None:
    for tag, policy, c, live in (("a", "mrsf-p", 1, 0.88), ("b", "s-edf-p", 2, 0.5)):
        (tmp_path / f"{tag}.json").write_text(json.dumps(_fake_result(tag, policy, c, live)))
    (tmp_path / "other.json").write_text("[]")  # not a result: ignored
    results = load_results(tmp_path)
    assert [r["tag"] for r in results] == ["a", "b"]
    doc = tmp_path / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    write_report(results, doc, "proxy bench report", "notes")
    text = doc.read_text()
    assert "| mrsf-p | 1 | 0.0 | 88.0 | 90.0 | – | 90.0 | -2.0 | 100.0 | 75.0 |" in text
    assert "| mrsf-p | 1 | 0.0 | 100 | 0.50 of 1 (25.0% full) | 100.0 | 0.5 / 1.5 | 10.0 | 10.0 | 900 (9.0×) |" in text
    assert "poisson mrsf-p C=1: live − sim(lag) -2.0 points (met)" in text
    assert "poisson s-edf-p C=2: live − sim(lag) -40.0 points (MISSED)" in text
    assert "readers need ≥ 9.0× the probes (met)" in text
    assert (doc.parent / "img" / "bench_poisson_completeness.png").stat().st_size > 1000
    assert (doc.parent / "img" / "bench_poisson_delays.png").stat().st_size > 1000


def test_cli_refuses_an_unknown_workload_and_policy(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["bench", "live", "--workload", "bogus", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "--workload must be poisson or trace" in res.output
    res = runner.invoke(app, ["bench", "live", "--policy", "nope", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "nope" in res.output
    res = runner.invoke(app, ["bench", "report", "--out", str(tmp_path), "--doc", str(tmp_path / "x.md")])
    assert res.exit_code == 2
    assert "no results" in res.output


def test_tail_ceis_hold_each_profiles_unfinished_cei_until_the_end() -> None:
    from proxy.bench.live import BenchWorkload, live_equivalent, tail_ceis
    from proxy.core.model import CEI, EI, Budget, Workload

    # One profile on feeds 0 and 1: CEI 1 = (0@2, 1@3); then feed 0 updates at 8, feed 1 never.
    cei = CEI("c0", "p0", (EI(0, 2, 7, 2), EI(1, 3, 8, 3)))
    wl = Workload(chronons=20, budget=Budget(1), resources=2, ceis=(cei,))
    bw = BenchWorkload("t", wl, ((2, 8), (3,)), ((0, 1),), ("p0",), 5, "hand-made")
    (tail,) = tail_ceis(bw)
    assert tail.profile == "p0"
    # The known EI, then a phantom revealed at the last chronon so the CEI stays unsealed.
    assert tail.eis == (EI(0, 8, 13, 8), EI(0, 19, 19, 19))
    eq = live_equivalent(bw)
    assert [c.id for c in eq.ceis] == ["c0", "tail-p0"]
    assert eq.ceis[0].eis == (EI(0, 2, 7, 3), EI(1, 3, 8, 4))  # known one chronon later
    eq.validate()


def test_service_labelled_uses_the_services_resources_and_cei_ids() -> None:
    from proxy.bench.live import BenchWorkload, live_equivalent, service_labelled
    from proxy.core.model import CEI, EI, Budget, Workload

    ceis = (CEI("c0", "p0", (EI(0, 2, 7, 2), EI(1, 3, 8, 3))),
            CEI("c1", "p1", (EI(1, 3, 8, 3),)),
            CEI("c2", "p0", (EI(0, 9, 14, 9), EI(1, 10, 15, 10))))
    wl = Workload(chronons=20, budget=Budget(1), resources=2, ceis=ceis)
    bw = BenchWorkload("t", wl, ((2, 9, 12), (3, 10)), ((0, 1), (1,)), ("p0", "p1"), 5, "hand-made")
    # The service numbered the farm's feeds 0 and 1 as resources 7 and 3, and gave rules 11 and 4.
    out = service_labelled(live_equivalent(bw), bw, (11, 4), (7, 3))
    # Tails: p0 after its last start 10 has feed 0's update 12 only; p1 (hand-made with one CEI)
    # has its update 10. Each tail takes its rule's next sequence number.
    assert [(c.id, c.profile) for c in out.ceis] == [
        ("r11:0", "p0"), ("r4:0", "p1"), ("r11:1", "p0"), ("r11:2", "p0"), ("r4:1", "p1")]
    assert out.ceis[0].eis[0].resource == 7 and out.ceis[0].eis[1].resource == 3
    assert out.resources == 8
    out.validate()


def test_unclamped_gives_every_ei_its_full_window_on_a_longer_horizon() -> None:
    from proxy.bench.live import BenchWorkload, unclamped
    from proxy.core.model import CEI, EI, Budget, Workload

    # The generator clipped the EI of the update at 17 to the last chronon 19.
    wl = Workload(chronons=20, budget=Budget(1), resources=1,
                  ceis=(CEI("c0", "p0", (EI(0, 2, 7, 2),)), CEI("c1", "p0", (EI(0, 17, 19, 17),))))
    bw = BenchWorkload("t", wl, ((2, 17),), ((0,),), ("p0",), 5, "hand-made")
    out = unclamped(bw).workload
    assert out.chronons == 25
    assert [c.eis[0] for c in out.ceis] == [EI(0, 2, 7, 2), EI(0, 17, 22, 17)]


def test_a_saved_command_line_rebuilds_its_workload() -> None:
    from proxy.bench.cli import _workload_from_command

    bw = _workload_from_command(
        "proxy bench live --workload poisson --feeds 20 --lam 5 --profiles 10 --rank 2 --chronons 100 "
        "--window 5 --seed 3 --policy mrsf-p --out x")
    ref = poisson_workload(resources=20, profiles=10, chronons=100, lam=5, rank=2, window=5, seed=3)
    assert bw.workload.ceis == ref.workload.ceis
    assert bw.updates == ref.updates


def test_trace_history_is_what_each_document_shows_before_the_window(tmp_path: Path) -> None:
    """The items before the replayed window, in workload chronons (negative), the last ``keep`` per feed."""
    import datetime as dt

    from proxy.bench.live import trace_history

    day = dt.datetime(2026, 3, 10, tzinfo=dt.UTC)
    rows = ["feed_id,timestamp_utc_iso"]
    rows += [f"a,{(day - dt.timedelta(hours=h)).isoformat()}" for h in (1, 5, 12, 48)]
    rows += ["a,0001-01-01T00:00:00Z", "junk-only,not a date", f"b,{(day + dt.timedelta(hours=3)).isoformat()}"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    # One day on 24 chronons: one chronon is one hour.
    history = trace_history(path, ["a", "b"], day, day + dt.timedelta(days=1), 24, keep=3)
    assert history == ((-12.0, -5.0, -1.0), ())  # b's only item is in the window: its document starts empty


def test_busiest_window_is_never_a_window_of_placeholders(tmp_path: Path) -> None:
    """RSS-style placeholders ("Mon, 01 Jan 0001") outnumbering the real rows do not make 2001 the busiest window."""
    from proxy.bench.live import busiest_window

    day = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)
    rows = ["feed_id,published"]
    for feed in range(30):
        rows.append(f'f{feed},"Mon, 01 Jan 0001 00:00:00 +0000"')
        rows.append(f"f{feed},9999-12-31T23:59:59-01:00")
        if feed % 3 == 0:
            rows.append(f"f{feed},{(day + dt.timedelta(hours=feed)).isoformat()}")
    path = tmp_path / "rss-dates.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert busiest_window(path, 14) == (day, day + dt.timedelta(days=14), 10)


def test_trace_workload_reads_an_export_by_its_header(tmp_path: Path) -> None:
    """A three-column export in another order is the same workload as the two-column trace; swapped columns say so."""
    from proxy.bench.live import busiest_window, trace_workload

    day = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)
    stamps = [(f"f{i % 7}", day + dt.timedelta(hours=5 * i + i % 3)) for i in range(60)]
    plain = tmp_path / "plain.csv"
    plain.write_text("feed_id,timestamp_utc_iso\n" + "".join(f"{f},{t.isoformat()}\n" for f, t in stamps),
                     encoding="utf-8")
    export = tmp_path / "export.csv"
    export.write_text("title,published,feed\n" + "".join(f"entry {i},{t.isoformat()},{f}\n"
                                                        for i, (f, t) in enumerate(stamps)), encoding="utf-8")
    options = {"chronons": 50, "days": 14, "profiles": 5, "rank": 2, "window": 5, "seed": 3}
    a, b = trace_workload(plain, **options), trace_workload(export, **options)
    assert a.updates == b.updates and a.watched == b.watched and a.workload.ceis == b.workload.ceis
    assert sum(map(len, a.updates)) > 40
    swapped = tmp_path / "swapped.csv"
    swapped.write_text("".join(f"{t.isoformat()},{f}\n" for f, t in stamps), encoding="utf-8")
    with pytest.raises(BenchError, match="first column holds the timestamps"):
        busiest_window(swapped, 14)


def test_the_cli_averages_the_readers_over_as_many_orders_as_the_bench() -> None:
    # The CLI keeps its defaults literal (it imports no bench code before a command runs).
    import inspect

    from proxy.bench.baselines import READER_ORDERS
    from proxy.bench.cli import live

    assert inspect.signature(live).parameters["reader_orders"].default == READER_ORDERS
    assert LiveConfig().reader_orders == READER_ORDERS


def test_rule_kinds_post_watches_or_single_feed_alerts_and_refuse_the_rest() -> None:
    from proxy.bench.live import check_rule_kind, rule_body

    assert rule_body("watch", [4, 7], "2s") == {"name": "watch", "watch": {"feeds": ["4", "7"], "within": "2s"}}
    # An alert on update with no query and no condition, the window as its slack: one EI
    # [u, u+W] per update, as a one-feed watch has.
    assert rule_body("alert", [4], "2s") == {"name": "alert", "trigger": {"feed": "4", "on": "update",
                                                                          "slack": "2s"}}
    one = poisson_workload(resources=6, profiles=4, chronons=40, lam=4, rank=1, window=5, seed=1)
    two = poisson_workload(resources=6, profiles=4, chronons=40, lam=4, rank=2, window=5, seed=1)
    check_rule_kind("watch", two)
    check_rule_kind("alert", one)
    with pytest.raises(BenchError, match=r"--rank 1"):
        check_rule_kind("alert", two)
    for kind in ("trigger", "mixed"):  # need their own workload (tests/test_bench_live_rules.py)
        with pytest.raises(BenchError, match="needs a workload built for it"):
            check_rule_kind(kind, one)
    with pytest.raises(BenchError, match="must be one of"):
        check_rule_kind("bogus", one)
    assert LiveConfig().rule_kind == "watch"


def test_cli_refuses_alerts_on_profiles_of_several_feeds(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["bench", "live", "--rule-kind", "alert", "--rank", "3", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "single-feed alerts" in res.output, res.output
    assert not list(tmp_path.iterdir())  # refused before anything ran


@pytest.mark.slow
def test_a_tiny_live_run_of_alerts_through_the_cli(tmp_path: Path) -> None:
    """``--rule-kind alert``: every posted rule is a single-feed alert (a trigger on update
    without query or condition), its CEIs have one EI each, and both summary lines keep
    their shape with every figure computed."""
    import sqlite3

    res = CliRunner().invoke(app, [
        "bench", "live", "--feeds", "8", "--profiles", "5", "--chronons", "40", "--lam", "5",
        "--rank", "1", "--window", "5", "--budget", "3", "--chronon-seconds", "0.2",
        "--service", "inline", "--reader-orders", "4", "--rule-kind", "alert", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    tag = "poisson-mrsf-p-C3-alert"
    _assert_contract_lines(res.output, tag)
    result = json.loads((tmp_path / f"{tag}.json").read_text())
    assert result["config"]["rule_kind"] == "alert"
    assert 0 < result["live"]["cei_completeness"] <= 1
    assert result["live"]["eis_agree"] >= 0.6 * result["live"]["eis_total"] > 0
    with sqlite3.connect(tmp_path / f"{tag}.sqlite3") as db:
        specs = [json.loads(s) for (s,) in db.execute("SELECT spec FROM rules")]
        ranks = {n for (n,) in db.execute("SELECT COUNT(*) FROM eis GROUP BY cei_id")}
    assert len(specs) == 5
    for spec in specs:
        assert spec.get("query") is None and "watch" not in spec, spec  # an alert: no query
        assert spec["trigger"]["on"] == "update" and "when" not in spec["trigger"], spec
    assert ranks == {1}


@pytest.mark.slow
def test_a_pull_only_run_with_a_revisit_bound_reports_the_tail_and_the_clairvoyant(tmp_path: Path) -> None:
    """``--revisit-factor`` reaches the service (issue 45); a third line gives p50/p90/p99 of the proxy,
    both readers and the clairvoyant, after the two contract lines, which keep their shape."""
    res = CliRunner().invoke(app, [
        "bench", "live", "--feeds", "8", "--profiles", "5", "--chronons", "40", "--lam", "5",
        "--rank", "2", "--window", "5", "--budget", "1", "--chronon-seconds", "0.2", "--ping-drop-rate", "1.0",
        "--service", "inline", "--reader-orders", "2", "--revisit-factor", "1.5", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    tag = "poisson-mrsf-p-C1-revisit1.5-drop100"
    _assert_contract_lines(res.output, tag)
    three = r"(?:\d+\.\d|-)/(?:\d+\.\d|-)/(?:\d+\.\d|-)"
    assert re.search(rf"^{tag}: detection delay p50/p90/p99 \(chronons\): live {three}  "
                     rf"round-robin {three}  adaptive {three}  clairvoyant {three}$", res.output, re.M), res.output
    result = json.loads((tmp_path / f"{tag}.json").read_text())
    assert result["config"]["revisit_factor"] == 1.5
    assert set(result["sim"]["detection_delay_chronons"]) >= {"p50", "p90", "p99"}


@pytest.mark.slow
def test_a_tiny_run_with_a_push_share_counts_pushes_apart_from_probes(tmp_path: Path) -> None:
    """``--push-share`` (issue 44): half the feeds push through a real flask-websub hub, the
    service subscribes; pushed documents are observations, not probes (budget and probe
    counts leave them out), and a fourth line says what push did."""
    import sqlite3

    res = CliRunner().invoke(app, [
        "bench", "live", "--feeds", "8", "--profiles", "5", "--chronons", "40", "--lam", "5",
        "--rank", "2", "--window", "5", "--budget", "2", "--chronon-seconds", "0.2",
        "--service", "inline", "--reader-orders", "2", "--ping-drop-rate", "1", "--push-share", "0.5",
        "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    tag = "poisson-mrsf-p-C2-drop100-push50"
    assert re.search(rf"^{tag}: push: \d+/\d+ feeds subscribed, \d+ pushes; ", res.output, re.M), res.output
    result = json.loads((tmp_path / f"{tag}.json").read_text())
    live, push = result["live"], result["live"]["push"]
    assert push["share"] == 0.5 and push["pushed_feeds"]
    assert push["subscribed_feeds"] >= 1
    assert push["probes_on_pushed_feeds"] + push["probes_on_polled_feeds"] == live["probes"]
    assert live["budget_max"] <= 2  # a push spends no budget
    with sqlite3.connect(tmp_path / f"{tag}.sqlite3") as db:
        rows = db.execute("SELECT COUNT(*) FROM probes WHERE outcome = 'push'").fetchone()[0]
        feeds = {url.rsplit("/", 1)[1].split(".")[0]
                 for (url,) in db.execute(
                     "SELECT f.url FROM probes p JOIN feeds f ON f.id = p.feed_id WHERE p.outcome = 'push'")}
    assert push["pushes"] <= rows  # rows outside the run's chronons are not counted
    assert feeds <= {str(r) for r in push["pushed_feeds"]}  # only the pushing feeds pushed


@pytest.mark.slow
def test_a_pull_only_run_with_co_updates_keeps_the_contract_lines(tmp_path: Path) -> None:
    """``--co-update`` reaches the service (``PROXY_DISCOVERY_COUPDATE``, issue 45); the run's tag says so and
    its two contract lines keep their shape."""
    res = CliRunner().invoke(app, [
        "bench", "live", "--feeds", "8", "--profiles", "5", "--chronons", "40", "--lam", "5",
        "--rank", "2", "--window", "5", "--budget", "1", "--chronon-seconds", "0.2", "--ping-drop-rate", "1.0",
        "--service", "inline", "--reader-orders", "2", "--co-update", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    tag = "poisson-mrsf-p-C1-drop100-coupdate"
    _assert_contract_lines(res.output, tag)
    result = json.loads((tmp_path / f"{tag}.json").read_text())
    assert result["config"]["co_update"] is True
