"""Run the feed farm in a child process (``python -m proxy.farm serve …``).

Benchmarks use it to give the server its own core; tests use it to check the
CLI.  It does not restart a crashed farm.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from types import TracebackType
from typing import Any


class FarmProcessError(RuntimeError):
    """The farm subprocess did not start or did not stop as expected."""


class FarmProcess:
    """A farm subprocess; a context manager that starts it and stops it with SIGTERM.

    ``args`` are ``proxy farm serve`` options, e.g. ``["--feeds", "1000"]``.
    After start, ``info`` holds the parsed first line and ``url``/``port`` the
    address; after stop, ``summary`` holds the parsed ``"stopped"`` line.
    """

    def __init__(self, args: list[str], *, startup_timeout: float = 60.0) -> None:
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}
        self.summary: dict[str, Any] | None = None

    @property
    def url(self) -> str:
        return str(self.info["url"])

    @property
    def port(self) -> int:
        return int(self.info["port"])

    def start(self) -> FarmProcess:
        cmd = [sys.executable, "-m", "proxy.farm", "serve", *self.args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + self.startup_timeout
            while not sel.select(timeout=max(deadline - time.monotonic(), 0)):
                if time.monotonic() >= deadline or self.proc.poll() is not None:
                    break
        line = self.proc.stdout.readline() if self.proc.poll() is None else ""
        try:
            info = json.loads(line)
        except ValueError:
            self.stop()
            raise FarmProcessError(
                f"the farm did not print its address (exit code {self.proc.returncode}, "
                f"first line {line!r}); command: {' '.join(cmd)}"
            ) from None
        if info.get("event") != "listening":
            self.stop()
            raise FarmProcessError(f"unexpected first line from the farm: {line!r}")
        self.info = info
        return self

    def stop(self, wait: float = 15.0) -> int:
        """SIGTERM, wait for a clean exit (SIGKILL after ``wait`` s); returns the exit code."""
        proc = self.proc
        if proc is None:
            raise FarmProcessError("the farm process was never started")
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        for line in (out or "").splitlines():
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("event") == "stopped":
                self.summary = data
        return proc.returncode

    def __enter__(self) -> FarmProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.stop()
