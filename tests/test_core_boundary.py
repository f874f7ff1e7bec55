"""proxy/core is the pure decider: it must not import I/O, clocks or the rest of the project."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "proxy" / "core"

# Modules whose presence in core would mean I/O, wall clocks or global randomness.
FORBIDDEN_ROOTS = {
    "asyncio", "socket", "http", "urllib", "httpx", "aiohttp", "sqlalchemy", "fastapi",
    "random", "time", "datetime", "os", "subprocess", "requests", "feedparser", "threading",
}
ALLOWED_PROJECT = "proxy.core"


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", sorted(CORE.rglob("*.py")), ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_imports_nothing_impure(path: Path) -> None:
    for name in _imports(path):
        root = name.split(".")[0]
        assert root not in FORBIDDEN_ROOTS, f"{path.name} imports {name}"
        if root == "proxy":
            assert name.startswith(ALLOWED_PROJECT), f"{path.name} imports {name} from outside core"


def test_boundary_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom proxy.store import x\n", encoding="utf-8")
    assert _imports(bad) == ["time", "proxy.store"]
