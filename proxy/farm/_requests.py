"""The farm's request log (issue 47): every request it answered, for scoring any poller alike.

A record holds the wall time in ms, the feed, the status, the validators the
client sent (``If-None-Match`` / ``If-Modified-Since``), the body bytes sent,
the ``User-Agent``, the host the client named and when the request started and
ended (:func:`peak_concurrency` counts the requests in progress together).  HEAD requests, ``/favicon.ico`` and the site root are
given their own ``kind`` so that they are counted apart, never as feed GETs:
several readers fetch them beside the feed, and a scorer that counted them
would charge those readers for probes that could not see an entry.

Deliberately not here: scoring (``proxy.bench.peers``); the log only records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from proxy.farm._http import Request, Response, Result, Stream


class RequestKind(StrEnum):
    """What a request was, for counting: only ``feed`` requests are feed GETs."""

    FEED = "feed"
    """A GET of a feed document (``/feeds/{id}.xml`` or ``.atom``)."""
    HEAD = "head"
    """Any HEAD request (no document is sent, so no entry can be seen)."""
    FAVICON = "favicon"
    ROOT = "root"
    """The site root ``/`` (some readers look there for a feed or an icon)."""
    OTHER = "other"
    """Entry pages, redirect loops, the control API, unknown paths."""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request the farm answered (``bytes``: body bytes sent; -1 for a stream of unknown length).

    ``t_ms`` is when the answer was given (whole ms, the time scorers use); ``start_ms`` and
    ``end_ms`` are the request's start (the server found its first bytes waiting) and end
    (its answer given) in ms with µs precision, ``None`` in logs written before they were
    recorded and for requests nobody served (a replica's).  For a streamed body the end is
    when its head was sent: the farm streams only fault bodies, never a feed document.
    ``host``: the ``Host`` header's name, without the port.
    """

    t_ms: int
    method: str
    path: str
    kind: RequestKind
    feed: str | None
    status: int
    if_none_match: str | None
    if_modified_since: str | None
    bytes: int
    user_agent: str | None
    start_ms: float | None = None
    end_ms: float | None = None
    host: str | None = None

    @property
    def conditional(self) -> bool:
        """The client sent a validator (RFC 9110 §13.1)."""
        return self.if_none_match is not None or self.if_modified_since is not None

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> RequestRecord:
        return cls(**{**row, "kind": RequestKind(row["kind"])})


def classify(method: str, path: str) -> tuple[RequestKind, str | None]:
    """The request's kind and, for a feed path, the feed id."""
    parts = path.split("/")
    feed = None
    if len(parts) >= 3 and parts[1] in ("feeds", "loop", "entries"):
        feed = parts[2].rpartition(".")[0] if parts[1] == "feeds" else parts[2]
    if method == "HEAD":
        return RequestKind.HEAD, feed
    if path == "/favicon.ico":
        return RequestKind.FAVICON, None
    if path in ("", "/"):
        return RequestKind.ROOT, None
    if method == "GET" and len(parts) == 3 and parts[1] == "feeds" and feed:
        return RequestKind.FEED, feed
    return RequestKind.OTHER, feed


class RequestLog:
    """Records every request to ``records`` and, with a path, appends it to a JSONL file."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.records: list[RequestRecord] = []
        self.path = Path(path) if path is not None else None
        self._fh: IO[str] | None = (
            open(self.path, "a", encoding="utf-8") if self.path is not None else None  # noqa: SIM115 - closed by close()
        )

    def wrap(self, handler: Callable[[Request], Result | Awaitable[Result]]) -> Callable[
            [Request], Result | Awaitable[Result]]:
        """``handler`` with every answer it gives logged (awaited answers when they come)."""

        def logged(request: Request) -> Result | Awaitable[Result]:
            result = handler(request)
            if isinstance(result, Response | Stream) or result is None:
                self._record(request, result)
                return result
            return self._later(request, result)

        return logged

    async def _later(self, request: Request, pending: Awaitable[Result]) -> Result:
        result = await pending
        self._record(request, result)
        return result

    def _record(self, request: Request, result: Result) -> None:
        kind, feed = classify(request.method, request.path)
        headers = request.headers
        if result is None:  # the handler dropped the connection unanswered
            status, size = 0, 0
        elif isinstance(result, Stream):
            status, size = result.status, -1 if result.content_length is None else result.content_length
        else:
            status, size = result.status, len(result.body)
        if request.method == "HEAD":
            size = 0
        now = time.time()
        start = request.received or now
        rec = RequestRecord(
            t_ms=round(now * 1000), method=request.method, path=request.path, kind=kind,
            feed=feed, status=status, if_none_match=headers.get("if-none-match"),
            if_modified_since=headers.get("if-modified-since"), bytes=size,
            user_agent=headers.get("user-agent"), start_ms=round(start * 1000, 3),
            end_ms=round(now * 1000, 3), host=host_name(headers.get("host")))
        self.records.append(rec)
        if self._fh is not None:
            self._fh.write(json.dumps(asdict(rec)) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def host_name(header: str | None) -> str | None:
    """The host a ``Host`` header names, lower-case and without its port (RFC 9110 §7.2)."""
    if not header:
        return None
    header = header.strip().lower()
    if header.startswith("["):  # an IPv6 literal (RFC 3986 §3.2.2)
        return header.partition("]")[0] + "]"
    return header.partition(":")[0]


def peak_concurrency(records: Iterable[RequestRecord]) -> dict[str, int]:
    """The most requests in progress together on each host (``""`` for requests naming none).

    A request is in progress from ``start_ms`` to ``end_ms``; one that starts as another
    ends is not concurrent with it, and one of no length is in progress at its instant.
    Records without a start (old logs, a replica's) are left out; a host none of whose
    records has one is absent.
    """
    events: dict[str, list[tuple[float, int, int]]] = {}
    for r in records:
        if r.start_ms is None or r.end_ms is None:
            continue
        end = max(r.end_ms, r.start_ms)
        # At one instant: ends of earlier requests (0), then starts (1), then ends of requests
        # that started at that very instant (2).
        events.setdefault(r.host or "", []).extend(
            [(r.start_ms, 1, 1), (end, 2 if end == r.start_ms else 0, -1)])
    peaks = {}
    for host, evs in events.items():
        evs.sort()
        level = peak = 0
        for _, _, step in evs:
            level += step
            peak = max(peak, level)
        peaks[host] = peak
    return peaks


def load_requests(path: str | Path) -> list[RequestRecord]:
    """Read a request log the farm wrote (JSONL)."""
    with open(path, encoding="utf-8") as fh:
        return [RequestRecord.from_json(json.loads(line)) for line in fh if line.strip()]
