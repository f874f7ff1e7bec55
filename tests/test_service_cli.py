"""``proxy serve``: invalid settings or a taken port stop start-up with a one-line message."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proxy.cli import app
from proxy.ports import free_port


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


@pytest.mark.slow
async def test_serve_root_path_puts_the_prefix_in_the_web_interfaces_links(tmp_path: Path) -> None:
    """A reverse proxy forwards ``/proxy/…`` with the prefix stripped: the service answers
    ``/ui`` with links, form actions and cookie path under ``/proxy/ui``."""
    import asyncio
    import sys

    import httpx

    from tests.proc_support import stop
    from tests.test_e2e_sigkill import _env
    from tests.test_e2e_support import eventually

    port = free_port()
    env = _env(f"sqlite+aiosqlite:///{tmp_path / 'p.sqlite3'}")
    log = tmp_path / "serve.log"
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy.cli", "serve", "--port", str(port), "--root-path", "/proxy/",
            env=env, stdout=sink, stderr=sink)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            async def up() -> httpx.Response | None:
                try:
                    return await client.get("/ui")
                except httpx.TransportError:
                    return None

            page = await eventually(up, within=60, what="proxy serve answering /ui")
            assert page.status_code == 200, log.read_text()
            assert 'action="/proxy/ui/sign-in"' in page.text
            assert 'href="/proxy/ui/static/ui.css"' in page.text
            assert "path=/proxy/ui" in page.headers["set-cookie"].lower()
            assert (await client.get("/ui/static/ui.js")).status_code == 200
    finally:
        await stop(proc)  # SIGTERM; it may have exited already (it failed to start)
def test_serve_on_a_taken_port_says_so_in_one_line_before_touching_the_database(tmp_path: Path) -> None:
    db = tmp_path / "proxy.sqlite3"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--port", str(port)],
                                    env={"PROXY_DATABASE_URL": f"sqlite+aiosqlite:///{db}"})
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(another proxy running? set PROXY_PORT or --port)"
    ]
    assert not db.exists()  # nothing migrated, no loop started
