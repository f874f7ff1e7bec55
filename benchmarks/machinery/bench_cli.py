"""How fast the ``proxy`` command answers: import time and wall time per command; writes docs/cli.md.

Each command runs as ``python -X importtime -m proxy.cli ARGS`` in a fresh
interpreter; the import time is the sum of the top-level imports' cumulative
times that the interpreter itself reports (so it counts what the command
loads, not the machine's process start-up), and the wall time is the whole
process, start-up included.  The median of ``--runs`` runs is reported.

Usage: .venv/bin/python benchmarks/machinery/bench_cli.py [--runs 15] [--out docs/cli.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BEGIN, END = "<!-- bench-cli:begin -->", "<!-- bench-cli:end -->"
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("--version",),
    ("sim", "run", "--help"),
    ("serve", "--help"),
    ("farm", "serve", "--help"),
)
# A top-level import is one whose name is not indented in the log (children are).
_TOP = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| (\S.*)$")
SERVICE_STACK = ("fastapi", "sqlalchemy", "httpx")


def measure(args: tuple[str, ...]) -> tuple[float, float, bool]:
    """(import seconds, wall seconds, whether the service stack was loaded) of one run."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "proxy.cli", *args],
        capture_output=True, text=True, check=True,
    )
    wall = time.perf_counter() - start
    micros = 0
    heavy = False
    for line in proc.stderr.splitlines():
        m = _TOP.match(line)
        if m:
            micros += int(m.group(1))
            heavy = heavy or m.group(2).split(".")[0] in SERVICE_STACK
    return micros / 1e6, wall, heavy


def report(runs: int) -> str:
    rows = [
        "| command | imports (median) | imports (max) | wall time (median) | loads fastapi/sqlalchemy/httpx |",
        "|---|---:|---:|---:|---|",
    ]
    for args in COMMANDS:
        results = [measure(args) for _ in range(runs)]
        imports = [r[0] for r in results]
        walls = [r[1] for r in results]
        heavy = any(r[2] for r in results)
        rows.append(
            f"| `proxy {' '.join(args)}` | {statistics.median(imports) * 1000:.0f} ms "
            f"| {max(imports) * 1000:.0f} ms | {statistics.median(walls) * 1000:.0f} ms "
            f"| {'yes' if heavy else 'no'} |"
        )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    head = (
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, {runs} runs per command, "
        f"load average after the run {load}.\n"
        f"Command: `.venv/bin/python benchmarks/machinery/bench_cli.py --runs {runs}`.\n"
    )
    return head + "\n" + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", type=Path, default=DOC)
    args = ap.parse_args(argv)
    body = report(args.runs)
    print(body)
    text = args.out.read_text(encoding="utf-8")
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    args.out.write_text(f"{before}{BEGIN}\n{body}{END}{after}", encoding="utf-8")


if __name__ == "__main__":
    main()
