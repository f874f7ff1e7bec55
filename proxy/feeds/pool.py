"""Probing in worker processes: :class:`ProbePool`, the :class:`Fetcher` spread over cores.

One process probes at most ~1,100 changed feeds per second here: every probe
costs ~0.85 ms of CPU (HTTP through httpx, gzip, parsing), and Python runs one
thread at a time.  A pool of ``processes`` workers, each running its own
event loop with its own :class:`Fetcher` (one shared httpx client per
worker), uses the other cores.  ``ProbePool.probe`` has the same contract as
``Fetcher.probe``: every outcome is a :data:`ProbeResult`, nothing about a
feed raises, cancellation propagates.

Which worker probes a feed: the one its URL's host hashes to, so that one
host's requests all go through one worker's :class:`HostLimiter` and the
per-host limits hold exactly as in one process.  (A redirect to another host
is followed by the worker of the first one.)

What crosses the process boundary is small and flat: a request is the
:class:`FeedState` fields and ``now``; a result is a tuple (entries as tuples
of strings, times as integer microseconds), which costs ~50 µs per 20-entry
document against ~150 µs for pickling the result objects.  New-entry
detection runs in the caller's process with the caller's
:class:`KnownEntries` (the worker reports every entry), so ``known`` never
has to be sent anywhere.  Messages are framed (4-byte length, pickle) and
batched per event-loop iteration in both directions.

A worker that dies is replaced; the probes it had in flight end as
``NetworkError`` ("probe worker exited").  Workers are started with the
``spawn`` method: forking a process that runs an event loop and threads is
not safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import struct
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any, cast
from urllib.parse import urlsplit

from proxy.feeds.fetch import Fetcher, FetcherSettings, check_feed_url
from proxy.feeds.identity import split_new
from proxy.feeds.politeness import backoff_not_before
from proxy.feeds.results import (
    Entry,
    FeedState,
    KnownEntries,
    NetworkError,
    NothingKnown,
    NotModified,
    Ok,
    ProbeResult,
)
from proxy.feeds.ssrf import HostResolver, SystemResolver, redact_url

__all__ = ["ProbePool"]

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_LEN = struct.Struct("!I")


def _us(when: datetime | None) -> int | None:
    return None if when is None else (when - _EPOCH) // _US


def _dt(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + us * _US


# ---------------------------------------------------------------------- codec

_OK, _NOT_MODIFIED, _OTHER = 0, 1, 2


def encode_result(result: ProbeResult) -> tuple[Any, ...]:
    """A flat tuple of builtins for the two frequent outcomes; the object itself otherwise."""
    s = result.state
    head = (s.url, s.etag, s.last_modified, s.consecutive_errors, result.elapsed,
            _us(result.not_before), result.moved_to)
    if isinstance(result, Ok):
        entries = tuple((e.identity, e.title, e.link, e.summary, e.content, _us(e.published))
                        for e in result.entries)
        return (_OK, head, entries, result.feed_title, result.parser, result.warning,
                result.final_url, result.hub, result.self_url)
    if isinstance(result, NotModified):
        return (_NOT_MODIFIED, head)
    return (_OTHER, result)


def decode_result(data: tuple[Any, ...], known: KnownEntries) -> ProbeResult:
    """The result :func:`encode_result` encoded; an ``Ok``'s ``new`` is decided with ``known``."""
    kind = data[0]
    if kind == _OTHER:
        result: ProbeResult = data[1]
        return result
    url, etag, last_modified, errors, elapsed, not_before, moved_to = data[1]
    state = FeedState(url, etag, last_modified, errors)
    if kind == _NOT_MODIFIED:
        return NotModified(state=state, elapsed=elapsed, not_before=_dt(not_before),
                           moved_to=moved_to)
    _, _, rows, feed_title, parser, warning, final_url, hub, self_url = data
    parsed = [Entry(i, t, link, summary, content, _dt(p)) for i, t, link, summary, content, p in rows]
    entries, new = split_new(parsed, known)
    return Ok(state=state, elapsed=elapsed, not_before=_dt(not_before), moved_to=moved_to,
              entries=entries, new=new, feed_title=feed_title, parser=parser, warning=warning,
              final_url=final_url, hub=hub, self_url=self_url)


# The worker reports every entry; the pool's caller decides what is new.
_NOTHING = NothingKnown()


# ---------------------------------------------------------------------- framing

class _Link(asyncio.Protocol):
    """Length-prefixed pickled message batches over a stream socket, both directions.

    ``send`` queues a message; everything queued in one event-loop iteration
    goes out as one frame.
    """

    def __init__(self, on_message: Callable[[Any], None], on_lost: Callable[[], None]) -> None:
        self._on_message = on_message
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._out: list[Any] = []
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_lost()

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        start = 0
        while len(buf) - start >= 4:
            (size,) = _LEN.unpack_from(buf, start)
            if len(buf) - start - 4 < size:
                break
            batch = pickle.loads(memoryview(buf)[start + 4 : start + 4 + size])
            start += 4 + size
            for message in batch:
                self._on_message(message)
        if start:
            del buf[:start]

    def send(self, message: Any) -> None:
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(message)

    def _flush(self) -> None:
        batch, self._out = self._out, []
        if self._transport is None or self._transport.is_closing():
            return
        data = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        self._transport.write(_LEN.pack(len(data)) + data)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def _connect(sock: socket.socket, on_message: Callable[[Any], None],
                   on_lost: Callable[[], None]) -> _Link:
    loop = asyncio.get_running_loop()
    _, link = await loop.create_unix_connection(lambda: _Link(on_message, on_lost), sock=sock)
    return link


# ---------------------------------------------------------------------- worker side

def _worker_main(conn: Connection, settings: FetcherSettings, resolver: HostResolver | None) -> None:
    """Entry point of a worker process: probe what the parent asks until it says stop."""
    from proxy import aio

    # ^C at a terminal reaches the whole process group: the parent decides when its
    # workers stop (a "stop" message, or its end, which closes the link).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    conn.close()
    aio.run(_serve(sock, settings, resolver))


async def _serve(sock: socket.socket, settings: FetcherSettings, resolver: HostResolver | None) -> None:
    done = asyncio.Event()
    tasks: dict[int, asyncio.Task[None]] = {}
    async with Fetcher(settings, resolver=resolver) as fetcher:

        async def run(req_id: int, state: FeedState, now: datetime) -> None:
            try:
                result = await fetcher.probe(state, _NOTHING, now=now)
                link.send((req_id, encode_result(result)))
            finally:
                tasks.pop(req_id, None)

        def on_message(message: tuple[Any, ...]) -> None:
            if message[0] == "probe":
                _, req_id, url, etag, last_modified, errors, now = message
                state = FeedState(url, etag, last_modified, errors)
                tasks[req_id] = asyncio.ensure_future(run(req_id, state, _EPOCH + now * _US))
            elif message[0] == "cancel":
                task = tasks.pop(message[1], None)
                if task is not None:
                    task.cancel()
            elif message[0] == "stop":
                done.set()

        link = await _connect(sock, on_message, done.set)
        link.send(("ready", os.getpid()))
        await done.wait()
        for task in list(tasks.values()):
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        link.close()


# ---------------------------------------------------------------------- parent side

class _Worker:
    """The parent's handle on one worker process."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: multiprocessing.process.BaseProcess | None = None
        self.link: _Link | None = None
        self.ready: asyncio.Future[int] | None = None
        # request id -> (future, state, perf_counter at the start, the probe's now)
        self.pending: dict[int, tuple[asyncio.Future[tuple[Any, ...]], FeedState, float, datetime]] = {}
        self.pid: int | None = None
        self.generation = 0  # which start of this worker a link belongs to


class ProbePool:
    """Probes feeds in ``processes`` worker processes; use as ``async with ProbePool(...) as pool``.

    ``resolver`` (custom DNS, tests) must be picklable: each worker gets a
    copy.  ``start_timeout`` bounds how long a worker may take to start.
    """

    def __init__(
        self,
        settings: FetcherSettings | None = None,
        *,
        processes: int = 2,
        resolver: HostResolver | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        if processes < 1:
            raise ValueError(f"ProbePool needs at least 1 process, got {processes}")
        self.settings = settings or FetcherSettings()
        self._policy = self.settings.address_policy
        self._resolver = resolver
        self._local_resolver: HostResolver = resolver or SystemResolver()
        self._start_timeout = start_timeout
        self._workers = [_Worker(i) for i in range(processes)]
        self._ids = itertools.count()
        self._closing = False
        self._started = False
        self._ctx = multiprocessing.get_context("spawn")
        self._restarts: set[asyncio.Task[None]] = set()

    @property
    def processes(self) -> int:
        return len(self._workers)

    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (CPU accounting in benchmarks)."""
        return [w.pid for w in self._workers if w.pid is not None]

    async def __aenter__(self) -> ProbePool:
        loop = asyncio.get_running_loop()
        for w in self._workers:
            w.ready = loop.create_future()
        try:
            await asyncio.gather(*(self._start(w) for w in self._workers))
        except BaseException:
            await self.aclose()  # no worker outlives a pool that failed to start
            raise
        self._started = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the workers (probes in flight are cancelled) and wait for them to exit."""
        if self._closing:
            return
        self._closing = True
        for task in list(self._restarts):
            task.cancel()
        for w in self._workers:
            if w.link is not None and not w.link.closed:
                w.link.send(("stop",))
        await asyncio.sleep(0)  # let the stop messages go out
        loop = asyncio.get_running_loop()
        for w in self._workers:
            if w.process is not None:
                await loop.run_in_executor(None, self._join, w.process)
            if w.link is not None:
                w.link.close()
            self._fail_pending(w, "the probe pool closed")

    @staticmethod
    def _join(process: multiprocessing.process.BaseProcess) -> None:
        process.join(10)
        if process.is_alive():
            process.terminate()
            process.join(5)

    async def _start(self, w: _Worker) -> None:
        """Start ``w``'s process and wait for its hello; ``w.ready`` is the caller's new future."""
        loop = asyncio.get_running_loop()
        assert w.ready is not None and not w.ready.done()
        parent, child = multiprocessing.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main, args=(child, self.settings, self._resolver),
            name=f"probe-worker-{w.index}", daemon=True,
        )
        await loop.run_in_executor(None, process.start)
        child.close()
        sock = socket.socket(fileno=os.dup(parent.fileno()))
        parent.close()
        w.process = process
        w.generation += 1
        w.link = await _connect(sock, functools.partial(self._on_message, w),
                                functools.partial(self._on_lost, w, w.generation))
        try:
            w.pid = await asyncio.wait_for(asyncio.shield(w.ready), self._start_timeout)
        except TimeoutError:
            process.terminate()
            raise RuntimeError(
                f"probe worker {w.index} did not start within {self._start_timeout:g} s"
            ) from None

    def _on_message(self, w: _Worker, message: tuple[Any, ...]) -> None:
        if message[0] == "ready":
            if w.ready is not None and not w.ready.done():
                w.ready.set_result(int(message[1]))
            return
        req_id, encoded = message
        entry = w.pending.pop(req_id, None)
        if entry is not None and not entry[0].done():
            entry[0].set_result(encoded)

    def _on_lost(self, w: _Worker, generation: int) -> None:
        if self._closing or generation != w.generation:
            return  # closing, or the late end of a worker already replaced
        code = w.process.exitcode if w.process is not None else None
        if w.ready is not None and not w.ready.done():
            # It died before saying hello: starting another would most likely fail the same way.
            w.ready.set_exception(RuntimeError(f"probe worker {w.index} exited while starting (code {code})"))
            self._fail_pending(w, f"probe worker exited while starting (code {code})")
            return
        log.error("probe worker %d (pid %s) exited (code %s); starting another", w.index, w.pid, code)
        self._fail_pending(w, f"probe worker exited (code {code})")
        w.link, w.pid = None, None
        loop = asyncio.get_running_loop()
        w.ready = loop.create_future()  # probes for this worker wait for the replacement
        task = loop.create_task(self._restart(w))
        self._restarts.add(task)
        task.add_done_callback(self._restarts.discard)

    async def _restart(self, w: _Worker) -> None:
        """Start a replacement for ``w``, retrying with back-off (1 s doubling to 60 s) until it runs.

        Meanwhile the probes of its hosts end as ``NetworkError`` (with back-off), as
        for any unreachable feed: the pool never gives up on a shard.
        """
        delay = 1.0
        while not self._closing:
            try:
                await self._start(w)
                return
            except Exception as exc:
                log.error("probe worker %d did not restart (%s); next attempt in %g s", w.index, exc, delay)
                if w.process is not None and w.process.is_alive():
                    w.process.terminate()
                await asyncio.sleep(delay)
                delay = min(2 * delay, 60.0)
                w.ready = asyncio.get_running_loop().create_future()

    def _fail_pending(self, w: _Worker, reason: str) -> None:
        pending, w.pending = w.pending, {}
        for fut, state, started, now in pending.values():
            if not fut.done():
                fut.set_result(encode_result(self._internal_error(state, started, now, reason)))

    def _internal_error(self, state: FeedState, started: float, now: datetime, reason: str) -> NetworkError:
        """What :meth:`Fetcher.probe` returns for a bug: a network error with back-off."""
        s = self.settings
        errors = state.consecutive_errors + 1
        return NetworkError(
            state=FeedState(state.url, state.etag, state.last_modified, errors),
            elapsed=time.perf_counter() - started,
            not_before=backoff_not_before(errors, now, base=s.backoff_base, cap=s.backoff_cap),
            reason=f"internal error: {reason}",
        )

    # ------------------------------------------------------------------ the Fetcher's API

    async def check_url(self, url: str) -> None:
        """As :meth:`Fetcher.check_url`, in this process (no request is sent)."""
        await check_feed_url(url, self._policy, self._local_resolver)

    def _worker_for(self, url: str) -> _Worker:
        try:
            host = urlsplit(url).hostname or ""
        except ValueError:
            host = ""
        return self._workers[zlib.crc32(host.encode("utf-8", "replace")) % len(self._workers)]

    async def probe(self, state: FeedState, known: KnownEntries, *, now: datetime) -> ProbeResult:
        """Probe one feed once in its host's worker; the contract of :meth:`Fetcher.probe`."""
        if not self._started or self._closing:
            raise RuntimeError("ProbePool.probe() called outside 'async with ProbePool(...)'")
        if now.tzinfo is None:
            raise ValueError(f"ProbePool.probe(now=...) must be timezone-aware (UTC), got {now!r}")
        w = self._worker_for(state.url)
        if w.link is None or w.link.closed:
            assert w.ready is not None
            with contextlib.suppress(RuntimeError):
                await asyncio.shield(w.ready)  # a replacement is starting
        req_id = next(self._ids)
        fut: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()
        started = time.perf_counter()
        w.pending[req_id] = (fut, state, started, now)
        if w.link is None or w.link.closed:
            self._fail_pending(w, "probe worker is not running")
        else:
            w.link.send(("probe", req_id, state.url, state.etag, state.last_modified,
                         state.consecutive_errors, _us(now)))
        try:
            encoded = await fut
        except asyncio.CancelledError:
            if w.pending.pop(req_id, None) is not None and w.link is not None and not w.link.closed:
                w.link.send(("cancel", req_id))
            raise
        try:
            return decode_result(encoded, known)
        except Exception as exc:  # e.g. the caller's KnownEntries failed, as in Fetcher.probe
            log.exception("unexpected error finishing the probe of %s", redact_url(state.url))
            return self._internal_error(state, started, now, repr(exc))
