"""``benchmarks/policies/policy_trace_samples.py``: feed samples of a trace, whole feeds, the same for the same seed."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "policies"))

from policy_trace_samples import main, sample

ROWS = [[f"f{i % 10}", f"2026-01-{1 + i // 10:02d}T00:00:00Z"] for i in range(50)]


def test_a_sample_keeps_whole_feeds_and_is_repeatable() -> None:
    picked = sample(ROWS, 0.4, 7)
    feeds = {row[0] for row in picked}
    assert len(feeds) == 4
    assert picked == [row for row in ROWS if row[0] in feeds]  # every row of a kept feed, in order
    assert sample(ROWS, 0.4, 7) == picked
    assert any({row[0] for row in sample(ROWS, 0.4, seed)} != feeds for seed in range(8, 12))


def test_the_command_writes_one_file_per_fraction_and_seed(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    with src.open("w", newline="") as f:
        csv.writer(f).writerows([["feed_id", "timestamp_utc_iso"], *ROWS])
    assert main([str(src), "--fraction", "0.5", "--fraction", "1", "--seeds", "3-4", "--out-dir", str(tmp_path / "o")]) == 0
    names = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert names == ["s100_3.csv", "s100_4.csv", "s50_3.csv", "s50_4.csv"]
    with (tmp_path / "o" / "s50_3.csv").open(newline="") as f:
        header, *rows = list(csv.reader(f))
    assert header == ["feed_id", "timestamp_utc_iso"] and rows == sample(ROWS, 0.5, 3)
    with (tmp_path / "o" / "s100_4.csv").open(newline="") as f:
        assert list(csv.reader(f))[1:] == ROWS


@pytest.mark.parametrize("bad", [["--fraction", "0"], ["--fraction", "1.5"], ["--fraction", "0.5", "--seeds", "9-3"]])
def test_bad_options_are_refused(tmp_path: Path, bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "t.csv"), *bad, "--out-dir", str(tmp_path)])
    assert exc.value.code == 2
