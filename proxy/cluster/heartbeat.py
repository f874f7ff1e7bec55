"""Each process's row in ``cluster_processes``, refreshed every ``every`` seconds (issue 21).

``GET /api/v1/cluster`` lists the rows refreshed within three heartbeats. A
process that stops deletes its row; one killed simply stops refreshing it (and
rows silent for an hour are swept by whoever beats next). The row names the
process's lease holder id, and the listing asks the lease who leads: a killed
leader's row stops being listed as leading the moment the lease moves.

What it does not do: elect anyone (the lease does) or judge health beyond
"this process still runs and reaches the database".
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import socket
import time
from collections.abc import Callable

import structlog

from proxy.errors import StorageError
from proxy.store import Store

__all__ = ["Heartbeat", "advertised_host"]

log = structlog.get_logger("proxy.cluster")

#: Rows silent this long are deleted (a process killed long ago).
_SWEEP_AFTER = dt.timedelta(hours=1)


def advertised_host(bind: str) -> str:
    """The address others reach this process at: the bind address, or the host name for a wildcard."""
    return socket.gethostname() if bind in ("", "0.0.0.0", "::") else bind


class Heartbeat:
    """Upserts this process's row until stopped. ``holder`` is the name it campaigns under
    in the lease table (``None``: it never does); ``leads()`` gives the lease epoch while
    this process runs the chronon loop, ``None`` otherwise (a claim stored for readers
    older than migration 0008: the listing now asks the lease)."""

    def __init__(self, store: Store, *, role: str, host: str, port: int, every: float,
                 holder: str | None = None,
                 leads: Callable[[], int | None] = lambda: None,
                 wall: Callable[[], float] = time.time) -> None:
        self.store = store
        self.role = role
        self.host = host
        self.port = port
        self.every = every
        self.id = f"{role}@{host}:{port}/{os.getpid()}"
        self.holder = holder
        self._leads = leads
        self._wall = wall
        self._started = dt.datetime.fromtimestamp(wall(), dt.UTC)
        self._task: asyncio.Task[None] | None = None
        self.beats = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="proxy-heartbeat")

    async def beat(self) -> None:
        """One heartbeat now (a failure is logged: the database may be briefly away)."""
        epoch = self._leads()
        now = dt.datetime.fromtimestamp(self._wall(), dt.UTC)
        try:
            await self.store.heartbeat(self.id, role=self.role, host=self.host, port=self.port,
                                       leads=epoch is not None, epoch=epoch, now=now,
                                       started_at=self._started, holder=self.holder)
            if self.beats % 100 == 0:
                await self.store.forget_process(self.id, older_than=now - _SWEEP_AFTER)
        except StorageError as exc:
            log.warning("heartbeat_failed", process=self.id, error=str(exc))
            return
        self.beats += 1

    async def _run(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.every)

    async def stop(self) -> None:
        """Stop beating and delete the row: a clean stop leaves the listing at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(StorageError):
            await self.store.forget_process(self.id)
