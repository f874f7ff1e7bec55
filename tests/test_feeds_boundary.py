"""proxy/feeds knows HTTP and parsing only: no SQL, no scheduling, no upper layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FEEDS = Path(__file__).resolve().parents[1] / "proxy" / "feeds"
FORBIDDEN = {
    "sqlalchemy", "asyncpg", "aiosqlite", "alembic", "apscheduler", "fastapi",
    "proxy.core", "proxy.store", "proxy.service", "proxy.api", "proxy.rules", "proxy.sim",
}


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", sorted(FEEDS.glob("*.py")), ids=lambda p: p.name)
def test_feeds_module_imports_nothing_forbidden(path: Path) -> None:
    bad = [
        name for name in _imports(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert bad == [], f"{path.name} imports {bad}"


def test_public_api_is_importable_from_the_package() -> None:
    import proxy.feeds as feeds

    for name in feeds.__all__:
        assert hasattr(feeds, name), name
