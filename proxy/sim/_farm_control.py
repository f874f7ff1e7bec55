"""A small JSON control API under ``/_farm/`` for a farm running in another process.

- ``GET  /_farm/health``                      -> ``{"ok": true, "feeds": n, "trace_now": t}``
- ``GET  /_farm/stats[?feed=ID]``             -> request counts (``FeedStats``) and publication count
- ``POST /_farm/feeds/{id}/publish``          body ``{"title"?, "summary"?}`` -> ``{"entry_id": ...}``
- ``PUT  /_farm/feeds/{id}/fault``            body ``{"mode", "params"?, "times"?}``; ``DELETE`` clears
- ``PUT  /_farm/feeds/{id}/ping``             body ``{"url", "headers"?}``; ``DELETE`` clears
- ``GET  /_farm/publications?since=N``        -> publications ``N..`` as JSON objects

It has no authentication: the farm binds to 127.0.0.1 and exists for tests.
Requests to it are not counted in the feed statistics.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from proxy.sim.feedfarm import FeedFarm, FeedStats


def _stats_json(stats: FeedStats) -> dict[str, Any]:
    return {
        "requests": stats.requests,
        "by_status": {str(k): v for k, v in sorted(stats.by_status.items())},
        "conditional": stats.conditional,
        "not_modified": stats.not_modified,
    }


def add_control_routes(app: web.Application, farm: FeedFarm) -> None:
    from proxy.sim.feedfarm import FeedNotFoundError

    async def health(_request: web.Request) -> web.Response:
        return web.json_response(
            {"ok": True, "feeds": len(farm.feed_ids), "trace_now": farm.trace_now()}
        )

    async def stats(request: web.Request) -> web.Response:
        feed_id = request.query.get("feed")
        try:
            body = _stats_json(farm.stats(feed_id))
        except FeedNotFoundError as exc:
            raise web.HTTPNotFound(text=str(exc)) from exc
        body["publications"] = len(farm.publications)
        return web.json_response(body)

    async def read_json(request: web.Request) -> dict[str, Any]:
        if not request.can_read_body:
            return {}
        try:
            data = await request.json()
        except ValueError as exc:
            raise web.HTTPBadRequest(text=f"body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise web.HTTPBadRequest(text="body must be a JSON object")
        return data

    async def publish(request: web.Request) -> web.Response:
        data = await read_json(request)
        try:
            entry_id = farm.publish(
                request.match_info["feed_id"], title=data.get("title"), summary=data.get("summary")
            )
        except FeedNotFoundError as exc:
            raise web.HTTPNotFound(text=str(exc)) from exc
        return web.json_response({"entry_id": entry_id})

    async def fault(request: web.Request) -> web.Response:
        feed_id = request.match_info["feed_id"]
        try:
            if request.method == "DELETE":
                farm.set_fault(feed_id, None)
            else:
                data = await read_json(request)
                if "mode" not in data:
                    raise web.HTTPBadRequest(text="fault body needs a 'mode'")
                farm.set_fault(
                    feed_id, data["mode"], times=data.get("times"), **data.get("params", {})
                )
        except FeedNotFoundError as exc:
            raise web.HTTPNotFound(text=str(exc)) from exc
        except (ValueError, TypeError) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from exc
        return web.json_response({"ok": True})

    async def ping_target(request: web.Request) -> web.Response:
        feed_id = request.match_info["feed_id"]
        try:
            if request.method == "DELETE":
                farm.set_ping_target(feed_id, None)
            else:
                data = await read_json(request)
                url, headers = data.get("url"), data.get("headers", {})
                if not isinstance(url, str) or not isinstance(headers, dict):
                    raise web.HTTPBadRequest(
                        text="ping body needs a 'url' string and optional 'headers' object"
                    )
                farm.set_ping_target(feed_id, url, {str(k): str(v) for k, v in headers.items()})
        except FeedNotFoundError as exc:
            raise web.HTTPNotFound(text=str(exc)) from exc
        return web.json_response({"ok": True})

    async def publications(request: web.Request) -> web.Response:
        try:
            since = int(request.query.get("since", "0"))
        except ValueError as exc:
            raise web.HTTPBadRequest(text="since must be an integer") from exc
        rows = []
        for pub in farm.publications[since:]:
            row = asdict(pub)
            row["published"] = pub.published.isoformat()
            rows.append(row)
        return web.json_response(rows)

    app.router.add_get("/_farm/health", health)
    app.router.add_get("/_farm/stats", stats)
    app.router.add_post("/_farm/feeds/{feed_id}/publish", publish)
    app.router.add_put("/_farm/feeds/{feed_id}/fault", fault)
    app.router.add_delete("/_farm/feeds/{feed_id}/fault", fault)
    app.router.add_put("/_farm/feeds/{feed_id}/ping", ping_target)
    app.router.add_delete("/_farm/feeds/{feed_id}/ping", ping_target)
    app.router.add_get("/_farm/publications", publications)
