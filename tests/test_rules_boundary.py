"""proxy/rules decides, it does no I/O: no HTTP, SQL, clocks or randomness, no upper layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[1] / "proxy" / "rules"
FORBIDDEN_ROOTS = {
    "asyncio", "socket", "http", "urllib", "httpx", "aiohttp", "sqlalchemy", "fastapi", "starlette",
    "random", "time", "os", "subprocess", "requests", "feedparser", "threading",
}
# design.md: rules knows the core model and parsed entries, not the store, service or API.
ALLOWED_PROJECT = ("proxy.rules", "proxy.errors", "proxy.core")


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", sorted(RULES.rglob("*.py")), ids=lambda p: p.name)
def test_rules_module_imports_nothing_impure(path: Path) -> None:
    for name in _imports(path):
        root = name.split(".")[0]
        assert root not in FORBIDDEN_ROOTS, f"{path.name} imports {name}"
        if root == "proxy":
            assert name.startswith(ALLOWED_PROJECT), f"{path.name} imports {name} from an upper layer"


def test_boundary_check_sees_imports(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom proxy.store import x\nif True:\n    import httpx\n", encoding="utf-8")
    assert _imports(bad) == ["time", "proxy.store", "httpx"]
