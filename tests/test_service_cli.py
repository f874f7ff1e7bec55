"""``proxy serve``: invalid settings stop start-up with a message naming the variable."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from proxy.cli import app


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PROXY_BUDGET": "0"}, "PROXY_BUDGET"),
        ({"PROXY_CHRONON_SECONDS": "-1"}, "PROXY_CHRONON_SECONDS"),
        ({"PROXY_POLICY": "fastest"}, "PROXY_POLICY"),
        ({"PROXY_DATABASE_URL": "mysql://x/y"}, "PROXY_DATABASE_URL"),
    ],
)
def test_serve_refuses_invalid_settings(env: dict[str, str], named: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--port", "1"], env=env)
    assert result.exit_code == 2
    assert named in result.output
    assert "invalid settings" in result.output


def test_serve_port_option_is_validated() -> None:
    result = CliRunner().invoke(app, ["serve", "--port", "70000"])
    assert result.exit_code == 2
    assert "PROXY_PORT" in result.output


def test_serve_refuses_an_unknown_event_loop() -> None:
    result = CliRunner().invoke(app, ["serve", "--port", "1"], env={"PROXY_EVENT_LOOP": "tokio"})
    assert result.exit_code == 2
    assert "PROXY_EVENT_LOOP must be auto, uvloop or asyncio, not 'tokio'" in result.output
