"""``benchmarks/machinery/bench_soak.py`` briefly: a real ``proxy serve`` and farm, a few hundred chronons.

Checks that the summary has its fields and that they are sane (memory, files,
the budget, the database's growth, the retention estimate's arithmetic), never
how fast anything was: the figures of the full soak are in docs/operations.md.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "machinery"))

from bench_soak import DEFAULT_CHRONON_SECONDS, Sample, main, summarize

pytestmark = pytest.mark.slow

FIELDS = {
    "chronons", "samples", "rss_mib_first", "rss_mib_last", "rss_slope_mib_per_1000_chronons", "rss_flat",
    "open_files_first", "open_files_last", "budget", "probes_per_chronon", "budget_spent",
    "api_p50_ms_early", "api_p50_ms_late", "probes", "db_bytes_per_probe", "retention_days",
    "probes_per_day_at_default_chronon", "db_mib_under_retention", "errors_logged",
}


def test_a_short_soak_summarises_its_samples(tmp_path: Path) -> None:
    summary = main(["--chronons", "300", "--feeds", "20", "--profiles", "30", "--budget", "4",
                    "--sample-seconds", "3", "--gets", "1", "--workdir", str(tmp_path)])
    assert set(summary) >= FIELDS
    assert summary["chronons"] >= 300 and summary["samples"] >= 3
    assert summary["rss_mib_first"] > 0 and summary["rss_mib_last"] > 0
    assert math.isfinite(summary["rss_slope_mib_per_1000_chronons"])
    assert 0 < summary["open_files_last"] < 1024
    assert 0 < summary["probes_per_chronon"] <= 4 and 0 < summary["budget_spent"] <= 1
    assert summary["api_p50_ms_early"] > 0 and summary["api_p50_ms_late"] > 0
    assert summary["probes"] > 0 and summary["db_bytes_per_probe"] > 0
    assert summary["retention_days"] == 30  # the service's default, left alone
    per_day = 86_400 / DEFAULT_CHRONON_SECONDS * 4 * summary["budget_spent"]
    # From the unrounded share: the summary's budget_spent has 4 decimals, worth up to
    # 0.29 of a probe a day here, so the two roundings may differ by one.
    assert abs(summary["probes_per_day_at_default_chronon"] - per_day) <= 0.5 + 0.3
    assert summary["db_mib_under_retention"] == pytest.approx(
        summary["db_bytes_per_probe"] * per_day * 30 / 2**20, abs=0.1)
    assert summary["errors_logged"] == 0
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["summary"] == summary and len(saved["samples"]) == summary["samples"]
    with (tmp_path / "samples.csv").open() as f:
        assert len(list(csv.DictReader(f))) == summary["samples"]


def test_the_slope_is_over_the_second_half_per_thousand_chronons() -> None:
    # Flat for the first half, then +2 MiB per 1,000 chronons: the slope reads the second half only.
    samples = [Sample(seconds=c / 10, chronon=c, rss_mib=100.0 + max(0, c - 5000) * 0.002, open_files=50,
                      db_bytes=1000 + 10 * c, used=20 * c, offered=20 * c, probes=20 * c, backlog=0,
                      api_p50_ms=5.0, api_max_ms=9.0)
               for c in range(0, 10_001, 500)]
    summary = summarize(samples, budget=20, chronon=0.1, retention_days=30)
    assert summary["rss_slope_mib_per_1000_chronons"] == pytest.approx(2.0)
    assert summary["rss_flat"] is False
    assert summary["probes_per_chronon"] == 20 and summary["budget_spent"] == 1
    assert summary["db_bytes_per_probe"] == 0.5
    assert summary["probes_per_day_at_default_chronon"] == 28_800
