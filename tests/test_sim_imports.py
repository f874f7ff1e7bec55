"""The simulator's modules import each other without a circle (issue 46)."""

from __future__ import annotations

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parents[1] / "proxy" / "sim"


def _imports(module: Path) -> set[str]:
    """Every ``proxy.sim.X`` the module imports, at the top or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("proxy.sim."):
            found.add(node.module.removeprefix("proxy.sim."))
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("proxy.sim.") for a in node.names
                         if a.name.startswith("proxy.sim."))
    return found


def test_no_module_of_the_simulator_is_in_an_import_circle() -> None:
    graph = {p.stem: _imports(p) for p in SIM.glob("*.py") if p.stem != "__init__"}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    circles = sorted(name for name in graph if reaches(name, name, {name}))
    assert not circles, f"in an import circle: {circles}"
    assert "run" not in graph["pull"]  # the circle issue 46 named: pull needs only the result
