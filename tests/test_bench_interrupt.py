"""``proxy bench live``: a line per step in logs, and the first Ctrl-C stops it keeping finished runs.

A real subprocess in its own session receives SIGINT as a terminal's Ctrl-C
would send it (to the whole process group, ``proxy serve`` child included)
during its second run (issue 23, item 9).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.proc_support import kill_group, poll_until, signal_group

pytestmark = pytest.mark.slow

PROXY = Path(sys.executable).with_name("proxy")


def test_bench_live_first_ctrl_c_keeps_finished_runs_and_leaves_no_service(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    proc = subprocess.Popen(
        [str(PROXY), "bench", "live", "--feeds", "8", "--profiles", "5", "--chronons", "40", "--lam", "5",
         "--rank", "2", "--window", "5", "--budget", "1,2", "--chronon-seconds", "0.2", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("bench live: run 2/2: poisson-mrsf-p-C2: chronon "):
                break
        else:
            pytest.fail(f"no chronon line of the second run; stderr: {''.join(seen)[-2000:]}")
        signal_group(proc.pid, signal.SIGINT)  # what Ctrl-C on a terminal does
        stdout, rest = proc.communicate(timeout=120)  # a hang guard, not a speed claim
    finally:
        if proc.poll() is None:  # only on a failure: otherwise the group's end is checked below
            kill_group(proc)
    err = "".join(seen) + rest
    assert proc.returncode == 130, err[-2000:]
    # Not a terminal: lines per step, numbered against the runs.
    assert "bench live: run 1/2: poisson-mrsf-p-C1: starting the service and the farm" in err
    assert "bench live: run 1/2: poisson-mrsf-p-C1: chronon 40/40" in err
    # The first run is kept whole; the second has no result.
    kept = out / "poisson-mrsf-p-C1.json"
    assert json.loads(kept.read_text(encoding="utf-8"))["tag"] == "poisson-mrsf-p-C1"
    assert not (out / "poisson-mrsf-p-C2.json").exists()
    assert f"interrupted: kept {kept}; poisson-mrsf-p-C2 stopped at chronon " in err
    assert "poisson-mrsf-p-C1: live " in stdout and "poisson-mrsf-p-C2: live " not in stdout
    assert "Traceback" not in err
    # No process of the group (the `proxy serve` child) is left running.
    # A hang guard: init reaps the orphans it inherits.
    if not poll_until(lambda: not signal_group(proc.pid, 0), within=30, every=0.1):
        signal_group(proc.pid, signal.SIGKILL)
        pytest.fail("a process of the interrupted benchmark was still running")
