"""benchmarks/ is split by what it measures, and every script says which doc page it writes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
FOLDERS = ("machinery", "policies")
# A module whose name starts with "_" is a helper the scripts import (machinery/_procs.py),
# not a benchmark: it writes no page, and the README lists only what one runs.
SCRIPTS = sorted(p for folder in FOLDERS for p in (BENCH / folder).glob("*.py")
                 if not p.name.startswith("_"))


def test_scripts_live_only_in_the_two_folders() -> None:
    assert not list(BENCH.glob("*.py"))
    assert {p.parent.name for p in BENCH.rglob("*.py")} == set(FOLDERS)
    assert all(p.name.startswith("policy_") for p in (BENCH / "policies").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_docstring_names_the_doc_page_it_writes(script: Path) -> None:
    doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
    pages = {p.rstrip(".") for p in re.findall(r"docs/[\w./-]+\.(?:md|csv)\b", doc)}
    assert pages, f"{script.name}'s docstring names no docs/ page"
    for page in pages:
        assert (ROOT / page).is_file(), f"{script.name} names {page}, which does not exist"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_readme_lists_every_script(script: Path) -> None:
    assert f"`{script.name}`" in (BENCH / "README.md").read_text(encoding="utf-8")
