"""``proxy sim sweep`` and ``proxy sim run``: a line per step in logs, and the first Ctrl-C stops them.

As in ``test_sim_experiments_interrupt.py``, a real subprocess in its own
session receives SIGINT as a terminal's Ctrl-C would send it (to the whole
process group), here while HiGHS solves a W=0 optimum of rank 3, an instance
it does not finish within the generous time limit given (issue 23, item 9).
"""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.proc_support import kill_group, poll_until, signal_group

pytestmark = pytest.mark.slow

PROXY = Path(sys.executable).with_name("proxy")
HARD = ["--window", "0", "--exact-rank", "--rank", "3"]  # the optimum runs to its time limit


def _interrupt_after(args: list[str], marker: str, cwd: Path) -> tuple[subprocess.Popen[str], str, str]:
    """Start ``proxy …``, send SIGINT to its group once a stderr line starts with ``marker``."""
    proc = subprocess.Popen([str(PROXY), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=cwd)
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if line.startswith(marker):
                break
        else:
            pytest.fail(f"no {marker!r} line; stderr: {''.join(seen)[-2000:]}")
        signal_group(proc.pid, signal.SIGINT)  # what Ctrl-C on a terminal does
        out, rest = proc.communicate(timeout=120)  # a hang guard, not a speed claim
    finally:
        if proc.poll() is None:  # only on a failure: otherwise the group's end is checked below
            kill_group(proc)
    _assert_group_gone(proc.pid)
    return proc, out, "".join(seen) + rest


def _assert_group_gone(pgid: int) -> None:
    """No process of the command's group (the solver's worker) is left running."""
    # A hang guard: init reaps the orphans it inherits.
    if not poll_until(lambda: not signal_group(pgid, 0), within=30, every=0.1):
        signal_group(pgid, signal.SIGKILL)
        pytest.fail("a process of the interrupted command was still running")


def test_sweep_first_ctrl_c_keeps_finished_runs(tmp_path: Path) -> None:
    out = tmp_path / "sweep.csv"
    proc, stdout, err = _interrupt_after(
        ["sim", "sweep", "-p", "mrsf-p", "--seeds", "1", "--optimal", "--time-limit", "600",
         "--vary", "rank=1,3", "--csv", str(out), *HARD[:2]],
        "sweep: run 2/", tmp_path)
    assert proc.returncode == 130, err[-2000:]
    runs = [line for line in err.splitlines() if line.startswith("sweep: run ")]
    assert runs[0].startswith("sweep: run 1/4: rank=1 seed 0 optimal completeness ")
    with out.open(encoding="utf-8") as fh:
        kept = list(csv.DictReader(fh))
    assert len(kept) == len(runs) == 2  # rank 1 finished; rank 3's optimum was cut short
    assert {r["rank"] for r in kept} == {"1"}
    assert f"interrupted: kept 2 of 4 finished runs in {out}" in err
    assert "mrsf-p" in stdout  # the table of what is done
    assert "Traceback" not in err


def test_run_first_ctrl_c_stops_the_solver(tmp_path: Path) -> None:
    workload = tmp_path / "w.json"
    subprocess.run([str(PROXY), "sim", "gen", "-o", str(workload), *HARD], check=True, capture_output=True)
    result = tmp_path / "r.json"
    proc, stdout, err = _interrupt_after(
        ["sim", "run", str(workload), "-p", "optimal", "--time-limit", "600", "-o", str(result)],
        "solving optimal with HiGHS", tmp_path)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: optimal stopped during the solve; nothing written" in err
    assert not result.exists()
    assert stdout == ""
    assert "Traceback" not in err


def test_run_prints_a_line_per_tenth_of_the_epoch_in_logs(tmp_path: Path) -> None:
    workload = tmp_path / "w.json"
    subprocess.run([str(PROXY), "sim", "gen", "-o", str(workload), "-n", "50", "-m", "10", "-K", "100"],
                   check=True, capture_output=True)
    proc = subprocess.run([str(PROXY), "sim", "run", str(workload), "-p", "mrsf-p"], capture_output=True,
                          text=True, check=True)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("run: mrsf-p: chronon ")]
    assert lines[-1] == "run: mrsf-p: chronon 100/100"
    assert len(lines) == 10
    assert proc.stdout.startswith("mrsf-p: captured ")
