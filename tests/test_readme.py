"""The README is the front door: keep it true to the code."""

from __future__ import annotations

import re
from pathlib import Path

from typer.main import get_command

from proxy.cli import app
from proxy.settings import settings_table_markdown

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_settings_table_lives_in_the_reference_not_in_the_readme() -> None:
    # Issue 46: the README is the front door, the table is reference. docs/configuration.md
    # holds it (tests/test_settings.py keeps it current) and the site's settings page is
    # generated from the same class (tests/test_docs_site.py).
    assert "settings-table:start" not in README, "the settings table moved to docs/configuration.md"
    configuration = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert settings_table_markdown() in configuration
    assert "docs/configuration.md" in README


def test_the_readme_is_at_most_150_lines() -> None:
    # Issue 46: what it is, a picture, the two commands, one rule end to end, links into the
    # site; everything else lives in docs/. A feature's walk-through grows it: trim it back.
    lines = README.splitlines()
    assert len(lines) <= 150, f"README.md is {len(lines)} lines; the front door holds 150"


def test_quickstart_commands_are_make_targets_and_ci_runs_the_test_command() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    quick = README.split("## Quickstart", 1)[1].split("##", 1)[0]
    assert "make run" in quick and "make test" in quick
    assert re.search(r"^run:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _code_text() -> str:
    """Fenced code blocks and inline code spans: where the README shows commands."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", README, re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", README, flags=re.S))
    text = "\n".join(blocks + spans)
    return re.sub(r"#.*$", "", text, flags=re.M)  # shell comments are prose


def test_every_cli_command_the_readme_shows_exists() -> None:
    root = get_command(app)
    commands = getattr(root, "commands", {})
    shown = re.findall(r"(?:^|[\s/])proxy ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", _code_text(), re.M)
    shown = [(a, b) for a, b in shown if a != "proxy"]  # `docker compose exec proxy proxy …`
    assert shown, "README shows no proxy command"
    for first, second in shown:
        assert first in commands, f"README shows `proxy {first}` but there is no such command"
        sub = commands[first]
        subs = getattr(sub, "commands", None)
        if subs is not None and second:
            assert second in subs, f"README shows `proxy {first} {second}` but there is no such command"


def test_docs_the_readme_points_to_exist() -> None:
    named = re.findall(r"`(docs/[a-z0-9_./-]+\.md)`", README) + re.findall(r"\]\((docs/[a-z0-9_./-]+\.md)", README)
    assert named, "README points to no docs page"
    for doc in set(named):
        assert (ROOT / doc).exists(), f"README points to {doc}, which does not exist"
