"""The docs site builds, strictly and offline, and its doors open (issue 46).

This is how CI runs `mkdocs build --strict` (`make test` runs pytest): a broken link,
a missing anchor or a generated reference page that fails to render fails here. The
build is the venv's mkdocs as a child process, into a temporary directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.settings import Settings, env_name

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).with_name("mkdocs")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PROXY_")},
           "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([str(MKDOCS), "build", "--strict", "-d", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


def test_the_home_page_has_its_three_doors(site: Path) -> None:
    home = (site / "index.html").read_text(encoding="utf-8")
    for door, href in (("How do I deploy?", "howto/deploy/"),
                       ("What does <code>PROXY_BUDGET</code> do?", "reference/settings/#PROXY_BUDGET"),
                       ("Why <code>adm-edf</code>?", "policies/#adm-edf-proxycorepolicies_coverpy")):
        assert re.search(rf'<a href="{re.escape(href)}">{re.escape(door)}</a>', home), door
    # ... and each door leads to a page that has what it promises.
    assert (site / "howto" / "deploy" / "index.html").exists()
    assert 'id="PROXY_BUDGET"' in (site / "reference" / "settings" / "index.html").read_text(encoding="utf-8")
    assert 'id="adm-edf-proxycorepolicies_coverpy"' in (site / "policies" / "index.html").read_text(
        encoding="utf-8")


def test_the_generated_settings_page_lists_every_setting(site: Path) -> None:
    page = (site / "reference" / "settings" / "index.html").read_text(encoding="utf-8")
    missing = [env_name(name) for name in Settings.model_fields if f'id="{env_name(name)}"' not in page]
    assert not missing, f"the settings reference lacks {missing}"


def test_the_generated_reference_covers_the_cli_the_api_and_the_metrics(site: Path) -> None:
    from typer.main import get_command

    from proxy.cli import app
    from proxy.service.metrics import ServiceMetrics

    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for name in getattr(get_command(app), "commands", {}):
        assert f"proxy {name}" in cli, name
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for route in ("POST /api/v1/profiles", "GET /api/v1/profiles/{profile_id}/ceis", "GET /readyz"):
        assert route in api, route
    metrics = (site / "reference" / "metrics" / "index.html").read_text(encoding="utf-8")
    for name in ServiceMetrics().exported_names():
        assert name in metrics, name


def test_the_site_loads_nothing_from_the_network(site: Path) -> None:
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text, page
        assert not re.search(r'<script[^>]+src="https?://', text), page
