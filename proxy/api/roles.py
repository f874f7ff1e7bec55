"""One program, four roles (issue 21): ``proxy serve --role all|scheduler|worker|api``.

=========  ==============================================================  =====================
role       runs                                                            serves
=========  ==============================================================  =====================
all        the one-machine default: chronon loop, probes in-process, API   REST API + health
scheduler  campaigns for the loop's lease; as leader ticks and sends each  REST API + health
           probe to the workers through the broker (standby otherwise)
worker     probe jobs from the broker (:class:`~proxy.cluster.ProbeWorker`)  health + metrics
api        the REST API as a permanent standby: reads from the database     REST API + health
=========  ==============================================================  =====================

Every role beats in ``cluster_processes`` (``GET /api/v1/cluster``) and serves
``/healthz``, ``/readyz`` and ``/metrics`` on its own ``--port``. This module
only assembles; each part lives in its own package.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from proxy import __version__
from proxy.api.app import make_app
from proxy.cluster import BrokerProber, BrokerSettings, ProbeWorker
from proxy.cluster.heartbeat import Heartbeat, advertised_host
from proxy.errors import SettingsError, StorageError
from proxy.service import ProxyService
from proxy.service.service import fetcher_settings
from proxy.settings import Settings
from proxy.store import Store

Role = Literal["all", "scheduler", "worker", "api"]
ROLES: tuple[Role, ...] = ("all", "scheduler", "worker", "api")

__all__ = ["ROLES", "Role", "broker_settings", "make_role_app"]


def broker_settings(settings: Settings, role: str) -> BrokerSettings:
    """The broker's settings; :class:`SettingsError` if the role needs a broker and none is set."""
    if settings.broker_url is None:
        raise SettingsError(f"--role {role} needs PROXY_BROKER_URL (e.g. nats://127.0.0.1:4222)")
    return BrokerSettings(
        settings.broker_url, job_timeout=settings.broker_job_timeout_seconds,
        ack_wait=settings.ack_wait_seconds, per_host_concurrency=settings.per_host_concurrency,
        per_host_min_delay=settings.per_host_min_delay_seconds)


def make_role_app(settings: Settings, role: Role) -> FastAPI:
    """The ASGI app of one role; its lifespan starts and stops everything the role runs."""
    if role == "worker":
        return _worker_app(settings)
    if role not in ROLES:
        raise SettingsError(f"--role: {role!r} is not one of {', '.join(ROLES)}")
    if role == "api" and settings.is_sqlite:
        raise SettingsError("--role api needs PostgreSQL (PROXY_DATABASE_URL): its changes reach "
                            "the scheduler by LISTEN/NOTIFY")
    prober: BrokerProber | None = None
    if role == "scheduler":
        prober = BrokerProber(broker_settings(settings, role),
                              fetcher_settings(settings).address_policy)
    service = ProxyService(settings, fetcher=prober, campaign=role != "api")
    app = make_app(settings, service=service, manage_service=False)

    def leads() -> int | None:
        leader = service.leader
        if not service.leading:
            return None
        return leader.lease.epoch if leader is not None and leader.lease is not None else 0

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if prober is not None:
            await prober.__aenter__()
        try:
            await service.start()
            leader = service.leader  # set by start(); --role api has one too, never elected
            heartbeat = Heartbeat(service.store, role=role, host=advertised_host(settings.host),
                                  port=settings.port, every=settings.heartbeat_seconds,
                                  holder=leader.holder if leader is not None else None,
                                  leads=leads)
            heartbeat.start()
            try:
                yield
            finally:
                await heartbeat.stop()
                await service.stop()
        finally:
            if prober is not None:
                await prober.aclose()

    app.router.lifespan_context = lifespan
    return app


def _worker_app(settings: Settings) -> FastAPI:
    """A worker: probe jobs, beat, and answer health checks and metrics."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    worker = ProbeWorker(broker_settings(settings, "worker"), fetcher_settings(settings),
                         concurrency=settings.worker_concurrency)
    state: dict[str, Store] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        store = state["store"] = Store.from_url(settings.database_url)
        heartbeat = Heartbeat(store, role="worker", host=advertised_host(settings.host),
                              port=settings.port, every=settings.heartbeat_seconds)
        task = asyncio.create_task(worker.run(), name="proxy-worker")
        heartbeat.start()
        try:
            yield
        finally:
            await heartbeat.stop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await store.close()

    app = FastAPI(title="Monitoring proxy: probe worker", version=__version__, lifespan=lifespan)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Alive: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    async def readyz() -> JSONResponse:
        """Ready: connected to the broker (it takes jobs) and the database answers."""
        database = True
        try:
            await state["store"].ping()
        except (StorageError, KeyError):
            database = False
        ready = worker.connected and database
        body = {"status": "ready" if ready else "unavailable", "role": "worker",
                "broker": worker.connected, "database": database, "probed": worker.probed}
        return JSONResponse(body, status_code=200 if ready else 503)

    token = settings.metrics_token.get_secret_value().encode() if settings.metrics_token else None

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    async def metrics(request: Request) -> Response:
        """Prometheus text exposition of the worker's registry (PROXY_METRICS_TOKEN as the API's)."""
        if token is not None:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
                return JSONResponse(
                    {"detail": "/metrics needs 'Authorization: Bearer <PROXY_METRICS_TOKEN>'"},
                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
        return PlainTextResponse(generate_latest(worker.metrics.registry),
                                 media_type=CONTENT_TYPE_LATEST)

    return app
