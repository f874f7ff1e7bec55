"""The web interface under ``/ui`` (issue 20): server-rendered pages in the API's own app.

``install_web(app, settings)`` adds the pages (Jinja2 templates in ``templates/``) and
their static files (``static/``: a stylesheet and a few lines of JavaScript, no build
step, no CDN). Pages sign in with an API key into a signed, HTTP-only session cookie
(``_session``) and read through the service and store calls the API uses, so a page
shows exactly what the caller's API key would see. Everything is served under the
request's ``root_path``, so the UI works behind a reverse proxy with a path prefix.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from proxy.settings import Settings
from proxy.web._session import SessionCodec
from proxy.web.routes import WebUi

__all__ = ["install_web"]


def install_web(app: FastAPI, settings: Settings) -> None:
    """Mount ``/ui`` and ``/ui/static`` on ``app`` (whose ``state.service`` the pages use)."""
    secret = settings.ui_secret.get_secret_value() if settings.ui_secret else None
    codec = SessionCodec(secret, max_age_seconds=settings.ui_session_hours * 3600)
    ui = WebUi(codec, secure_cookie=settings.ui_cookie_secure)
    app.mount("/ui/static", StaticFiles(directory=Path(__file__).parent / "static"), name="ui-static")
    app.include_router(ui.router)
