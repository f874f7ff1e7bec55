"""The API's contract with its clients: one error shape, every status documented, no 500
from any input, bodies capped, docs served offline (issues 23 and 24).

Every bad input the issues list is sent for real (in-process ASGI, the service started on
SQLite and on PostgreSQL) and each answer is checked against the OpenAPI the app serves:
its status is declared for that operation, its body is RFC 9457 problem details, and what
was stored before is still there.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from proxy.api import make_app
from proxy.api.problems import PROBLEM_JSON, TYPE_PREFIX
from proxy.service import ProxyService
from tests.test_e2e_support import e2e_settings

SMALL_LIMIT = 64 * 1024


class Client:
    def __init__(self, client: httpx.AsyncClient, key: str, openapi: dict[str, Any]) -> None:
        self.http = client
        self.auth = {"Authorization": f"Bearer {key}"}
        self.openapi = openapi

    async def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {**self.auth, **kw.pop("headers", {})}
        return await self.http.request(method, path, headers=headers, **kw)

    def declared(self, method: str, template: str) -> set[int]:
        responses = self.openapi["paths"][template][method.lower()]["responses"]
        return {int(code) for code in responses}


@asynccontextmanager
async def _api(database_url: str, **overrides: Any) -> AsyncIterator[Client]:
    settings = e2e_settings(database_url, **overrides)
    service = ProxyService(settings, run_loop=False, housekeeping=False)
    await service.start()
    try:
        _, key = await service.store.create_user("alice")
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy.test") as http:
            openapi = (await http.get("/openapi.json")).json()
            yield Client(http, key, openapi)
    finally:
        await service.stop()


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[Client]:
    async with _api(database_url, max_request_bytes=SMALL_LIMIT) as client:
        yield client


def assert_problem(r: httpx.Response, status: int, api: Client, method: str, template: str) -> dict[str, Any]:
    """``r`` is problem details with ``status``, a status the OpenAPI declares for the route."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM_JSON, r.headers
    body: dict[str, Any] = r.json()
    assert set(body) >= {"type", "title", "status", "detail"}, body
    assert body["status"] == status and body["type"].startswith(TYPE_PREFIX), body
    assert isinstance(body["detail"], str) and body["detail"], body
    assert status in api.declared(method, template), (method, template, status)
    if status == 422:
        assert body["errors"] and all(set(e) == {"loc", "msg", "type"} for e in body["errors"])
    return body


def profile(name: str = "watch", within: str = "10m", feeds: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "rules": [{"name": "r", "watch": {"feeds": feeds or ["1"], "within": within}}]}


async def _feed(api: Client) -> int:
    r = await api.call("POST", "/api/v1/feeds", json={"url": "http://127.0.0.1:9/a.xml"})
    assert r.status_code == 201, r.text
    fid: int = r.json()["id"]
    return fid


async def test_the_ordinary_errors_are_problem_details_declared_in_the_openapi(api: Client) -> None:
    r = await api.http.get("/api/v1/profiles")
    body = assert_problem(r, 401, api, "GET", "/api/v1/profiles")
    assert body["title"] == "Unauthorized" and r.headers["www-authenticate"] == "Bearer"
    assert_problem(await api.call("GET", "/api/v1/profiles/7"), 404, api, "GET",
                   "/api/v1/profiles/{profile_id}")
    fid = await _feed(api)
    assert (await api.call("POST", "/api/v1/profiles", json=profile(feeds=[str(fid)]))).status_code == 201
    body = assert_problem(await api.call("POST", "/api/v1/profiles", json=profile(feeds=[str(fid)])),
                          409, api, "POST", "/api/v1/profiles")
    assert "already have a profile named 'watch'" in body["detail"]
    body = assert_problem(await api.call("DELETE", f"/api/v1/feeds/{fid}"), 409, api, "DELETE",
                          "/api/v1/feeds/{feed_id}")
    # FastAPI's own validation: the same shape, each field in `errors`.
    body = assert_problem(await api.call("GET", "/api/v1/metrics/summary?chronons=0"), 422, api,
                          "GET", "/api/v1/metrics/summary")
    assert body["errors"][0]["loc"] == ["query", "chronons"]
    body = assert_problem(await api.call("POST", "/api/v1/profiles", content=b"{not json",
                                         headers={"content-type": "application/json"}),
                          422, api, "POST", "/api/v1/profiles")
    assert body["errors"][0]["type"] == "json_invalid"
    # A domain validation error names its field the same way.
    body = assert_problem(await api.call("POST", "/api/v1/profiles", json=profile("other", feeds=["999"])),
                          422, api, "POST", "/api/v1/profiles")
    assert body["errors"][0]["loc"] == ["body", "rules", 0, "watch", "feeds", 0]
    # A ping with a wrong token.
    assert_problem(await api.http.post(f"/api/v1/feeds/{fid}/ping?token=nope"), 401, api, "POST",
                   "/api/v1/feeds/{feed_id}/ping")
    # An unknown route is problem details too.
    r = await api.call("GET", "/api/v1/nothing-here")
    assert r.status_code == 404 and r.headers["content-type"] == PROBLEM_JSON


@pytest.mark.parametrize("bad_id", [0, -1, 2**31, 2**40, 2**63, 2**64, 342985064605392240640])
async def test_ids_out_of_any_range_answer_404(api: Client, bad_id: int) -> None:
    for method, template in [
        ("GET", "/api/v1/feeds/{feed_id}"),
        ("DELETE", "/api/v1/feeds/{feed_id}"),
        ("POST", "/api/v1/feeds/{feed_id}/ping-token"),
        ("GET", "/api/v1/profiles/{profile_id}"),
        ("DELETE", "/api/v1/profiles/{profile_id}"),
        ("GET", "/api/v1/profiles/{profile_id}/ceis"),
        ("GET", "/api/v1/profiles/{profile_id}/entries"),
        ("GET", "/api/v1/profiles/{profile_id}/status"),
        ("POST", "/api/v1/targets/{target_id}/enable"),
        ("GET", "/api/v1/deliveries/{delivery_id}"),
    ]:
        path = re.sub(r"\{\w+\}", str(bad_id), template)
        body = assert_problem(await api.call(method, path), 404, api, method, template)
        assert str(bad_id) in body["detail"]
    r = await api.call("PUT", f"/api/v1/profiles/{bad_id}", json=profile())
    assert_problem(r, 404, api, "PUT", "/api/v1/profiles/{profile_id}")
    r = await api.http.post(f"/api/v1/feeds/{bad_id}/ping?token=x")
    assert_problem(r, 404, api, "POST", "/api/v1/feeds/{feed_id}/ping")


async def test_numbers_past_their_bounds_answer_422(api: Client) -> None:
    r = await api.call("GET", f"/api/v1/events/recent?limit={2**70}")
    assert_problem(r, 422, api, "GET", "/api/v1/events/recent")
    r = await api.call("GET", f"/api/v1/events?after={2**64}")
    body = assert_problem(r, 422, api, "GET", "/api/v1/events")
    assert body["errors"][0]["loc"] == ["query", "after"]
    r = await api.call("POST", "/api/v1/targets/1/secret", json={"overlap_seconds": 1e300})
    assert_problem(r, 422, api, "POST", "/api/v1/targets/{target_id}/secret")


@pytest.mark.parametrize(
    ("within", "why"),
    [
        ("99999999999d", "longer than the maximum of 3650 days"),
        ("3651d", "longer than the maximum of 3650 days"),
        ("1" * 5000 + "s", "longer than the maximum"),
        ("0" * 5000 + "1s", None),  # leading zeros are no overflow: accepted
    ],
)
async def test_durations_past_the_maximum_answer_422_naming_the_field(
    api: Client, within: str, why: str | None
) -> None:
    fid = await _feed(api)
    r = await api.call("POST", "/api/v1/profiles", json=profile(within=within, feeds=[str(fid)]))
    if why is None:
        assert r.status_code == 201, r.text
        return
    body = assert_problem(r, 422, api, "POST", "/api/v1/profiles")
    assert body["errors"][0]["loc"] == ["body", "rules", 0, "watch", "within"]
    assert why in body["errors"][0]["msg"]


# Raw JSON text: a lone surrogate cannot be encoded by a client's JSON encoder, only escaped.
_BAD_TEXTS = [
    ("NUL", '"wat\\u0000ch"', "U+0000"),
    ("escape", '"wat\\u001bch"', "U+001B"),
    ("DEL", '"wat\\u007fch"', "U+007F"),
    ("C1", '"wat\\u0085ch"', "U+0085"),
    ("lone high surrogate", '"wat\\ud800ch"', "U+D800"),
    ("lone low surrogate", '"\\udfff"', "U+DFFF"),
]


@pytest.mark.parametrize(("what", "text", "code"), _BAD_TEXTS, ids=[b[0] for b in _BAD_TEXTS])
async def test_control_characters_and_lone_surrogates_answer_422_and_lose_nothing(
    api: Client, what: str, text: str, code: str
) -> None:
    fid = await _feed(api)
    r = await api.call("POST", "/api/v1/profiles", json=profile("kept", feeds=[str(fid)]))
    assert r.status_code == 201
    kept = r.json()
    h = {"content-type": "application/json"}
    cases = [
        ("POST", "/api/v1/profiles", f'{{"name": {text}, "rules": []}}', ["body", "name"]),
        ("POST", "/api/v1/profiles",
         f'{{"name": "x", "rules": [{{"name": {text}, "watch": {{"feeds": ["{fid}"], "within": "1m"}}}}]}}',
         ["body", "rules", 0, "name"]),
        ("POST", "/api/v1/profiles",
         f'{{"name": "x", "rules": [{{"name": "r", "trigger": {{"feed": "{fid}", "every": "1m", '
         f'"when": {{"contains": ["oil", {text}]}}}}}}]}}',
         ["body", "rules", 0, "trigger", "when", "contains", 1]),
        ("PUT", f"/api/v1/profiles/{kept['id']}", f'{{"name": {text}, "rules": []}}', ["body", "name"]),
        ("POST", "/api/v1/feeds", f'{{"url": {text}}}', ["body", "url"]),
    ]
    for method, path, raw, loc in cases:
        template = "/api/v1/profiles/{profile_id}" if method == "PUT" else path
        r = await api.call(method, path, content=raw.encode(), headers=h)
        body = assert_problem(r, 422, api, method, template)
        assert body["errors"][0]["loc"] == loc, (what, body)
        assert code in body["detail"], body
    # In a query value too (a ping token is compared in SQL: PostgreSQL refuses NUL). A URL
    # cannot carry a lone surrogate (percent-encoded UTF-8 has none).
    if "surrogate" not in what:
        r = await api.http.post(f"/api/v1/feeds/{fid}/ping", params={"token": json.loads(text)})
        body = assert_problem(r, 422, api, "POST", "/api/v1/feeds/{feed_id}/ping")
        assert body["errors"][0]["loc"] == ["query", "token"]
    # Nothing stored was lost or changed.
    r = await api.call("GET", f"/api/v1/profiles/{kept['id']}")
    assert r.status_code == 200 and r.json()["name"] == "kept"
    assert [f["id"] for f in (await api.call("GET", "/api/v1/feeds")).json()["items"]] == [fid]


async def test_tabs_and_newlines_are_text_not_control_characters(api: Client) -> None:
    fid = await _feed(api)
    r = await api.call("POST", "/api/v1/profiles", json=profile("two\tcolumns\nand lines", feeds=[str(fid)]))
    assert r.status_code == 201, r.text


async def test_a_body_over_the_limit_answers_413_by_its_content_length(api: Client) -> None:
    big = {"name": "big", "rules": [{"name": f"r{i}", "watch": {"feeds": ["1"], "within": "1m"}}
                                    for i in range(4000)]}
    raw = json.dumps(big).encode()
    assert len(raw) > SMALL_LIMIT
    r = await api.call("POST", "/api/v1/profiles", content=raw,
                       headers={"content-type": "application/json"})
    body = assert_problem(r, 413, api, "POST", "/api/v1/profiles")
    assert "PROXY_MAX_REQUEST_BYTES" in body["detail"] and str(SMALL_LIMIT) in body["detail"]
    # Even on a route that takes no body, and before the key is checked.
    r = await api.http.request("GET", "/api/v1/profiles", content=raw)
    assert r.status_code == 413 and r.headers["content-type"] == PROBLEM_JSON
    assert (await api.call("GET", "/api/v1/profiles")).json()["items"] == []


async def test_a_streamed_body_over_the_limit_is_refused_before_it_is_read_whole(api: Client) -> None:
    chunk = b" " * 8192
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"name": "stream", "rules": ['
        for _ in range(2000):  # 16 MB if it were all read
            sent += 1
            yield chunk

    r = await api.call("POST", "/api/v1/profiles", content=endless(),
                       headers={"content-type": "application/json"})
    assert_problem(r, 413, api, "POST", "/api/v1/profiles")
    assert "content-length" not in r.request.headers
    # Reading stopped at the limit: the rest of the stream was never pulled.
    assert sent <= SMALL_LIMIT // len(chunk) + 2, sent


async def test_a_body_within_the_limit_is_served(database_url: str) -> None:
    # The default limit (1 MiB) takes a profile of 100 rules (the most one may have).
    async with _api(database_url) as api:
        fid = await _feed(api)
        rules = [{"name": f"r{i}", "watch": {"feeds": [str(fid)], "within": "1m"}} for i in range(100)]
        r = await api.call("POST", "/api/v1/profiles", json={"name": "many", "rules": rules})
        assert r.status_code == 201, r.text
        assert len(r.json()["rules"]) == 100


def _declared_statuses(openapi: dict[str, Any]) -> dict[tuple[str, str], set[int]]:
    return {
        (method, path): {int(code) for code in op["responses"]}
        for path, ops in openapi["paths"].items()
        for method, op in ops.items()
    }


async def test_the_openapi_declares_the_bearer_scheme_and_every_error_status(api: Client) -> None:
    spec = api.openapi
    assert spec["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http", "scheme": "bearer", "description": "An API key from `proxy users create NAME`."}
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    assert set(spec["components"]["schemas"]["Problem"]["required"]) == {"type", "title", "status", "detail"}
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    statuses = _declared_statuses(spec)
    for (method, path), codes in statuses.items():
        op = spec["paths"][path][method]
        assert 422 in codes, (method, path)
        if op.get("security"):
            assert 401 in codes and op["security"] == [{"HTTPBearer": []}], (method, path)
        if "{" in path:
            assert 404 in codes, (method, path)
        if method in ("post", "put"):
            assert 413 in codes, (method, path)
        if path.startswith("/api/"):
            assert 503 in codes, (method, path)
        for code, response in op["responses"].items():
            if int(code) >= 400 and path != "/readyz":
                assert response["content"] == {PROBLEM_JSON: {"schema": problem_ref}}, (method, path, code)
    assert 409 in statuses[("post", "/api/v1/profiles")]
    assert 409 in statuses[("delete", "/api/v1/feeds/{feed_id}")]
    assert 401 in statuses[("post", "/api/v1/feeds/{feed_id}/ping")]


_ASSET = re.compile(r"""(?:src|href|spec-url)=["']([^"']+)["']|url:\s*['"]([^'"]+)['"]|\b(https?://[^\s'"<>)]+)""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_docs_load_with_no_network_every_asset_served_by_the_proxy(
    sqlite_url: str, page: str
) -> None:
    # The in-process client has no network at all: anything not served by the app fails.
    async with _api(sqlite_url) as api:
        r = await api.http.get(page)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        refs = [next(g for g in m.groups() if g) for m in _ASSET.finditer(r.text)]
        external = [u for u in refs if u.startswith(("http://", "https://", "//"))]
        assert external == [], external
        scripts = [u for u in refs if u.endswith(".js")]
        assert scripts, r.text
        for url in refs:
            asset = await api.http.get(url)
            assert asset.status_code == 200, url
            if url.endswith(".js"):
                assert "javascript" in asset.headers["content-type"] and len(asset.content) > 100_000
            if url == "/openapi.json":
                assert asset.json()["info"]["title"] == "Monitoring proxy"
        assert "/openapi.json" in refs


async def test_a_database_failure_is_a_503_that_names_no_driver_internals(sqlite_url: str) -> None:
    async with _api(sqlite_url) as api:
        service_store = api.http._transport.app.state.service.store  # type: ignore[attr-defined]
        async with service_store.engine.begin() as conn:
            await conn.exec_driver_sql("ALTER TABLE profiles RENAME TO profiles_gone")
        r = await api.call("GET", "/api/v1/profiles")
        body = assert_problem(r, 503, api, "GET", "/api/v1/profiles")
        assert body["type"].endswith(":unavailable")
        assert "profiles" not in body["detail"] and "sqlite" not in body["detail"].lower()
        assert body["detail"] == "the database is unavailable; retry later"
