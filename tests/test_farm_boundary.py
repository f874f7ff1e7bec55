"""proxy/farm is a component of its own: it imports nothing else of the project, and no cycle.

Every import counts here, those under ``TYPE_CHECKING`` and inside functions
too: a cycle hidden in a function body is still a cycle a reader must untangle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

FARM = Path(__file__).resolve().parents[1] / "proxy" / "farm"
# The one shared utility the farm may use: which event loop its own process runs (stdlib only).
ALLOWED_OUTSIDE = {"proxy.aio"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(FARM.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] == "proxy")
        elif (
            isinstance(node, ast.ImportFrom) and node.module and node.level == 0
            and node.module.split(".")[0] == "proxy"
        ):
            names.add(node.module)
    return names


def _graph(root: Path) -> dict[str, set[str]]:
    return {_module_name(p): _project_imports(p) for p in sorted(root.rglob("*.py"))}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the graph's own modules, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done or node not in graph:
            return None
        for dep in sorted(graph[node]):
            found = visit(dep, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for start in graph:
        found = visit(start, [])
        if found:
            return found
    return None


@pytest.mark.parametrize("path", sorted(FARM.rglob("*.py")), ids=lambda p: p.name)
def test_farm_module_imports_only_the_farm(path: Path) -> None:
    outside = {
        n for n in _project_imports(path) if not n.startswith("proxy.farm") and n not in ALLOWED_OUTSIDE
    }
    assert not outside, f"{path.name} imports {sorted(outside)} from outside the farm"


def test_farm_has_no_import_cycle() -> None:
    graph = _graph(FARM)
    # The package's face re-exports its modules; a module that imports the face is in a cycle.
    assert "proxy.farm" in graph and "proxy.farm.farm" in graph["proxy.farm"]
    assert _cycle(graph) is None


def test_cycle_check_can_fail(tmp_path: Path) -> None:
    graph = {"proxy.farm.a": {"proxy.farm.b"}, "proxy.farm.b": {"proxy.farm.a"}, "proxy.farm.c": set()}
    assert _cycle(graph) == ["proxy.farm.a", "proxy.farm.b", "proxy.farm.a"]
    assert _cycle({"proxy.farm.a": {"proxy.farm.b"}, "proxy.farm.b": set()}) is None


def test_simulator_package_holds_no_farm() -> None:
    sim = FARM.parent / "sim"
    farmish = [p.name for p in sim.glob("*.py") if "farm" in p.name]
    assert not farmish
    assert all(not n.startswith("proxy.farm") for deps in _graph(sim).values() for n in deps)


def test_importing_the_farm_loads_no_other_layer() -> None:
    code = (
        "import sys, proxy.farm; "
        "print(sorted(m for m in sys.modules if m.startswith('proxy.') and not m.startswith('proxy.farm')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
