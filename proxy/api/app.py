"""The FastAPI application: ``make_app(settings)`` wires the service, the routers and the error handlers.

The lifespan starts the :class:`~proxy.service.ProxyService` (migrations, restore,
chronon loop) and stops it. Domain errors map to status codes in one place
(style.md §4, :mod:`proxy.api.problems`): NotFound → 404, Conflict → 409, Validation → 422,
Auth → 401 with ``WWW-Authenticate: Bearer``, Storage → 503, Standby → 503 (this process
is a standby: another one runs the chronon loop); every error body is RFC 9457 problem
details. Request bodies over ``PROXY_MAX_REQUEST_BYTES`` answer 413 and text with control
characters 422 (:mod:`proxy.api.limits`). Route handlers hold no SQL and raise no
``HTTPException``.

``/docs`` (Swagger UI) and ``/redoc`` load their scripts and styles from this process
(``/docs-assets``, the files the ``fastapi-offline`` package ships), never from a CDN.

``/metrics`` is meant for an internal network (Prometheus next to the proxy);
with ``PROXY_METRICS_TOKEN`` set it also wants ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import structlog
from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles

from proxy import __version__
from proxy.api._admission import Admission
from proxy.api._cache import ProfilePages, ResponseCache, TtlMap
from proxy.api.deps import READ_TTL_SECONDS, Service
from proxy.api.limits import BodyLimitMiddleware, refuse_unprintable
from proxy.api.problems import install_problem_handlers, install_problem_schema, problem_responses
from proxy.api.problems import problem as problem_response
from proxy.api.routes_cluster import router as cluster_router
from proxy.api.routes_feeds import router as feeds_router
from proxy.api.routes_keys import router as keys_router
from proxy.api.routes_notify import router as notify_router
from proxy.api.routes_opml import router as opml_router
from proxy.api.routes_plan import router as plan_router
from proxy.api.routes_profiles import router as profiles_router
from proxy.api.routes_rules import router as rules_router
from proxy.api.routes_websub import router as websub_router
from proxy.api.schemas import ReadyOut
from proxy.errors import AuthError
from proxy.service import ProxyService
from proxy.settings import Settings
from proxy.web import install_web

log = structlog.get_logger("proxy.api")


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
        description=(
            "Pulls RSS/Atom feeds under a probe budget for users' complex notification rules. "
            "Every error is RFC 9457 problem details (`application/problem+json`)."
        ),
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(refuse_unprintable)],
    )
    app.state.service = the_service
    # Heavy reads and API keys, reused for a second (issue 24.4: the API must not eat the budget).
    app.state.responses = ResponseCache()
    # Profile listing pages, amended by this process's own changes (issue 24.4).
    app.state.profile_pages = ProfilePages(the_service.profile_changes)
    app.state.api_keys = TtlMap(READ_TTL_SECONDS)
    install_problem_handlers(app)
    install_problem_schema(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_request_bytes)
    _serve_docs(app)
    _serve_guide(app, settings.docs_site)
    app.add_middleware(Admission, limit=settings.api_concurrency)
    app.include_router(opml_router)  # before feeds: /opml is not a {feed_id}
    app.include_router(feeds_router)
    app.include_router(keys_router)
    app.include_router(profiles_router)
    app.include_router(rules_router)
    app.include_router(notify_router)
    app.include_router(plan_router)
    app.include_router(websub_router)
    install_web(app, settings)  # the pages under /ui (issue 20)
    app.include_router(cluster_router)

    @app.get("/healthz", tags=["health"], responses=problem_responses(503))
    async def healthz(service: Service) -> JSONResponse:
        """Alive: the process answers and, if it runs the chronon loop, the loop ticked within
        five chronons (at least 30 s); 503 otherwise, saying so. The container health check
        (a restart when it fails); the database is not asked (an outage is no reason to
        restart: /readyz says it)."""
        problem = service.liveness()
        if problem is not None:
            return problem_response(503, problem, kind="stalled")
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", tags=["health"], response_model=ReadyOut,
             responses={503: {"model": ReadyOut, "description": "Not ready: `detail` says why."}})
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

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse,
             responses=problem_responses(401))
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


#: Where the Swagger UI and ReDoc files are served from (the package's own copies).
DOCS_ASSETS = "/docs-assets"
#: Where the built documentation site is served, when there is one (``PROXY_DOCS_SITE``).
GUIDE_PATH = "/docs/guide"


def _serve_guide(app: FastAPI, folder: str) -> None:
    """The documentation site (``mkdocs build`` output) at ``/docs/guide/``, if ``folder`` holds one.

    Checked once, at start: a site built later is served after a restart. Public, as
    ``/docs`` is: it documents the software, not any user's data.
    """
    site = Path(folder) if folder.strip() else None
    if site is None or not (site / "index.html").is_file():
        return
    app.mount(GUIDE_PATH, StaticFiles(directory=site, html=True), name="guide")


def _serve_docs(app: FastAPI) -> None:
    """``/docs`` and ``/redoc`` from the assets ``fastapi-offline`` ships (no CDN: the proxy
    often runs where there is no internet)."""
    import fastapi_offline

    static = Path(fastapi_offline.__file__).parent / "static"
    app.mount(DOCS_ASSETS, StaticFiles(directory=static), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title}: Swagger UI",
            swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title}: ReDoc",
            redoc_js_url=f"{root}{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )
