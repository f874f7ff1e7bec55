"""``/metrics`` behind ``PROXY_METRICS_TOKEN``: 401 without the bearer token, 200 with it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from proxy.api import make_app
from proxy.service import ProxyService
from tests.test_e2e_support import e2e_settings

TOKEN = "s3cret-metrics-token"


@asynccontextmanager
async def _client(url: str, **overrides: object) -> AsyncIterator[httpx.AsyncClient]:
    settings = e2e_settings(url, **overrides)
    async with ProxyService(settings, run_loop=False, housekeeping=False) as service:
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy.test") as client:
            yield client


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ],
)
async def test_metrics_without_the_token_answer_401(sqlite_url: str, headers: dict[str, str]) -> None:
    async with _client(sqlite_url, metrics_token=TOKEN) as client:
        r = await client.get("/metrics", headers=headers)
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        assert "proxy_" not in r.text and TOKEN not in r.text


async def test_metrics_with_the_token_answer_200(sqlite_url: str) -> None:
    async with _client(sqlite_url, metrics_token=TOKEN) as client:
        r = await client.get("/metrics", headers={"Authorization": f"bearer {TOKEN}"})
        assert r.status_code == 200
        assert "proxy_chronon" in r.text
        # The health endpoints stay open: orchestrators probe them without credentials.
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code in (200, 503)


@pytest.mark.parametrize("token", [None, "", "  "])
async def test_without_a_token_metrics_stay_open(sqlite_url: str, token: str | None) -> None:
    async with _client(sqlite_url, metrics_token=token) as client:
        r = await client.get("/metrics")
        assert r.status_code == 200 and "proxy_chronon" in r.text


def test_the_token_is_not_shown_in_the_settings_repr() -> None:
    settings = e2e_settings("sqlite+aiosqlite:///x.sqlite3", metrics_token=TOKEN)
    assert TOKEN not in repr(settings) and TOKEN not in str(settings.model_dump())
