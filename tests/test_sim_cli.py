"""``proxy sim`` through Typer's CliRunner: exit codes, messages, files written."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proxy.sim.cli import sim_app
from proxy.sim.workload_io import read_result, read_workload

runner = CliRunner()
SMALL = ["-n", "60", "-m", "20", "-K", "150", "--lam", "8"]


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    out = tmp_path / "w.json"
    res = runner.invoke(sim_app, ["gen", "--out", str(out), "--seed", "3", *SMALL, "-C", "2"])
    assert res.exit_code == 0, res.output
    return out


def test_gen_writes_a_valid_workload_with_meta(workload: Path) -> None:
    wl = read_workload(workload)
    assert (wl.resources, wl.chronons, wl.budget.at(0)) == (60, 150, 2)
    assert wl.meta["seed"] == 3
    assert isinstance(wl.meta["params"], dict) and wl.meta["params"]["lam"] == 8.0


def test_gen_options_reach_the_generator(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    res = runner.invoke(sim_app, ["gen", "-o", str(out), *SMALL, "--life", "overwrite", "--rank", "2",
                                  "--exact-rank", "--reveal", "update", "--alpha", "1.37"])
    assert res.exit_code == 0, res.output
    wl = read_workload(out)
    assert {len(c.eis) for c in wl.ceis} == {2}
    assert all(ei.reveal == ei.start for c in wl.ceis for ei in c.eis)
    assert wl.meta["params"]["life"] == "overwrite"  # type: ignore[index]


def test_gen_rejects_bad_parameters(tmp_path: Path) -> None:
    res = runner.invoke(sim_app, ["gen", "-o", str(tmp_path / "x.json"), "--life", "forever"])
    assert res.exit_code != 0
    assert "forever" in res.output
    res = runner.invoke(sim_app, ["gen", "-o", str(tmp_path / "x.json"), "-n", "0"])
    assert res.exit_code != 0
    assert "resources must be >= 1" in res.output
    assert not (tmp_path / "x.json").exists()


def test_gen_from_a_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    rows = "".join(f"f{i % 5},2026-01-01T{i % 24:02d}:{i % 60:02d}:00Z\n" for i in range(120))
    trace.write_text("feed_id,timestamp_utc_iso\nf0,0001-01-01T00:00:00Z\n" + rows, encoding="utf-8")
    out = tmp_path / "w.json"
    res = runner.invoke(sim_app, ["gen", "-o", str(out), "--trace", str(trace), "-K", "96", "-m", "4",
                                  "--trace-start", "2026-01-01T00:00:00Z", "--trace-end", "2026-01-02T00:00:00Z"])
    assert res.exit_code == 0, res.output
    assert "skipped 1 placeholder" in res.output
    wl = read_workload(out)
    assert wl.resources == 5 and wl.ceis
    assert wl.meta["trace_stats"]["placeholder"] == 1  # type: ignore[index]


def test_run_then_score_round_trip(workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = runner.invoke(sim_app, ["run", str(workload), "--policy", "mrsf-p", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "completeness" in res.output
    result = read_result(out)
    assert result.policy == "mrsf-p"
    assert result.probes == len(result.schedule) > 0
    res = runner.invoke(sim_app, ["score", str(workload), str(out)])
    assert res.exit_code == 0, res.output
    assert "ok: claims match" in res.output


def test_run_optimal_prints_status(workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    res = runner.invoke(sim_app, ["run", str(workload), "-p", "optimal", "-o", str(out), "--time-limit", "60"])
    assert res.exit_code == 0, res.output
    assert "status optimal" in res.output
    assert read_result(out).meta["status"] == "optimal"
    assert runner.invoke(sim_app, ["score", str(workload), str(out)]).exit_code == 0


def test_run_rejects_unknown_policy_and_bad_file(workload: Path, tmp_path: Path) -> None:
    res = runner.invoke(sim_app, ["run", str(workload), "-p", "fastest"])
    assert res.exit_code == 2
    assert "unknown policy 'fastest'" in res.output and "mrsf-p" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "proxy-workload/1", "chronons": 5, "budget": 1, "resources": 2,'
                   ' "ceis": [{"id": "z9", "profile": "p", "eis": [[7, 0, 1]]}]}', encoding="utf-8")
    res = runner.invoke(sim_app, ["run", str(bad), "-p", "mrsf-p"])
    assert res.exit_code == 2
    assert "CEI 'z9'" in res.output and "unknown resource 7" in res.output


def _tamper(path: Path, **changes: object) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc.update(changes)
    path.write_text(json.dumps(doc), encoding="utf-8")


def test_score_fails_on_a_wrong_claim(workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert runner.invoke(sim_app, ["run", str(workload), "-p", "s-edf-p", "-o", str(out)]).exit_code == 0
    claimed = read_result(out).captured
    _tamper(out, captured=claimed + 1)
    res = runner.invoke(sim_app, ["score", str(workload), str(out)])
    assert res.exit_code == 1
    assert f"claims captured {claimed + 1}, but the schedule captures {claimed}" in res.output


def test_score_fails_on_an_over_budget_chronon(workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert runner.invoke(sim_app, ["run", str(workload), "-p", "wic", "-o", str(out)]).exit_code == 0
    schedule = read_result(out).schedule
    # Budget is 2: three probes at chronon 0.
    extra = [[0, r] for r in range(3) if (0, r) not in schedule][:3 - sum(1 for t, _ in schedule if t == 0)]
    _tamper(out, schedule=[[t, r] for t, r in schedule] + extra, probes=len(schedule) + len(extra))
    res = runner.invoke(sim_app, ["score", str(workload), str(out)])
    assert res.exit_code == 1
    assert "chronon 0: 3 probes exceed the budget of 2" in res.output


def test_score_reports_unreadable_result(workload: Path, tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text("{", encoding="utf-8")
    res = runner.invoke(sim_app, ["score", str(workload), str(bad)])
    assert res.exit_code == 2
    assert "not valid JSON" in res.output


def test_sweep_prints_a_table_and_writes_csv(tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    res = runner.invoke(sim_app, ["sweep", *SMALL, "--seeds", "2", "--vary", "budget=1,2",
                                  "-p", "mrsf-p", "-p", "s-edf-np", "--optimal", "--lp-bound",
                                  "--csv", str(out)])
    assert res.exit_code == 0, res.output
    header = res.stdout.splitlines()[0].split()
    assert header == ["budget", "seeds", "mrsf-p", "s-edf-np", "optimal", "lp-bound", "mrsf-p/opt", "s-edf-np/opt"]
    with out.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 2 * 4
    for budget in ("1", "2"):
        for seed in ("0", "1"):
            mine = {r["policy"]: r for r in rows if r["budget"] == budget and r["seed"] == seed}
            opt = int(mine["optimal"]["captured"])
            assert mine["optimal"]["status"] == "optimal"
            assert float(mine["lp-bound"]["completeness"]) >= float(mine["optimal"]["completeness"]) - 1e-9
            for p in ("mrsf-p", "s-edf-np"):
                assert int(mine[p]["captured"]) <= opt
                assert float(mine[p]["share_of_optimum"]) == pytest.approx(int(mine[p]["captured"]) / opt)


def test_sweep_rejects_bad_vary() -> None:
    res = runner.invoke(sim_app, ["sweep", *SMALL, "--vary", "speed=1,2"])
    assert res.exit_code == 2
    assert "unknown parameter 'speed'" in res.output
    res = runner.invoke(sim_app, ["sweep", *SMALL, "--vary", "lam=x"])
    assert res.exit_code == 2
    assert "'x' is not a valid lam" in res.output


def test_run_optimal_refuses_a_model_too_large(workload: Path) -> None:
    res = runner.invoke(sim_app, ["run", str(workload), "-p", "optimal", "--max-variables", "10"])
    assert res.exit_code == 2
    assert "more than the allowed 10; use lp-bound or a smaller workload" in res.output
