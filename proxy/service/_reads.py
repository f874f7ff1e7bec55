"""Reads of the running service: readiness and liveness, the budget plan, a flush of the writer.

These look at the loop, the writer and the lease (``/readyz``, ``/livez``), or at the
update models (``POST /api/v1/plan``); they change nothing a user owns. Reads that
touch only the database (listings, CEIs, the metrics summary) do not come here: the
API reads :attr:`ProxyService.store` directly.

A new health signal goes to :meth:`Reads.status` (and its wording to
:mod:`proxy.service.health`); a new read of the engine's state goes here.

What it does not do: change the engine or the evaluator (the other rooms do, on the
loop's thread), or decide what a status code is (:mod:`proxy.api`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Literal

import structlog

from proxy.errors import StorageError
from proxy.service import health
from proxy.service._shared import Shared, describe_lease
from proxy.service._update_models import UpdateModels
from proxy.service.planning import PlanInputs, PlanReport, plan_inputs, run_plan

log = structlog.get_logger("proxy.service")

READY_PING_SECONDS = 2.0  # /readyz: a database slower than this to answer SELECT 1 is down


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """What ``/readyz`` reports. ``role``: ``leader`` runs the chronon loop, ``standby`` waits
    for its lease; ``epoch`` is the lease's epoch (``None`` without a lease)."""

    database: bool
    ticking: bool
    chronon: int | None
    inflight: int
    backlog: int
    detail: str = ""
    role: Literal["leader", "standby", "api"] = "leader"
    epoch: int | None = None
    writing: bool = True
    """The writer keeps up: its oldest unwritten batch is younger than the bound."""
    write_lag: float = 0.0

    @property
    def ready(self) -> bool:
        if self.role == "api":  # an API replica (issue 21) never runs the loop
            return self.database
        return self.database and self.ticking and self.writing and self.role == "leader"

    @property
    def status(self) -> Literal["ready", "standby", "unavailable"]:
        if self.ready:
            return "ready"
        return "standby" if self.role == "standby" and self.database else "unavailable"


class Reads:
    """Status, liveness, plans and flushes (module docstring)."""

    def __init__(self, shared: Shared, models: UpdateModels) -> None:
        self._s = shared
        self._models = models
        # One plan at a time: each is seconds of CPU in a worker thread, sharing the GIL with the loop.
        self._plan_lock = asyncio.Lock()

    async def plan(
        self, user_id: int, *, target: float, horizon: int, futures: int, seed: int = 0
    ) -> PlanReport:
        """The budget plan of the user's own profiles (docs/plan.md): the expected completeness at
        the configured budget, and the least budget that reaches ``target``, if the budget served
        these profiles alone (it is shared: the operator's ``proxy plan`` plans every profile).

        Reads the running service's update models from chronon ``now`` for ``horizon`` chronons
        (a process without the loop: those the leader saved last, :meth:`UpdateModels.saved`);
        the simulation runs in a worker thread on copies, one plan at a time.
        """
        sh = self._s
        profiles = await sh.store.list_profiles(user_id)
        rt = sh.runtime
        if rt is None:
            models = await self._models.saved()
            resources = {f.id: f.resource for f in await sh.store.list_feeds()}
            inputs = plan_inputs(profiles, resources, models, sh.clock, sh.clock.current(), horizon)
        else:
            def read() -> PlanInputs:  # on the loop's thread: the models learn there
                resources = {fid: slot.resource for fid, slot in rt.feeds.by_id.items()}
                return plan_inputs(profiles, resources, rt.models, rt.clock, sh.clock.current(),
                                   horizon)

            inputs = await sh.host.call(read)
        s = sh.settings
        async with self._plan_lock:
            report = await asyncio.to_thread(run_plan, inputs, budget=s.budget, target=target,
                                             policy=s.policy, futures=futures, seed=seed)
        log.info("plan", user=user_id, profiles=inputs.profiles, rules=len(inputs.rules),
                 horizon=horizon, futures=futures, seconds=round(report.seconds, 3))
        return report

    async def status(self) -> ServiceStatus:
        """Database reachable, the loop ticking (a tick within the last three chronons) and
        the writer keeping up (its oldest batch younger than ``PROXY_WRITE_LAG_READY_SECONDS``);
        ``role`` says whether this process leads or stands by. ``detail`` names each thing
        unavailable (:mod:`proxy.service.health`); a driver's error goes to the log only."""
        sh = self._s
        settings = sh.settings
        problems: list[str] = []
        try:
            # Bounded: a database that does not answer must not hang the health check.
            await asyncio.wait_for(sh.store.ping(), READY_PING_SECONDS)
            database = True
        except (StorageError, TimeoutError) as exc:
            sh.metrics.db_errors.inc()
            log.warning("readiness_database_down", error=str(exc) or type(exc).__name__)
            database = False
            problems.append(health.database_down())
        loop = sh.loop
        last = loop.last_tick if loop is not None else None
        since = None if last is None else time.monotonic() - last
        ticking = bool(
            sh.run_loop
            and since is not None
            and since < max(3 * settings.chronon_seconds, 1.0)
        )
        writer = sh.writer
        lag = writer.lag() if writer is not None else 0.0
        writing = lag <= settings.write_lag_ready_seconds
        leader = sh.leader
        role: Literal["leader", "standby", "api"] = "leader" if sh.runtime is not None else "standby"
        if not sh.campaign:
            role = "api"  # an API replica (issue 21): never runs the loop nor writes its decisions
        if role == "leader":
            if sh.run_loop and not ticking:
                problems.append(health.loop_stalled(since))
            if not writing:
                problems.append(health.writes_lagging(
                    lag, settings.write_lag_ready_seconds, writer.backlog if writer else 0))
        if role == "standby" and not problems:
            problems.append(
                f"standby: {describe_lease(leader.seen if leader is not None else None)}")
        lease = leader.lease if leader is not None else None
        return ServiceStatus(
            database=database,
            ticking=ticking,
            chronon=loop.current if loop is not None else None,
            inflight=loop.inflight if loop is not None else 0,
            backlog=writer.backlog if writer is not None else 0,
            detail="; ".join(problems),
            role=role,
            epoch=lease.epoch if lease is not None else None,
            writing=writing,
            write_lag=round(lag, 3),
        )

    def liveness(self) -> str | None:
        """``None`` while alive; else why not: this process runs the chronon loop and the loop
        has not ticked for five chronons (at least 30 s). A standby, or a process still
        restoring, is alive. No database call: a database outage is not a reason to restart."""
        sh = self._s
        loop = sh.loop
        if not sh.run_loop or loop is None or loop.last_tick is None or sh.runtime is None:
            return None
        since = time.monotonic() - loop.last_tick
        if since > max(5 * sh.settings.chronon_seconds, 30.0):
            return health.loop_not_live(since)
        return None

    async def flush(self) -> None:
        """Wait until every decision so far is in the database (tests, shutdown)."""
        if self._s.writer is not None:
            await self._s.host.run(self._s.writer.flush())
