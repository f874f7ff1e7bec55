"""benchmarks/machinery/bench_rules.py runs on a small workload and writes every figure (it had rotted once)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_bench_rules_writes_every_row(tmp_path: Path) -> None:
    out = tmp_path / "bench-rules.md"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/machinery/bench_rules.py"), "--rules", "200",
                    "--fanout", "5", "--out", str(out)], check=True, capture_output=True, cwd=ROOT, timeout=300)
    text = out.read_text(encoding="utf-8")
    rows = {
        "validate + install one trigger profile": r"[\d.]+ µs",
        "`on_tick`, 200 temporal rules": r"[\d.]+ ms per tick",
        "`on_probe`, 20 new entries, 5 rules on the feed": r"[\d.]+ ms per probe",
        "`on_probe` between the rules' checks": r"\d+ µs per probe",
        "`on_notification`, 200 AuctionWatch(3) rules": r"[\d.]+ µs per ping",
    }
    for row, figure in rows.items():
        line = next((x for x in text.splitlines() if x.startswith(f"| {row}")), None)
        assert line is not None, row
        assert re.search(figure, line), line


def _bench_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_rules", ROOT / "benchmarks/machinery/bench_rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_rules", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_bench_rules_matching_part_prints_its_lines_and_keeps_the_evaluator_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "bench-rules.md"
    out.write_text("# Trigger evaluator benchmark\n\nthe evaluator's figures\n", encoding="utf-8")
    _bench_module(monkeypatch).main(["--part", "matching", "--matching-rules", "20,60", "--entries", "30", "--out", str(out)])
    printed = capsys.readouterr().out
    for n in (20, 60):
        assert re.search(rf"^matching rules={n} build_s=[\d.]+ memory_mib=[\d.]+ median_us=[\d.]+ "
                         r"p99_us=[\d.]+ cpu_median_us=[\d.]+ cpu_p99_us=[\d.]+ matches_per_entry=[\d.]+ "
                         r"one_by_one_us=\d+$", printed, re.M), printed
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Trigger evaluator benchmark\n\nthe evaluator's figures\n")
    assert "## Keyword matching" in text
    assert re.search(r"^\| 60 \| [\d.]+ s \| [\d.]+ MiB \| \d+ µs / \d+ µs \| \d+ µs / \d+ µs \|", text, re.M), text
