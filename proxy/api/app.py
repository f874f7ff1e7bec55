"""The FastAPI application: ``make_app(settings)`` wires the service, the routers and ONE error handler.

The lifespan starts the :class:`~proxy.service.ProxyService` (migrations, restore,
chronon loop) and stops it. Domain errors map to status codes in one place
(style.md §4): NotFound → 404, Conflict → 409, Validation → 422 (``detail`` in
FastAPI's shape: ``loc`` names the field, ``msg`` the reason), Auth → 401 with
``WWW-Authenticate: Bearer``, Storage → 503, Standby → 503 (this process is a
standby: another one runs the chronon loop). Route handlers hold no SQL and
raise no ``HTTPException``.

``/metrics`` is meant for an internal network (Prometheus next to the proxy);
with ``PROXY_METRICS_TOKEN`` set it also wants ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from proxy import __version__
from proxy.api.deps import Service
from proxy.api.routes_feeds import router as feeds_router
from proxy.api.routes_notify import router as notify_router
from proxy.api.routes_plan import router as plan_router
from proxy.api.routes_profiles import router as profiles_router
from proxy.api.schemas import ReadyOut
from proxy.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    ProxyError,
    StandbyError,
    StorageError,
    ValidationError,
)
from proxy.feeds import FeedUrlRefusedError
from proxy.service import ProxyService, health
from proxy.settings import Settings

log = structlog.get_logger("proxy.api")


def _status_of(exc: ProxyError) -> int:
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, ValidationError):
        return 422
    if isinstance(exc, AuthError):
        return 401
    if isinstance(exc, StorageError | StandbyError):
        return 503
    return 500


async def _proxy_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProxyError)
    code = _status_of(exc)
    detail: Any = str(exc)
    headers = None
    if code == 422:
        loc = getattr(exc, "loc", None)
        if loc is None and isinstance(exc, FeedUrlRefusedError):
            loc = "url"
        # FastAPI's own shape, so clients read one format: loc names the field.
        parts: list[str | int] = ["body", *(int(p) if p.isdigit() else p for p in loc.split("."))] if loc else []
        detail = [{"loc": parts, "msg": str(exc), "type": "value_error"}]
    elif code == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    elif code == 503 and isinstance(exc, StorageError):
        service = request.app.state.service
        service.metrics.db_errors.inc()
        # The driver's text is for the operator (the log), not the client: it may name
        # tables, hosts and values. The client learns what is unavailable.
        log.warning("request_database_error", path=request.url.path, error=detail)
        detail = health.DATABASE_UNAVAILABLE
    return JSONResponse({"detail": detail}, status_code=code, headers=headers)


def make_app(
    settings: Settings,
    *,
    service: ProxyService | None = None,
    manage_service: bool = True,
) -> FastAPI:
    """The API app. ``service`` is built from ``settings`` unless given; ``manage_service``:
    the lifespan starts and stops it (pass ``False`` when the caller already runs it)."""
    the_service = service if service is not None else ProxyService(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if manage_service:
            await the_service.start()
        try:
            yield
        finally:
            if manage_service:
                await the_service.stop()

    app = FastAPI(
        title="Monitoring proxy",
        version=__version__,
        description="Pulls RSS/Atom feeds under a probe budget for users' complex notification rules.",
        lifespan=lifespan,
    )
    app.state.service = the_service
    app.add_exception_handler(ProxyError, _proxy_error)
    app.include_router(feeds_router)
    app.include_router(profiles_router)
    app.include_router(notify_router)
    app.include_router(plan_router)

    @app.get("/healthz", tags=["health"], responses={503: {"description": "The chronon loop is stuck."}})
    async def healthz(service: Service) -> JSONResponse:
        """Alive: the process answers and, if it runs the chronon loop, the loop ticked within
        five chronons (at least 30 s); 503 otherwise, saying so. The container health check
        (a restart when it fails); the database is not asked (an outage is no reason to
        restart: /readyz says it)."""
        problem = service.liveness()
        if problem is not None:
            return JSONResponse({"status": "stalled", "detail": problem}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", tags=["health"], response_model=ReadyOut)
    async def readyz(service: Service) -> JSONResponse:
        """Ready: the database answers, this process runs the chronon loop and it ticked
        recently. 503 otherwise; ``status`` says ``standby`` when another process runs the loop."""
        st = await service.status()
        body = ReadyOut(status=st.status, role=st.role, epoch=st.epoch, ready=st.ready,
                        database=st.database, ticking=st.ticking, chronon=st.chronon,
                        inflight=st.inflight, backlog=st.backlog, writing=st.writing,
                        write_lag_seconds=st.write_lag, detail=st.detail)
        return JSONResponse(body.model_dump(), status_code=200 if st.ready else 503)

    token = settings.metrics_token.get_secret_value().encode() if settings.metrics_token else None

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    async def metrics(service: Service, request: Request) -> PlainTextResponse:
        """Prometheus text exposition of this service's registry (internal: see PROXY_METRICS_TOKEN)."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if token is not None:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            # Constant-time comparison: the token must not leak through response timing.
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
                raise AuthError("/metrics needs 'Authorization: Bearer <PROXY_METRICS_TOKEN>'")

        return PlainTextResponse(generate_latest(service.metrics.registry),
                                 media_type=CONTENT_TYPE_LATEST)

    return app
