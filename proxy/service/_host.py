"""Where the chronon loop runs: a thread of its own with its own event loop, or inline.

Issue 24.4, "the budget comes first": when the chronon loop shares uvicorn's
event loop, every API handler that holds that loop (a listing serialised, a
profile compiled) delays the next tick and the probes' callbacks. In a
:class:`LoopHost` started with ``threaded=True`` the loop ticks, probes and writes
on a dedicated thread; the API's event loop hands it work and awaits the answer
without blocking:

- :meth:`LoopHost.call` runs a synchronous function on the loop's thread (between
  two of its callbacks, so it sees the engine and the evaluator between ticks and
  probe completions, never in the middle of one);
- :meth:`LoopHost.run` runs a coroutine there (it may use the loop's store and its
  locks: those belong to the loop's event loop);
- :meth:`LoopHost.spawn` starts a long-running coroutine there and returns a task
  of the caller's loop that mirrors it (cancel it to cancel the remote one).

Threads share the GIL, so this isolates the loop from the API's *waiting* (a
handler that keeps its event loop busy), not from its CPU: the interpreter
hands the GIL over every ``sys.getswitchinterval()`` (5 ms), which bounds what a
busy API thread adds to a tick's lateness.

``threaded=False`` runs everything on the caller's event loop (tests that drive
:meth:`~proxy.service.loop.ChrononLoop.tick` by hand, ``run_loop=False``); the
three methods then call, await and create a task directly.

What it does not do: decide what runs where (the service does), or make the
engine thread-safe (nothing but the host's thread may touch it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import structlog

log = structlog.get_logger("proxy.service")

T = TypeVar("T")


class LoopHost:
    """The chronon loop's event loop: on a thread of its own (``threaded``) or the caller's."""

    def __init__(self, *, threaded: bool, name: str = "proxy-chronon-loop") -> None:
        self.threaded = threaded
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the chronon loop runs on."""
        if self._loop is None:
            raise RuntimeError("LoopHost is not started")
        return self._loop

    @property
    def running(self) -> bool:
        return self._loop is not None

    @property
    def thread_id(self) -> int | None:
        """The ident of the thread the chronon loop runs on (``None`` until started)."""
        if self._thread is not None:
            return self._thread.ident
        return threading.get_ident() if self._loop is not None else None

    def start(self) -> None:
        """Start the thread and its event loop (returns once it runs); inline: adopt the
        running loop."""
        if self._loop is not None:
            return
        if not self.threaded:
            self._loop = asyncio.get_running_loop()
            return
        loop = asyncio.new_event_loop()
        started = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(started.set)
            try:
                loop.run_forever()
            finally:
                # Whatever is left (nothing, after a clean stop) is cancelled, not leaked.
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        thread = threading.Thread(target=main, name=self.name, daemon=True)
        thread.start()
        started.wait()
        self._loop, self._thread = loop, thread
        log.info("loop_thread_started", thread=self.name)

    async def stop(self) -> None:
        """Stop the event loop and join the thread (what still runs there is cancelled)."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)

    def post(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop's thread soon, without waiting (safe from any thread
        and from signal handlers)."""
        if self._loop is None:
            fn(*args)
        elif not self.threaded:
            self._loop.call_soon(fn, *args)
        else:
            self._loop.call_soon_threadsafe(fn, *args)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the loop's thread; its result or its exception here.

        Once scheduled it runs to the end even if the caller is cancelled (a profile
        stored must be installed). When the host is not running (stopped, or not
        started yet) nothing else touches the state: ``fn`` runs here and now."""
        if not self.threaded or self._loop is None:
            return fn(*args)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not done.set_running_or_notify_cancel():
                return
            try:
                done.set_result(fn(*args))
            except BaseException as exc:  # handed over to the caller, who raises it
                done.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return await asyncio.shield(asyncio.wrap_future(done))

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the loop's event loop; shielded: a cancelled caller stops
        waiting, the coroutine goes on (it may hold a transaction)."""
        if not self.threaded or self._loop is None:
            return await coro
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return await asyncio.shield(asyncio.wrap_future(future))

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``coro`` on the loop's event loop for as long as it runs; the task returned
        belongs to the caller's loop, and cancelling it cancels ``coro`` and waits for it."""
        if not self.threaded:
            return asyncio.create_task(coro, name=name)
        loop = self.loop
        ended: concurrent.futures.Future[BaseException | None] = concurrent.futures.Future()
        started: list[asyncio.Task[None]] = []

        def begin() -> None:
            task = loop.create_task(coro, name=name)
            started.append(task)
            task.add_done_callback(
                lambda t: ended.set_result(None if t.cancelled() else t.exception()))

        def cancel() -> None:  # runs after begin(): one thread, callbacks in order
            for task in started:
                task.cancel()

        loop.call_soon_threadsafe(begin)

        async def mirror() -> None:
            try:
                error = await asyncio.shield(asyncio.wrap_future(ended))
            except asyncio.CancelledError:
                loop.call_soon_threadsafe(cancel)
                # Wait for the remote task to end, so nothing of it runs after this one.
                await asyncio.shield(asyncio.wrap_future(ended))
                raise
            if error is not None:
                raise error

        return asyncio.create_task(mirror(), name=name)
