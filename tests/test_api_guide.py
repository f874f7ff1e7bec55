"""The built documentation site at ``/docs/guide/`` (issue 46): served when present, 404 otherwise."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from proxy.api import make_app
from proxy.service import ProxyService
from tests.test_e2e_support import e2e_settings


@asynccontextmanager
async def _client(url: str, **overrides: object) -> AsyncIterator[httpx.AsyncClient]:
    settings = e2e_settings(url, **overrides)
    async with ProxyService(settings, run_loop=False, housekeeping=False) as service:
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy.test") as client:
            yield client


def _site(root: Path) -> Path:
    site = root / "site"
    (site / "how-to" / "deploy").mkdir(parents=True)
    (site / "index.html").write_text("<title>home</title>the doors", encoding="utf-8")
    (site / "how-to" / "deploy" / "index.html").write_text("compose up", encoding="utf-8")
    (site / "search.json").write_text('{"docs": []}', encoding="utf-8")
    return site


async def test_a_built_site_is_served_at_docs_guide(sqlite_url: str, tmp_path: Path) -> None:
    site = _site(tmp_path)
    async with _client(sqlite_url, docs_site=str(site)) as client:
        home = await client.get("/docs/guide/")
        assert home.status_code == 200 and "the doors" in home.text
        assert home.headers["content-type"].startswith("text/html")
        # mkdocs' directory URLs: a page is its folder's index.html.
        page = await client.get("/docs/guide/how-to/deploy/")
        assert page.status_code == 200 and page.text == "compose up"
        assert (await client.get("/docs/guide/search.json")).json() == {"docs": []}
        assert (await client.get("/docs/guide/no-such-page/")).status_code == 404
        # Without the slash, a redirect to the folder (relative links resolve from it).
        bare = await client.get("/docs/guide")
        assert bare.status_code in (307, 308) and bare.headers["location"].endswith("/docs/guide/")
        # Outside the folder nothing is reachable.
        outside = await client.get("/docs/guide/../../etc/passwd")
        assert outside.status_code == 404
        # The API's own docs are where they were.
        assert (await client.get("/docs")).status_code == 200


async def test_no_site_means_no_guide_and_the_api_still_starts(sqlite_url: str, tmp_path: Path) -> None:
    empty = tmp_path / "nothing-built"
    empty.mkdir()
    for folder in (str(empty), str(tmp_path / "missing"), ""):
        async with _client(sqlite_url, docs_site=folder) as client:
            assert (await client.get("/docs/guide/")).status_code == 404
            assert (await client.get("/healthz")).status_code == 200
