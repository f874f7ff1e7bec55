"""``PROXY_LOG_FORMAT=json``: every line a real ``proxy serve`` writes is one JSON object (issue 23).

uvicorn, Alembic and APScheduler log through the standard library; they go
through the same renderer as the service's structlog events. APScheduler's
INFO chatter is logged at DEBUG.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from proxy.ports import free_port
from proxy.service.logs import _DemoteChatter

PROXY = Path(sys.executable).with_name("proxy")



@pytest.mark.slow
def test_every_line_of_a_real_serve_run_is_json(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PROXY_")},
        "PROXY_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'proxy.sqlite3'}",
        "PROXY_LOG_FORMAT": "json",
        "PROXY_LOG_LEVEL": "DEBUG",
        "PROXY_CHRONON_SECONDS": "0.2",
    }
    proc = subprocess.Popen([str(PROXY), "serve", "--port", str(port)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60  # generous: the machine is shared
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("proxy serve did not become ready")
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/feeds", timeout=5).status_code == 401
        time.sleep(1.0)  # a few chronons
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    lines = [line for line in (out + err).splitlines() if line.strip()]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON line: {line!r}")
    assert all(isinstance(r, dict) and "event" in r and "level" in r and "timestamp" in r for r in records)
    loggers = {r.get("logger", "") for r in records}
    assert "uvicorn.error" in loggers  # "Started server process", "Application startup complete."
    assert any(name.startswith("alembic") for name in loggers)  # the migrations on start
    scheduler = [r for r in records if r.get("logger", "").startswith("apscheduler")]
    assert scheduler and all(r["level"] == "debug" for r in scheduler), scheduler
    events = {r["event"] for r in records}
    assert {"service_started", "service_stopped"} <= events  # the service's own structlog events


@pytest.mark.parametrize(
    ("configured", "name", "level", "shown", "as_level"),
    [
        (logging.INFO, "apscheduler.executors.default", logging.INFO, False, logging.DEBUG),
        (logging.DEBUG, "apscheduler.scheduler", logging.INFO, True, logging.DEBUG),
        (logging.INFO, "apscheduler.scheduler", logging.WARNING, True, logging.WARNING),
        (logging.INFO, "uvicorn.error", logging.INFO, True, logging.INFO),
    ],
)
def test_scheduler_chatter_is_debug(configured: int, name: str, level: int, shown: bool, as_level: int) -> None:
    record = logging.LogRecord(name, level, __file__, 1, "Running job", None, None)
    assert _DemoteChatter(configured).filter(record) is shown
    assert record.levelno == as_level and record.levelname == logging.getLevelName(as_level)
