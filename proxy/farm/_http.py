"""The feed farm's HTTP/1.1 server: an ``asyncio.Protocol`` with just what the farm needs.

Why not ``aiohttp.web``: the farm runs on the same two cores as the client it
serves in ``benchmarks/machinery/bench_probe.py``, and aiohttp's request and response
objects cost ~170 µs of CPU per feed request there, against ~45 µs for this
server, whose common case (a cached feed document or a 304) is answered
synchronously from ``data_received`` without creating a task.

What it does: keep-alive and pipelined requests (answered in order),
request bodies with ``Content-Length``, responses with a body or streamed
(``Content-Length`` or chunked), write flow control, and closing a
connection without an answer.  What it deliberately does not: chunked
request bodies (answered 411), TLS, HTTP/2, ``Expect: 100-continue``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import cast
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["HttpServer", "Request", "Response", "Result", "Stream", "text_response"]

log = logging.getLogger(__name__)

_MAX_HEAD = 64 * 1024
_MAX_BODY = 1024 * 1024


@dataclass(slots=True)
class Request:
    """One parsed request; header names are lower-case, repeated headers joined by ``", "``.

    ``received``: Unix time at which the server found the request's first bytes waiting
    (:meth:`HttpServer.batch_time`), its start as the host sees it.
    """

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    version: str
    received: float = 0.0

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


@dataclass(slots=True)
class Response:
    """A complete response; ``Content-Length`` is added by the server.

    A response may be sent many times (the farm keeps one per feed version):
    the server encodes its keep-alive head once and keeps it here.
    """

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    wire_head: bytes | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class Stream:
    """A streamed response: ``chunks`` is consumed as the client reads.

    Without ``content_length`` the body is sent chunked.  The iterator should
    stop when ``closed`` becomes set (the client went away).
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    content_length: int | None
    chunks: Callable[[asyncio.Event], AsyncIterator[bytes]]


Result = Response | Stream | None
"""``None``: close the connection without answering."""
Handler = Callable[[Request], Result | Awaitable[Result]]


def text_response(status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, (("Content-Type", "text/plain; charset=utf-8"), *headers), text.encode())


def _status_line(status: int) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    return f"HTTP/1.1 {status} {reason}\r\n".encode("ascii")


_STATUS_LINES: dict[int, bytes] = {}


def _head(status: int, headers: tuple[tuple[str, str], ...], length: int | None, close: bool) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        line = _STATUS_LINES[status] = _status_line(status)
    parts = [line]
    parts.extend(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers)
    if length is None:
        parts.append(b"Transfer-Encoding: chunked\r\n")
    elif status != 304 and not 100 <= status < 200 and status != 204:
        parts.append(b"Content-Length: %d\r\n" % length)
    if close:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


class _Connection(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._received = 0.0
        self._busy = False
        self._closed = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    # asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        self._server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed.set()
        self._writable.set()
        self._server._connections.discard(self)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        if not self._buf:  # the first bytes of a request (a pipelined one waits in the buffer)
            self._received = self._server.batch_time()
        self._buf += data
        if not self._busy:
            self._process()

    # requests --------------------------------------------------------------

    def _process(self) -> None:
        """Answer every complete request in the buffer, in order, until one needs a task."""
        while not self._busy and not self._closed.is_set():
            request = self._next_request()
            if request is None:
                return
            try:
                result = self._server.handler(request)
            except Exception:
                log.exception("feed farm handler failed on %s %s", request.method, request.path)
                result = text_response(500, "internal error\n")
            head_only = request.method == "HEAD"
            if isinstance(result, Stream):
                self._start_task(self._stream(result, request.keep_alive, head_only))
            elif isinstance(result, Response) or result is None:
                self._answer(result, request.keep_alive, head_only)
            else:
                self._start_task(self._await(result, request.keep_alive, head_only))

    def _next_request(self) -> Request | None:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _MAX_HEAD:
                self._fail(431, "request head too large")
            return None
        try:
            head = bytes(buf[:end]).decode("latin-1")
            line, *lines = head.split("\r\n")
            method, target, version = line.split(" ")
            headers: dict[str, str] = {}
            for h in lines:
                name, sep, value = h.partition(":")
                if not sep:
                    raise ValueError(h)
                key = name.strip().lower()
                value = value.strip()
                headers[key] = f"{headers[key]}, {value}" if key in headers else value
        except ValueError:
            self._fail(400, "malformed request")
            return None
        if "chunked" in headers.get("transfer-encoding", ""):
            self._fail(411, "chunked request bodies are not supported; send Content-Length")
            return None
        length_text = headers.get("content-length", "0")
        if not length_text.isdigit() or int(length_text) > _MAX_BODY:
            self._fail(400, "bad or too large Content-Length")
            return None
        length = int(length_text)
        if len(buf) < end + 4 + length:
            return None
        body = bytes(buf[end + 4 : end + 4 + length])
        del buf[: end + 4 + length]
        if "?" in target or "%" in target:
            parts = urlsplit(target)
            path, query = unquote(parts.path), dict(parse_qsl(parts.query))
        else:
            path, query = target, {}
        return Request(method, path, query, headers, body, version, self._received)

    def _fail(self, status: int, text: str) -> None:
        self._answer(text_response(status, text + "\n"), keep_alive=False)

    # responses -------------------------------------------------------------

    def _answer(self, result: Response | None, keep_alive: bool, head_only: bool = False) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if result is None:
            transport.close()
            self._closed.set()
            return
        if keep_alive:
            head = result.wire_head
            if head is None:
                head = result.wire_head = _head(result.status, result.headers, len(result.body), False)
        else:
            head = _head(result.status, result.headers, len(result.body), True)
        transport.write(head if head_only else head + result.body)
        if not keep_alive:
            transport.close()
            self._closed.set()

    def _start_task(self, coro: Awaitable[None]) -> None:
        self._busy = True
        task = asyncio.ensure_future(coro)
        self._server._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Future[None]) -> None:
        self._server._tasks.discard(task)
        self._busy = False
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            log.error("feed farm handler failed", exc_info=exc)
            if self._transport is not None:
                self._transport.abort()
            self._closed.set()
            return
        if self._buf:
            self._process()

    async def _await(self, pending: Awaitable[Result], keep_alive: bool, head_only: bool) -> None:
        result = await pending
        if isinstance(result, Stream):
            await self._stream(result, keep_alive, head_only)
        else:
            self._answer(result, keep_alive, head_only)

    async def _stream(self, stream: Stream, keep_alive: bool, head_only: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        chunked = stream.content_length is None
        transport.write(_head(stream.status, stream.headers, stream.content_length, not keep_alive))
        if head_only:
            if chunked:
                transport.write(b"0\r\n\r\n")
            return
        complete = False
        async for chunk in stream.chunks(self._closed):
            if self._closed.is_set():
                break
            if chunk:
                transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
            await self._writable.wait()
        else:
            complete = not self._closed.is_set()
        if not complete:
            transport.abort()  # a half-sent body must not look complete
            self._closed.set()
            return
        if chunked:
            transport.write(b"0\r\n\r\n")
        if not keep_alive:
            transport.close()
            self._closed.set()


@dataclass
class HttpServer:
    """Serves ``handler`` on one port of one or more addresses (see :meth:`start`)."""

    handler: Handler
    _servers: list[asyncio.Server] = field(default_factory=list)
    _connections: set[_Connection] = field(default_factory=set)
    _tasks: set[asyncio.Future[None]] = field(default_factory=set)
    port: int = 0
    _batch: float | None = None

    def batch_time(self) -> float:
        """When the server began reading the sockets it found ready in this turn of the event loop.

        Every request read in one turn was waiting at that moment, so all of them were in
        progress together, though the server answers them one after the other; a request
        sent only after an answer arrived is read in a later turn, after that answer was
        written.  This is how the request log sees concurrent requests (issue 47).
        """
        if self._batch is None:
            self._batch = time.time()
            asyncio.get_running_loop().call_soon(self._end_batch)
        return self._batch

    def _end_batch(self) -> None:
        self._batch = None

    async def start(self, hosts: Sequence[str], port: int, backlog: int = 1024) -> int:
        """Listen on ``port`` of every address in ``hosts``; ``port=0`` picks one free on the first."""
        loop = asyncio.get_running_loop()
        try:
            for host in hosts:
                server = await loop.create_server(lambda: _Connection(self), host, port, backlog=backlog)
                self._servers.append(server)
                port = int(server.sockets[0].getsockname()[1])
        except OSError:
            await self.close()
            raise
        self.port = port
        return port

    async def close(self) -> None:
        """Stop listening, end open connections and cancel handlers still running."""
        for server in self._servers:
            server.close()
        for conn in list(self._connections):
            if conn._transport is not None:
                conn._transport.abort()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
