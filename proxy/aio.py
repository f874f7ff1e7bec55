"""Which asyncio event loop the proxy's own processes run on.

The probe path is CPU-bound in the event loop (sockets, HTTP framing, task
switches), so the loop's own cost shows in every probe. uvloop (libuv, the
loop uvicorn picks when it is installed) cuts that cost; it is used wherever
it is installed, unless ``PROXY_EVENT_LOOP=asyncio`` asks for the standard
loop (to rule the loop out when chasing a bug). Figures: docs/bench-probe.md.

Also :func:`cancel_and_wait`, how the service stops its own tasks.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

_T = TypeVar("_T")

LoopName = Literal["uvloop", "asyncio"]


def loop_name() -> LoopName:
    """``uvloop`` if it is installed and not switched off, else ``asyncio``."""
    choice = os.environ.get("PROXY_EVENT_LOOP", "auto").strip().lower()
    if choice not in {"auto", "uvloop", "asyncio"}:
        raise ValueError(f"PROXY_EVENT_LOOP must be auto, uvloop or asyncio, not {choice!r}")
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise ValueError("PROXY_EVENT_LOOP=uvloop but uvloop is not installed") from None
        return "asyncio"
    return "uvloop"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for :class:`asyncio.Runner`: uvloop's, or ``None`` for the default."""
    if loop_name() == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """:func:`asyncio.run` on the loop :func:`loop_name` chooses."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


_RECANCEL_SECONDS = 2.0
"""How long :func:`cancel_and_wait` lets a cancelled task wind down before cancelling it again."""


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended, without swallowing the caller's own cancellation.

    ``with suppress(CancelledError): await task`` also swallows the CancelledError meant
    for the task that awaits, when it is cancelled while ``task`` is still winding down
    (an aborted transaction, a send timing out): the caller then carries on as if nothing
    had happened. The lease keeper stepping down was one: ``ProxyService.stop()`` cancelled
    it mid step-down, the step-down ate the cancellation, the keeper went back to
    campaigning, and ``stop()`` waited for it for ever.

    A task can also swallow the cancellation without meaning to: ``asyncio.wait_for``
    in CPython 3.11 returns the result instead of raising when the awaited completes in
    the same turn as the cancel (fixed in 3.12). The lease keeper's renewal waits that
    way, so about one restart in twenty left it renewing for ever and ``stop()`` waiting
    for it (``tests/test_metrics_conventions.py``, run in a loop). So the cancel is
    repeated, every ``_RECANCEL_SECONDS``, until the task has ended.
    """
    task.cancel()
    loop = asyncio.get_running_loop()
    timer: list[asyncio.TimerHandle] = []

    def again() -> None:  # the last cancel was swallowed: once more, until the task ends
        if not task.done():
            task.cancel()
            timer[:] = [loop.call_later(_RECANCEL_SECONDS, again)]

    timer.append(loop.call_later(_RECANCEL_SECONDS, again))
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # we are being cancelled too: pass it on
    finally:
        for handle in timer:
            handle.cancel()
