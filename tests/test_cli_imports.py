"""The command line loads only what a command uses (issue: a CLI that answers at once).

Each check runs a real ``python -X importtime -m proxy.cli …`` and reads the
modules it imported from the interpreter's own import log, so a command that
starts importing the service shows up here, whatever path the import takes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from proxy import __version__

# The service's heavy stack: web framework, database, HTTP client and fetcher.
SERVICE_STACK = ("fastapi", "sqlalchemy", "httpx", "aiohttp", "uvicorn", "proxy.feeds", "proxy.service",
                 "proxy.store", "proxy.api")

_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$")


def _imported_by(*args: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "proxy.cli", *args],
        capture_output=True, text=True, cwd=cwd, timeout=120,
    )
    modules = {m.group(1) for line in proc.stderr.splitlines() if (m := _IMPORTED.match(line))}
    return proc, modules


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == s or m.startswith(s + ".") for s in SERVICE_STACK))


def test_import_log_is_read() -> None:
    """The check can fail: a command that does load the store is seen doing so."""
    proc, modules = _imported_by("db", "current", "--database-url", "sqlite:///:memory:")
    assert "sqlalchemy" in modules and "proxy.store" in modules, proc.stderr[-2000:]


def test_import_proxy_cli_pulls_in_no_service_stack() -> None:
    code = "import json, sys, proxy.cli; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert "proxy.cli" in loaded
    assert _heavy(loaded) == []


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("sim", "run", "--help"), ("serve", "--help"),
                                  ("plan", "--help")])
def test_help_and_version_load_no_service_stack(args: tuple[str, ...]) -> None:
    proc, modules = _imported_by(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "proxy.cli" in modules
    assert _heavy(modules) == []


def test_version_flag_prints_the_package_version() -> None:
    proc, _ = _imported_by("--version")
    assert proc.stdout.strip() == f"proxy {__version__}"


def test_sim_run_loads_the_engine_but_not_the_service(tmp_path: Path) -> None:
    wl, res = tmp_path / "wl.json", tmp_path / "res.json"
    gen = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "sim", "gen", "--seed", "3", "-n", "50", "-m", "10",
         "-K", "100", "--out", str(wl)],
        capture_output=True, text=True, timeout=120,
    )
    assert gen.returncode == 0, gen.stderr[-2000:]
    proc, modules = _imported_by("sim", "run", str(wl), "--policy", "mrsf-p", "--out", str(res))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(res.read_text())["policy"] == "mrsf-p"
    assert "proxy.core.engine" in modules
    assert _heavy(modules) == []
