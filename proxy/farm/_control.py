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

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, Protocol

from proxy.farm._http import Request, Response, text_response
from proxy.farm._stats import FeedNotFoundError, FeedStats
from proxy.farm._trace import Publication


class ControlledFarm(Protocol):
    """What the control API drives (``FeedFarm`` is one; this module never imports it)."""

    @property
    def feed_ids(self) -> list[str]: ...

    @property
    def publications(self) -> Sequence[Publication]: ...

    def trace_now(self) -> float: ...

    def stats(self, feed_id: str | None = None) -> FeedStats: ...

    def publish(self, feed_id: str, *, title: str | None = None, summary: str | None = None) -> str: ...

    def set_fault(self, feed_id: str, mode: Any, *, times: int | None = None, **params: Any) -> None: ...

    def set_ping_target(
        self, feed_id: str, url: str | None, headers: dict[str, str] | None = None
    ) -> None: ...


class _HttpError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def _stats_json(stats: FeedStats) -> dict[str, Any]:
    return {
        "requests": stats.requests,
        "by_status": {str(k): v for k, v in sorted(stats.by_status.items())},
        "conditional": stats.conditional,
        "not_modified": stats.not_modified,
    }


def _json(data: Any) -> Response:
    return Response(200, (("Content-Type", "application/json; charset=utf-8"),), json.dumps(data).encode())


def _read_json(request: Request) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        data = json.loads(request.body)
    except ValueError as exc:
        raise _HttpError(400, f"body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise _HttpError(400, "body must be a JSON object")
    return data


def control_handler(farm: ControlledFarm) -> Callable[[Request], Response]:
    """The handler of every ``/_farm/...`` request of ``farm``."""

    def health(_request: Request) -> Response:
        return _json({"ok": True, "feeds": len(farm.feed_ids), "trace_now": farm.trace_now()})

    def stats(request: Request) -> Response:
        body = _stats_json(farm.stats(request.query.get("feed")))
        body["publications"] = len(farm.publications)
        return _json(body)

    def publish(request: Request, feed_id: str) -> Response:
        data = _read_json(request)
        entry_id = farm.publish(feed_id, title=data.get("title"), summary=data.get("summary"))
        return _json({"entry_id": entry_id})

    def fault(request: Request, feed_id: str) -> Response:
        if request.method == "DELETE":
            farm.set_fault(feed_id, None)
            return _json({"ok": True})
        data = _read_json(request)
        if "mode" not in data:
            raise _HttpError(400, "fault body needs a 'mode'")
        try:
            farm.set_fault(feed_id, data["mode"], times=data.get("times"), **data.get("params", {}))
        except FeedNotFoundError:
            raise
        except (ValueError, TypeError) as exc:
            raise _HttpError(400, str(exc)) from exc
        return _json({"ok": True})

    def ping_target(request: Request, feed_id: str) -> Response:
        if request.method == "DELETE":
            farm.set_ping_target(feed_id, None)
            return _json({"ok": True})
        data = _read_json(request)
        url, headers = data.get("url"), data.get("headers", {})
        if not isinstance(url, str) or not isinstance(headers, dict):
            raise _HttpError(400, "ping body needs a 'url' string and optional 'headers' object")
        farm.set_ping_target(feed_id, url, {str(k): str(v) for k, v in headers.items()})
        return _json({"ok": True})

    def publications(request: Request) -> Response:
        try:
            since = int(request.query.get("since", "0"))
        except ValueError as exc:
            raise _HttpError(400, "since must be an integer") from exc
        rows = []
        for pub in farm.publications[since:]:
            row = asdict(pub)
            row["published"] = pub.published.isoformat()
            rows.append(row)
        return _json(rows)

    plain: dict[str, tuple[tuple[str, ...], Callable[[Request], Response]]] = {
        "health": (("GET", "HEAD"), health),
        "stats": (("GET", "HEAD"), stats),
        "publications": (("GET", "HEAD"), publications),
    }
    per_feed: dict[str, tuple[tuple[str, ...], Callable[[Request, str], Response]]] = {
        "publish": (("POST",), publish),
        "fault": (("PUT", "DELETE"), fault),
        "ping": (("PUT", "DELETE"), ping_target),
    }

    def handle(request: Request) -> Response:
        parts = request.path.split("/")[2:]  # after "/_farm/"
        try:
            if len(parts) == 1 and parts[0] in plain:
                methods, fn = plain[parts[0]]
                if request.method not in methods:
                    raise _HttpError(405, "method not allowed")
                return fn(request)
            if len(parts) == 3 and parts[0] == "feeds" and parts[2] in per_feed:
                methods, feed_fn = per_feed[parts[2]]
                if request.method not in methods:
                    raise _HttpError(405, "method not allowed")
                return feed_fn(request, parts[1])
            raise _HttpError(404, "not found")
        except FeedNotFoundError as exc:
            return text_response(404, str(exc))
        except _HttpError as exc:
            return text_response(exc.status, exc.text)

    return handle
