"""Figure reproduction: the sweep behind a figure, its CSV and its PNG."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proxy.sim.cli import sim_app
from proxy.sim.experiments import (
    FIGURES,
    RUNTIME_HEADER,
    RUNTIME_PANELS,
    Figure,
    RuntimePanel,
    figure_names,
    markdown_table,
    mean_std,
    run_figure,
    run_runtime_panel,
)
from proxy.sim.generate import GenParams

TINY = GenParams(resources=50, profiles=20, chronons=150, lam=8.0)


def test_the_paper_figures_are_defined() -> None:
    assert figure_names() == ["fig6", "fig7", "fig8a", "fig8b", "fig9", "fig10a", "fig10b", "fig11"]
    fig7 = next(f for f in FIGURES if f.name == "fig7")
    assert fig7.optimal and fig7.base.window == 0 and fig7.base.exact_rank
    assert fig7.values == (1, 2, 3, 4, 5)
    # "MRSF(P) equals M-EDF(P) on width-1 EIs" needs both on Figure 7.
    assert {"mrsf-p", "m-edf-p", "s-edf-p", "s-edf-np", "wic"} <= set(fig7.policies)
    # §4.4: λ=20 with 100-500 profiles, then λ=50 up to 2500 profiles.
    small, large = RUNTIME_PANELS
    assert (small.base.lam, small.profiles[0], small.profiles[-1]) == (20.0, 100, 500)
    assert (large.base.lam, large.profiles[0], large.profiles[-1]) == (50.0, 500, 2500)
    assert small.solvers_at(100) == ["lp-bound", "optimal"] and large.solvers_at(500) == []


def test_run_figure_writes_csv_and_png(tmp_path: Path) -> None:
    fig = Figure("tiny", "budget on a tiny workload", TINY, "budget", (1, 3), ("mrsf-p", "s-edf-np"), optimal=True)
    csv_path, png_path = run_figure(fig, tmp_path, [0, 1])
    with csv_path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 2 * 3
    assert {r["policy"] for r in rows} == {"mrsf-p", "s-edf-np", "optimal"}
    for budget in ("1", "3"):
        for seed in ("0", "1"):
            mine = {r["policy"]: r for r in rows if r["budget"] == budget and r["seed"] == seed}
            assert int(mine["mrsf-p"]["captured"]) <= int(mine["optimal"]["captured"])
    # More budget never hurts the optimum.
    opt = {r["budget"]: int(r["captured"]) for r in rows if r["policy"] == "optimal" and r["seed"] == "0"}
    assert opt["3"] >= opt["1"]
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runtime_panel_times_every_policy_per_ei(tmp_path: Path) -> None:
    panel = RuntimePanel("tiny8", "runtime on a tiny workload", TINY, (10, 20), ("mrsf-p", "wic"),
                         (("lp-bound", 20), ("optimal", 10)))
    csv_path, png_path = run_runtime_panel(panel, tmp_path, [0, 1], time_limit=20)
    with csv_path.open(encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ()) == RUNTIME_HEADER
        rows = list(reader)
    # m=10: two solvers + two policies; m=20: the optimum is not run (its limit is m=10).
    assert len(rows) == 2 * (4 + 3)
    assert {r["policy"] for r in rows if r["profiles"] == "20"} == {"lp-bound", "mrsf-p", "wic"}
    for m in ("10", "20"):
        for seed in ("0", "1"):
            mine = {r["policy"]: r for r in rows if r["profiles"] == m and r["seed"] == seed}
            # Every policy ran on the same workload.
            assert len({(r["ceis"], r["eis"]) for r in mine.values()}) == 1
            for r in mine.values():
                # The seconds are written to 1 µs, so the quotient is known to ±0.5 µs / EIs.
                tol = 1 / int(r["eis"]) + 1e-3
                assert float(r["us_per_ei"]) == pytest.approx(1e6 * float(r["cpu_s"]) / int(r["eis"]), abs=tol)
                assert float(r["wall_us_per_ei"]) == pytest.approx(1e6 * float(r["runtime_s"]) / int(r["eis"]), abs=tol)
                assert int(r["eis"]) >= int(r["ceis"]) > 0
            # The LP bounds every schedule; the optimum bounds every online policy.
            assert int(mine["lp-bound"]["captured"]) >= int(mine["mrsf-p"]["captured"])
            if m == "10":
                assert mine["optimal"]["status"] == "optimal"
                assert int(mine["optimal"]["captured"]) >= max(int(mine[p]["captured"]) for p in ("mrsf-p", "wic"))
                assert int(mine["lp-bound"]["captured"]) >= int(mine["optimal"]["captured"])
    eis = {m: {r["eis"] for r in rows if r["profiles"] == m and r["seed"] == "0"} for m in ("10", "20")}
    assert int(eis["20"].pop()) > int(eis["10"].pop())  # more profiles, more EIs
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_markdown_table_gives_mean_and_sample_std(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    path.write_text("rank,seed,policy,completeness\n1,0,a,0.5\n1,1,a,0.7\n1,0,b,1.0\n2,0,a,0.2\n2,0,b,\n",
                    encoding="utf-8")
    assert markdown_table(path, "rank", "completeness", digits=2).splitlines() == [
        "| rank | seeds | a | b |",
        "|---|---:|---:|---:|",
        "| 1 | 2 | 0.60 ± 0.14 | 1.00 ± 0.00 |",
        "| 2 | 1 | 0.20 ± 0.00 |  |",
    ]
    with pytest.raises(ValueError, match="no column 'lam'"):
        markdown_table(path, "lam", "completeness")
    assert mean_std([1.0, 3.0]) == pytest.approx((2.0, 2**0.5))


@pytest.mark.parametrize(("args", "message"), [
    (["--figure", "fig12"], "unknown figure 'fig12'"),
    (["--seeds", "0"], "--seeds must be >= 1"),
])
def test_cli_rejects_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    res = CliRunner().invoke(sim_app, ["experiments", "--out", str(tmp_path), *args])
    assert res.exit_code == 2
    assert message in res.output
    assert not any(tmp_path.iterdir())  # nothing ran
