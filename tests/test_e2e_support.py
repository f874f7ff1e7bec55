"""Helpers for the end-to-end tests: a running service with its API client, polling with a deadline.

(No tests here; the module is shared by ``test_e2e_*.py`` and ``test_api*.py``.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from proxy.api import make_app
from proxy.service import ProxyService
from proxy.settings import Settings, load_settings

T = TypeVar("T")

CHRONON = 0.05


def e2e_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings for a fast run against the local feed farm (127.0.0.1, no politeness delays)."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "chronon_seconds": CHRONON,
        "budget": 4,
        "policy": "mrsf-p",
        "allow_private_networks": True,
        "per_host_concurrency": 50,
        "per_host_min_delay_seconds": 0.0,
        "respect_cache_hints": False,
        "retention_days": 0,
        "http_total_timeout_seconds": 5.0,
    }
    values.update(overrides)
    return load_settings(**values)


@dataclass
class Running:
    service: ProxyService
    client: httpx.AsyncClient
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    async def post(self, path: str, body: Any, **kw: Any) -> httpx.Response:
        return await self.client.post(path, json=body, headers=self.auth, **kw)

    async def get(self, path: str, **kw: Any) -> httpx.Response:
        return await self.client.get(path, headers=self.auth, **kw)

    async def watch_feeds(self, urls: list[str], *, name: str = "no pings",
                          within: str = "2s") -> tuple[list[int], int]:
        """Add the feeds and one profile whose watch rule spans them all: the feeds' ids, the
        profile's."""
        ids = []
        for url in urls:
            r = await self.post("/api/v1/feeds", {"url": url})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        r = await self.post("/api/v1/profiles", {"name": name, "rules": [
            {"name": "both", "watch": {"feeds": [str(i) for i in ids], "within": within}}]})
        assert r.status_code == 201, r.text
        return ids, int(r.json()["id"])


@asynccontextmanager
async def running(settings: Settings, user: str = "alice", **options: Any) -> AsyncIterator[Running]:
    """Start the service (loop included) and an in-process API client; stop both at the end.

    ``options``: more keyword arguments of :class:`ProxyService` (e.g. ``update_models``).
    """
    service = ProxyService(settings, **options)
    await service.start()
    try:
        existing = await service.store.get_user_by_name(user)
        if existing is None:
            _, key = await service.store.create_user(user)
        else:
            key = await service.store.create_api_key(existing.id)
        app = make_app(settings, service=service, manage_service=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as client:
            yield Running(service, client, key)
    finally:
        await service.stop()


@asynccontextmanager
async def users_app(
    database_url: str, names: tuple[str, ...] = ("alice", "bob")
) -> AsyncIterator[tuple[ProxyService, httpx.AsyncClient, dict[str, str]]]:
    """A started service that does not tick, an in-process API client, and one API key per user."""
    settings = e2e_settings(database_url)
    service = ProxyService(settings, run_loop=False, housekeeping=False)
    await service.start()
    try:
        keys = {name: (await service.store.create_user(name))[1] for name in names}
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy.test") as client:
            yield service, client, keys
    finally:
        await service.stop()


async def eventually(
    check: Callable[[], Awaitable[T | None]], *, within: float = 20.0, what: str = "condition"
) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(CHRONON)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def motivating(mish: int, cnn: int, money: int, *, every: str = "3m", slack: str = "2m",
               within: str = "10m") -> dict[str, Any]:
    """The main paper's motivating example (§2.1) with feed ids substituted."""
    return {
        "name": "business analyst",
        "rules": [
            {
                "name": "oil news",
                "trigger": {"feed": str(mish), "every": every, "slack": slack,
                            "when": {"contains": ["oil"]}},
                "query": [{"feed": str(cnn), "within": within},
                          {"feed": str(money), "within": within}],
            }
        ],
    }


def parse_metrics(text: str) -> dict[str, float]:
    """``name{labels} value`` lines of a Prometheus text exposition, by full sample name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out
