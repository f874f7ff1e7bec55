"""``/api/v1/cluster``: the live processes of a scaled-out deployment (issue 21).

One row per ``proxy serve`` process whose heartbeat is recent (within three
``PROXY_HEARTBEAT_SECONDS``): its role, where it listens, whether it holds the
``chronon-loop`` lease (and at which epoch), when it started and last beat.
``leads`` comes from the lease row, not from the process's own heartbeat, so at
most one process leads: the live lease's holder. Any API key may read it: it
says nothing about users.
"""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter
from pydantic import BaseModel

from proxy.api.deps import Service, UserId
from proxy.service.leader import LOOP_LEASE
from proxy.store import ClusterProcess

router = APIRouter(prefix="/api/v1/cluster", tags=["cluster"])


class ProcessOut(BaseModel):
    """One live process."""

    id: str
    role: str
    host: str
    port: int
    leads: bool
    epoch: int | None
    started_at: dt.datetime
    last_heartbeat: dt.datetime

    @classmethod
    def of(cls, p: ClusterProcess) -> ProcessOut:
        return cls(id=p.id, role=p.role, host=p.host, port=p.port, leads=p.leads, epoch=p.epoch,
                   started_at=p.started_at, last_heartbeat=p.heartbeat_at)


@router.get("", response_model=list[ProcessOut])
async def list_processes(service: Service, _user: UserId) -> list[ProcessOut]:
    """Processes seen within the last three heartbeats, by role then id."""
    now = service.clock.now()  # the injected wall clock, the one leases are stamped with
    since = now - dt.timedelta(seconds=3 * service.settings.heartbeat_seconds)
    processes = await service.store.live_processes(since, lease=LOOP_LEASE, now=now)
    return [ProcessOut.of(p) for p in processes]
