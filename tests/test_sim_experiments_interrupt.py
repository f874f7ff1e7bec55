"""``proxy sim experiments``: a line per run in logs, and the first Ctrl-C stops it keeping what is done.

A real subprocess in its own session receives SIGINT as a terminal's Ctrl-C
would send it (to the whole process group) while the exact optimum of Figure 7
is being solved, after Figure 6 was written.
"""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.proc_support import kill_group, signal_group

pytestmark = pytest.mark.slow

PROXY = Path(sys.executable).with_name("proxy")


def test_first_ctrl_c_stops_and_keeps_what_is_done(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [str(PROXY), "sim", "experiments", "--out", str(out), "--figure", "fig6", "--figure", "fig7",
         "--seeds", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("experiments: run ") and ": fig7 " in line:
                break
        else:
            pytest.fail(f"no fig7 run line; stderr: {''.join(seen)[-2000:]}")
        signal_group(proc.pid, signal.SIGINT)  # what Ctrl-C on a terminal does
        rest_out, rest_err = proc.communicate(timeout=120)  # a hang guard, not a speed claim
    finally:
        if proc.poll() is None:
            kill_group(proc)
    err = "".join(seen) + rest_err
    assert proc.returncode == 130, err[-2000:]
    # Not a terminal: a line per finished run, numbered against the total.
    runs = [line for line in err.splitlines() if line.startswith("experiments: run ")]
    assert runs[0].startswith("experiments: run 1/") and ": fig6 " in runs[0]
    # Figure 6 was written whole before the Ctrl-C and is kept.
    assert (out / "fig6.png").exists()
    with (out / "fig6.csv").open(encoding="utf-8") as fh:
        fig6 = list(csv.DictReader(fh))
    assert len(fig6) == sum(": fig6 " in line for line in runs)
    # Figure 7 stopped in the middle: its finished runs are kept as CSV, without a figure.
    assert not (out / "fig7.png").exists()
    with (out / "fig7.csv").open(encoding="utf-8") as fh:
        fig7 = list(csv.DictReader(fh))
    finished = sum(": fig7 " in line for line in runs)
    assert 1 <= len(fig7) == finished
    assert f"interrupted: kept fig6 whole; fig7: {finished} finished runs in {out / 'fig7.csv'}" in err
    assert "Traceback" not in err
    assert "figures into" not in rest_out  # it did not go on to the end
