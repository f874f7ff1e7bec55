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
from tests.proc_support import poll_until, signal_process

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
    # Files, not pipes: nobody reads a pipe while it runs, and DEBUG fills one (64 KiB) fast.
    stdout, stderr = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with stdout.open("w") as out_sink, stderr.open("w") as err_sink:
        proc = subprocess.Popen([str(PROXY), "serve", "--port", str(port)], env=env, cwd=tmp_path,
                                stdout=out_sink, stderr=err_sink, text=True)

    def ready() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def scheduler_logged() -> bool:  # its jobs run on the chronons after the start
        return '"logger": "apscheduler' in stdout.read_text() + stderr.read_text()

    try:
        if not poll_until(ready, within=60, every=0.2):  # generous: the machine is shared
            pytest.fail("proxy serve did not become ready")
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/feeds", timeout=5).status_code == 401
        time.sleep(1.0)  # a few chronons
        poll_until(scheduler_logged, within=30, every=0.2)  # more on a loaded machine
    finally:
        signal_process(proc, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            raise
    out, err = stdout.read_text(), stderr.read_text()
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
