"""The ``sim`` extra: the service runs without scipy, matplotlib and tqdm; commands that need
them say how to install them.

Each check runs in a fresh interpreter (``sys.modules`` of this one has them all).
"Without" is simulated by putting ``None`` in ``sys.modules``, which makes any
import of the module fail with :class:`ModuleNotFoundError` as if it were not
installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from proxy.extras import SIM_INSTALL, SIM_MODULES, missing_extra_message

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, *, blocked: frozenset[str] = frozenset(), cwd: Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in sorted(blocked))
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, check=False)


def _cli(args: list[str], *, blocked: frozenset[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return _python(f"sys.argv = ['proxy', *{args!r}]\nfrom proxy.cli import main\nmain()\n",
                   blocked=blocked, cwd=cwd)


def test_the_app_and_the_service_commands_import_no_simulator_dependency(tmp_path: Path) -> None:
    code = f"""
import json
import proxy.cli, proxy.api, proxy.service, proxy.service.demo, proxy.cli.service
import proxy.cli.store
from proxy.api import make_app
from proxy.settings import load_settings
make_app(load_settings(database_url="sqlite+aiosqlite:///{tmp_path / 'x.sqlite3'}"))
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {sorted(SIM_MODULES)!r})))
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    # The check can fail: one import of them anywhere on the way shows.
    again = _python(code.replace("import proxy.cli.store", "import proxy.cli.store, tqdm"))
    assert again.returncode == 0, again.stderr
    assert "tqdm" in json.loads(again.stdout.strip().splitlines()[-1])


def test_the_service_starts_ticks_and_stops_without_the_sim_extra(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'proxy.sqlite3'}"
    code = f"""
import asyncio
from proxy.service import ProxyService
from proxy.settings import load_settings

async def main():
    settings = load_settings(database_url={url!r}, chronon_seconds=0.05)
    async with ProxyService(settings, run_loop=False, housekeeping=False) as service:
        service.loop.tick(service.first_chronon, 0.0)
        await service.flush()
        print("last chronon", await service.store.last_chronon())

asyncio.run(main())
"""
    done = _python(code, blocked=SIM_MODULES)
    assert done.returncode == 0, done.stderr
    assert "last chronon" in done.stdout
    for args in (["db", "upgrade", "--database-url", url], ["users", "create", "bob"], ["--help"]):
        cli = _cli(args, blocked=SIM_MODULES, cwd=tmp_path)
        assert cli.returncode == 0, (args, cli.stderr)


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("extra") / "wl.json"
    done = _cli(["sim", "gen", "--seed", "1", "-n", "20", "-m", "5", "-K", "50", "--out", str(path)],
                blocked=frozenset(), cwd=path.parent)
    assert done.returncode == 0, done.stderr
    return path


@pytest.mark.parametrize(
    ("policy", "blocked", "missing"),
    [
        ("optimal", frozenset({"scipy"}), "scipy"),  # the exact optimum's own message
        ("mrsf-p", frozenset({"tqdm"}), "tqdm"),  # the entry point's message
    ],
)
def test_a_command_that_needs_the_extra_says_how_to_install_it(
    workload: Path, policy: str, blocked: frozenset[str], missing: str
) -> None:
    done = _cli(["sim", "run", str(workload), "--policy", policy], blocked=blocked,
                cwd=workload.parent)
    assert done.returncode == 1, done.stderr
    assert f"needs {missing}" in done.stderr and SIM_INSTALL in done.stderr
    assert "Traceback" not in done.stderr
    with_it = _cli(["sim", "run", str(workload), "--policy", policy], blocked=frozenset(),
                   cwd=workload.parent)
    assert with_it.returncode == 0, with_it.stderr


@pytest.mark.parametrize(
    ("exc", "names"),
    [
        (ModuleNotFoundError("no scipy", name="scipy"), "scipy"),
        (ModuleNotFoundError("no", name="matplotlib.pyplot"), "matplotlib"),
        (ModuleNotFoundError("no", name="tqdm"), "tqdm"),
        (ModuleNotFoundError("no", name="fastapi"), None),  # a broken install, not the extra
        (ModuleNotFoundError("no"), None),
        (ImportError("cannot import name x", name="scipy"), None),
        (ValueError("scipy"), None),
    ],
)
def test_missing_extra_message(exc: BaseException, names: str | None) -> None:
    message = missing_extra_message(exc)
    if names is None:
        assert message is None
    else:
        assert message is not None and f"needs {names}," in message and SIM_INSTALL in message


def test_pyproject_keeps_the_simulator_dependencies_in_the_sim_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements: list[str]) -> set[str]:
        return {r.split(";")[0].split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()
                for r in requirements}

    base = names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert names(extras["sim"]) == SIM_MODULES
    assert not base & SIM_MODULES
    assert "numpy" in base  # the engine's
    assert any("sim" in r and r.startswith("feed-monitoring-proxy[") for r in extras["dev"])


def test_the_image_installs_without_the_sim_extra() -> None:
    dockerfile = "\n".join(line for line in (ROOT / "Dockerfile").read_text(encoding="utf-8")
                           .splitlines() if not line.lstrip().startswith("#"))
    installs = [line for line in dockerfile.splitlines() if "pip wheel" in line or "pip install" in line]
    assert any("pip wheel" in line and line.rstrip().endswith(" .") for line in installs), installs
    assert not any("[" in line for line in installs), installs  # no extras at all
    assert not any(module in dockerfile for module in SIM_MODULES)
