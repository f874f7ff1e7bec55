"""What goes out to users: the event streams, and the deliveries' and targets' operations.

The writer (on the loop's thread) tells :class:`Deliveries` when it stored
resolutions; it wakes the dispatcher (which sends the outbox's notifications) and
every event stream (``GET /api/v1/events``) on the API's event loop. A user's
operations on deliveries and targets (retry, rotate a secret, enable) touch only the
database and the dispatcher: any process makes them, leader or not.

A new way to reach users (another sender, another stream) goes here; a new kind of
notification document goes to :mod:`proxy.notify`.

What it does not do: send (:class:`~proxy.service.dispatch.Dispatcher` does), or decide
what is due (the engine and the evaluator do, through the writer).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator

import structlog

from proxy.service._shared import Shared
from proxy.store import Delivery, NotificationEvent, NotifyTarget

log = structlog.get_logger("proxy.service")


class Deliveries:
    """Event streams and the operations on deliveries and targets (module docstring)."""

    def __init__(self, shared: Shared) -> None:
        self._s = shared
        #: Set and replaced whenever resolutions (and so events) were stored: the event
        #: streams wait on it (:meth:`events_changed`).
        self._events_changed = asyncio.Event()

    def resolved_elsewhere(self) -> None:
        """The writer (on the loop's thread) stored resolutions: wake whom :meth:`resolved`
        wakes, on the API's event loop (their events belong to it)."""
        api_loop = self._s.api_loop
        if api_loop is not None:
            with contextlib.suppress(RuntimeError):  # closed meanwhile: nobody left to wake
                api_loop.call_soon_threadsafe(self.resolved)

    def resolved(self) -> None:
        """The writer stored resolutions: wake the dispatcher and the event streams."""
        if self._s.dispatcher is not None:
            self._s.dispatcher.wake()
        changed, self._events_changed = self._events_changed, asyncio.Event()
        changed.set()

    def events_changed(self) -> asyncio.Event:
        """An event set at the next stored resolution: take it BEFORE reading the events
        table, then wait on it, so nothing stored in between is slept through."""
        return self._events_changed

    async def stream_events(
        self, user_id: int, after: int
    ) -> AsyncIterator[NotificationEvent | None]:
        """The user's events with ids above ``after``, then each new one as it is stored, for
        ever; ``None`` after ``sse_keepalive_seconds`` without one (send a keep-alive).

        Read from the events table, so a client that reconnects with the last id it saw
        gets every later event once (ids grow in commit order: one writer stores them)."""
        last = after
        while True:
            changed = self.events_changed()
            events = await self._s.store.events_after(user_id, last)
            for event in events:
                last = event.id
                yield event
            if events:
                continue
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation
                # that comes as the event is set (the writer sets it from the loop's thread).
                async with asyncio.timeout(self._s.settings.sse_keepalive_seconds):
                    await changed.wait()
            except TimeoutError:
                yield None

    async def retry_delivery(self, user_id: int, delivery_id: int) -> Delivery:
        """Send a (failed) delivery again now, with a fresh retry window."""
        delivery = await self._s.store.retry_delivery(user_id, delivery_id)
        if self._s.dispatcher is not None:
            self._s.dispatcher.wake()
        log.info("delivery_retry_requested", delivery=delivery_id, user=user_id)
        return delivery

    async def rotate_target_secret(
        self, user_id: int, target_id: int, overlap_seconds: float | None = None
    ) -> NotifyTarget:
        """A new webhook secret (shown once); the old one also signs for the overlap."""
        seconds = (self._s.settings.webhook_secret_overlap_seconds
                   if overlap_seconds is None else overlap_seconds)
        target = await self._s.store.rotate_target_secret(
            user_id, target_id, dt.timedelta(seconds=seconds))
        log.info("target_secret_rotated", target=target_id, user=user_id, overlap=seconds)
        return target

    async def enable_target(self, user_id: int, target_id: int) -> NotifyTarget:
        target = await self._s.store.enable_target(user_id, target_id)
        log.info("target_enabled", target=target_id, user=user_id)
        return target
