"""The README's API walk-through, run as written against the local feed farm (issue 23).

The shell block under "## Using the API" is taken from README.md itself, so
this test breaks when the README drifts from the code. Only what must change
on a shared test machine changes: the three ports (8000, 8001, 8002) become free ones,
``.venv/bin/proxy`` this environment's ``proxy``, and the database a file in
the test's own directory. The block starts the hub, the farm and the proxy itself
(background jobs) and stops them at its end; whatever is left of its process
group is killed afterwards.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.ports import free_port
from tests.proc_support import signal_group

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PROXY = Path(sys.executable).with_name("proxy")


def walkthrough() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Using the API", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "README's 'Using the API' lost its shell block"
    return block.group(1)



def test_the_walkthrough_names_what_this_test_replaces() -> None:
    script = walkthrough()
    for needed in ("--port 8000", "--port 8001", "--port 8002", "127.0.0.1:8000", "127.0.0.1:8001",
                   "127.0.0.1:8002", ".venv/bin/proxy", "proxy farm publish", '"oil"'):
        assert needed in script, needed


def test_the_readme_walkthrough_runs_offline_and_the_rule_fires(tmp_path: Path) -> None:
    api, farm, hub = free_port(), free_port(), free_port()
    script = walkthrough()
    for old, new in (("8000", str(api)), ("8001", str(farm)), ("8002", str(hub)),
                     (".venv/bin/proxy", str(PROXY))):
        script = script.replace(old, new)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PROXY_")},
        "PROXY_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'proxy.sqlite3'}",
        "PROXY_LOG_FORMAT": "json",
    }
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=240)  # generous: the machine is shared
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        log = (tmp_path / "proxy.log").read_text() if (tmp_path / "proxy.log").exists() else ""
        pytest.fail(f"the walk-through did not finish\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}\n"
                    f"proxy.log: {log[-3000:]}")
    finally:
        # Only this test's own process group: the background farm and proxy if still alive.
        signal_group(proc.pid, signal.SIGTERM)
    assert proc.returncode == 0, f"stdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert "Traceback" not in out + err
    # The captured CEIs the walk-through lists include the rule's firing on the oil post...
    assert '"fired":true' in out
    # ... and the summary counts it.
    fired = re.search(r'"captured_fired":(\d+)', out)
    assert fired is not None and int(fired.group(1)) >= 1, out[-2000:]
    # Every API answer was a success: no error body anywhere.
    assert '"detail"' not in out, out[-2000:]
