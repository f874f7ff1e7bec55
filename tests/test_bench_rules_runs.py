"""benchmarks/machinery/bench_rules.py runs on a small workload and writes every figure (it had rotted once)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
