"""Helpers for the scale-out tests (issue 21): a private NATS JetStream server, role processes.

``nats_server`` starts ``nats-server -js`` on a free port with its own store
directory, so tests never touch (or restart) the machine's shared broker on
4222. It is skipped when the binary is missing, unless ``PROXY_REQUIRE_BROKER=1``
(CI: ``.ci/run`` sets it), then it fails.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from proxy.ports import free_port
from tests.proc_support import kill, stop

NATS_SERVER = shutil.which("nats-server") or next(
    (p for p in ("/usr/sbin/nats-server", "/usr/bin/nats-server") if os.path.exists(p)), None)



def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class NatsServer:
    """One private nats-server with JetStream; :meth:`restart` keeps port and store."""

    def __init__(self, store_dir: Path) -> None:
        assert NATS_SERVER is not None
        self.port = free_port()
        self.store_dir = store_dir
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        assert NATS_SERVER is not None
        log = (self.store_dir / "nats.log").open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd",
            str(self.store_dir), stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 30  # a deadline, not a count of tries: the machine is shared
        while time.monotonic() < deadline:
            if _listening(self.port):
                return
            if self.proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        raise RuntimeError(f"nats-server did not listen on {self.port} (exit code "
                           f"{self.proc.returncode}; see {self.store_dir / 'nats.log'})")

    async def kill(self) -> None:
        """SIGKILL, as a crash: JetStream recovers its file store at the next start."""
        if self.proc is not None:
            await kill(self.proc)
        self.proc = None

    async def stop(self) -> None:
        if self.proc is not None:
            await stop(self.proc, signal.SIGTERM, grace=10)
        self.proc = None

    async def restart(self, *, wipe: bool = False) -> None:
        """SIGKILL and start again; ``wipe``: without its JetStream store in between (a broker
        back without its volume: no streams, no consumers; the log file stays)."""
        await self.kill()
        if wipe:
            for path in self.store_dir.iterdir():
                if path.is_dir():
                    shutil.rmtree(path)
        await self.start()


def require_nats_server() -> None:
    """Skip the test without a nats-server binary (fail it under PROXY_REQUIRE_BROKER=1)."""
    if NATS_SERVER is not None:
        return
    reason = "nats-server not installed (apt-get install nats-server)"
    if os.environ.get("PROXY_REQUIRE_BROKER") == "1":
        pytest.fail(f"{reason} (PROXY_REQUIRE_BROKER=1)")
    pytest.skip(reason)


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    require_nats_server()
    store = tmp_path / "jetstream"
    store.mkdir()
    server = NatsServer(store)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def role_env(database_url: str, broker_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    env.update({
        "PROXY_DATABASE_URL": database_url,
        "PROXY_BROKER_URL": broker_url,
        "PROXY_ALLOW_PRIVATE_NETWORKS": "true",
        "PROXY_PER_HOST_CONCURRENCY": "50",
        "PROXY_PER_HOST_MIN_DELAY_SECONDS": "0",
        "PROXY_RESPECT_CACHE_HINTS": "false",
        "PROXY_RETENTION_DAYS": "0",
        "PROXY_HTTP_TOTAL_TIMEOUT_SECONDS": "30",
        "PROXY_HTTP_READ_TIMEOUT_SECONDS": "30",
        "PROXY_LOG_FORMAT": "json",
        "PROXY_HEARTBEAT_SECONDS": "0.5",
        **extra,
    })
    return env


@asynccontextmanager
async def serve_role(role: str, env: dict[str, str], port: int,
                     log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """``proxy serve --role ROLE --port PORT`` as a real process; SIGTERM at the end."""
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy.cli", "serve", "--role", role, "--port", str(port),
            env=env, stdout=sink, stderr=sink)
    try:
        yield proc
    finally:
        await stop(proc, signal.SIGTERM, grace=15)  # a test may have killed it already
