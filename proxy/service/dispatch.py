"""The dispatcher: delivers the outbox's pending rows, at least once, with back-off (issue 19).

The chronon loop never waits for it. The writer stores every resolution with
its ``deliveries`` rows in one transaction (:mod:`proxy.store._outbox`) and
then wakes the dispatcher (:meth:`Dispatcher.wake`); the dispatcher is its own
asyncio task that:

1. reads due rows (``state = pending AND next_attempt_at <= now``), skipping
   rows in flight and targets already at ``per_target`` attempts in flight (a
   slow target cannot take every slot);
2. sends each in its own task, at most ``concurrency`` at once: a webhook signed
   per Standard Webhooks with the row's ``msg_id`` as ``webhook-id`` (the same on
   every retry, so receivers deduplicate), or an Apprise notification with the
   document's text;
3. decides the outcome (:func:`decide`, pure) and stores outcomes in batches
   (one transaction per batch). A row stays "in flight" until its outcome is
   committed, so it is never sent twice by this process.

A crash (even ``kill -9`` between the resolution's commit and the send, or
between a send and its outcome's commit) leaves the row ``pending``: the next
start sends it (again). That is the "at least once"; the stable ``webhook-id``
makes it "exactly once as the receiver sees it".

What it does not do: order deliveries per target (a retry may overtake), or
coordinate several service instances (one dispatcher per database).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from proxy.aio import cancel_and_wait
from proxy.errors import StorageError
from proxy.notify.payload import Notification
from proxy.notify.render import render_text
from proxy.notify.senders import Sender, SendResult
from proxy.notify.signing import webhook_headers
from proxy.service.metrics import ServiceMetrics
from proxy.store import TARGET_DISABLED_ERROR, AttemptOutcome, DeliveryState, DueDelivery, Store

log = structlog.get_logger("proxy.delivery")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential back-off with jitter: attempt ``n`` (1-based) failed → wait
    ``d/2 + U(0, d/2)`` with ``d = min(cap, base * 2**(n-1))`` ("equal jitter": spread,
    yet never much shorter than planned); a longer ``Retry-After`` wins. Retries go on
    until ``window`` seconds after the row's window start, then the row is a dead letter."""

    base: float = 5.0
    cap: float = 3600.0
    window: float = 86400.0

    def delay(self, attempts: int, rng: random.Random) -> float:
        exponent = max(attempts - 1, 0)
        d = self.cap if exponent >= 64 else min(self.cap, self.base * 2.0**exponent)
        return d / 2 + rng.uniform(0, d / 2)


def decide(
    due: DueDelivery, result: SendResult, now: dt.datetime, policy: RetryPolicy,
    rng: random.Random,
) -> AttemptOutcome:
    """What an attempt's result means for its row (no I/O; table-tested)."""

    def outcome(
        state: DeliveryState, next_at: dt.datetime, disable: str | None = None
    ) -> AttemptOutcome:
        return AttemptOutcome(due.id, due.target_id, now, state, next_at, result.status,
                              result.error, disable)

    if result.ok:
        return outcome("delivered", now)
    if result.gone:
        # Standard Webhooks: 410 Gone means the endpoint is gone for good; stop sending to it.
        return outcome("failed", now, f"410 Gone at {now.isoformat(timespec='seconds')}")
    if (now - due.window_start).total_seconds() >= policy.window:
        return outcome("failed", now)
    wait = policy.delay(due.attempts + 1, rng)
    if result.retry_after is not None:
        # RFC 9110 §10.2.3: the receiver says when to come back; never sooner.
        wait = max(wait, min(result.retry_after, policy.window))
    return outcome("pending", now + dt.timedelta(seconds=wait))


def _outcome_label(o: AttemptOutcome) -> str:
    if o.state == "delivered":
        return "delivered"
    if o.disable_target:
        return "gone"
    if not o.attempted:
        return "target_disabled"
    return "retry" if o.state == "pending" else "failed"


@dataclass
class Dispatcher:
    """Sends due deliveries in the background; see the module's docstring."""

    store: Store
    sender: Sender
    metrics: ServiceMetrics
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency: int = 100
    per_target: int = 4
    poll: float = 1.0
    batch: int = 500
    stop_timeout: float = 5.0
    wall: Callable[[], float] = time.time
    rng: random.Random = field(default_factory=random.Random)
    #: Delivery ids being sent, or sent with their outcome not yet stored.
    inflight: set[int] = field(default_factory=set)
    _per_target: dict[int, int] = field(default_factory=dict)
    _wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    _settle_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _outcomes: asyncio.Queue[tuple[DueDelivery, AttemptOutcome]] = field(
        default_factory=asyncio.Queue)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _main: asyncio.Task[None] | None = None
    _flusher: asyncio.Task[None] | None = None
    _backlog_at: float = 0.0
    sent: int = 0

    def start(self) -> None:
        self._main = asyncio.create_task(self._run(), name="proxy-dispatcher")
        self._flusher = asyncio.create_task(self._flush_forever(), name="proxy-dispatch-flush")

    def wake(self) -> None:
        """Look at the outbox now (a resolution was stored, a retry was asked for)."""
        self._wakeup.set()

    async def stop(self) -> None:
        """Stop claiming; let attempts in flight finish (for at most ``stop_timeout``) and
        store their outcomes. Whatever is cut short stays pending and is sent after a restart."""
        timeout = self.stop_timeout
        if self._main is not None:
            await cancel_and_wait(self._main)
            self._main = None
        if self._tasks:
            _, late = await asyncio.wait(list(self._tasks), timeout=timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self._flusher is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drain_outcomes(), timeout)
            await cancel_and_wait(self._flusher)
            self._flusher = None
        await self.sender.aclose()

    def _now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.wall(), dt.UTC)

    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            claimed, more = 0, False
            try:
                claimed, more = await self._claim()
                await self._update_backlog()
            except StorageError as exc:
                self.metrics.db_errors.inc()
                log.error("dispatch_claim_failed", error=str(exc))
            except Exception:  # the dispatcher must outlive any bug
                log.exception("dispatch_round_failed")
            if more:
                continue  # a full batch, and slots left: more may be due right now
            wait = self.poll
            if not claimed and not self._saturated():
                with contextlib.suppress(StorageError):
                    due = await self.store.next_due_at()
                    if due is not None:
                        wait = min(wait, max(0.0, (due - self._now()).total_seconds()))
            # Woken early by a stored resolution, a retry request or a freed slot.
            await self._wait(max(wait, 0.005))

    def _saturated(self) -> frozenset[int]:
        """Targets with ``per_target`` attempts in flight (their due rows wait for a slot)."""
        return frozenset(t for t, n in self._per_target.items() if n >= self.per_target)

    async def _wait(self, seconds: float) -> None:
        # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that arrives as the
        # event is set, and stop() then waited for ever (seen once the writer woke the
        # dispatcher from the chronon loop's thread: a wake-up at any moment).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wakeup.wait()

    async def _claim(self) -> tuple[int, bool]:
        """Start attempts for due rows; ``(started, more)``: ``more`` when the batch was full
        and slots are left (look again at once)."""
        capacity = self.concurrency - len(self.inflight)
        if capacity <= 0:
            return 0, False  # a freed slot wakes us
        limit = min(self.batch, capacity)
        # Under the lock that outcomes are stored under: a row whose outcome is committed and
        # leaves ``inflight`` while this query runs would otherwise be read as still pending
        # and sent twice.
        async with self._settle_lock:
            due = await self.store.due_deliveries(
                self._now(), limit=limit, skip=frozenset(self.inflight),
                skip_targets=self._saturated())
        started = 0
        for d in due:
            if d.id in self.inflight or self._per_target.get(d.target_id, 0) >= self.per_target:
                continue  # that target is busy: its next rows wait for a free slot
            self.inflight.add(d.id)
            self._per_target[d.target_id] = self._per_target.get(d.target_id, 0) + 1
            task = asyncio.create_task(self._attempt(d), name=f"deliver-{d.id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started += 1
        return started, len(due) == self.batch and len(self.inflight) < self.concurrency

    async def _attempt(self, d: DueDelivery) -> None:
        try:
            now = self._now()
            if d.target_disabled is not None:
                outcome = AttemptOutcome(
                    d.id, d.target_id, now, "failed", now,
                    error=f"{TARGET_DISABLED_ERROR}{d.target_disabled}", attempted=False)
            else:
                result = await self._send(d)
                outcome = decide(d, result, self._now(), self.policy, self.rng)
        except Exception as exc:  # a bug in a sender must not lose the row: retry it later
            log.exception("delivery_attempt_failed", delivery=d.id)
            now = self._now()
            outcome = decide(d, SendResult(False, error=f"internal error: {exc!r}"[:500]), now,
                             self.policy, self.rng)
        finally:
            self._per_target[d.target_id] -= 1
            if not self._per_target[d.target_id]:
                del self._per_target[d.target_id]
            self._wakeup.set()  # a slot is free: its target's next due row may go
        self._outcomes.put_nowait((d, outcome))

    async def _send(self, d: DueDelivery) -> SendResult:
        body = d.payload.encode("utf-8")
        if d.kind == "webhook":
            headers = webhook_headers(d.secrets, d.msg_id, int(self.wall()), body)
            return await self.sender.webhook(d.url, headers, body)
        title, text = render_text(Notification.model_validate_json(body))
        return await self.sender.apprise(d.url, title, text)

    async def _flush_forever(self) -> None:
        while True:
            first = await self._outcomes.get()
            batch = [first]
            while not self._outcomes.empty():
                batch.append(self._outcomes.get_nowait())
            await self._store_outcomes(batch)

    async def _drain_outcomes(self) -> None:
        while self._tasks or not self._outcomes.empty():
            if self._outcomes.empty():
                await asyncio.sleep(0.01)
                continue
            batch = []
            while not self._outcomes.empty():
                batch.append(self._outcomes.get_nowait())
            await self._store_outcomes(batch)

    async def _store_outcomes(self, batch: list[tuple[DueDelivery, AttemptOutcome]]) -> None:
        """Store outcomes; until stored, their rows stay in flight (never sent twice)."""
        pause = 0.05
        while True:
            try:
                async with self._settle_lock:
                    await self.store.record_attempts([o for _, o in batch])
                    for d, _ in batch:
                        self.inflight.discard(d.id)
                break
            except StorageError as exc:
                self.metrics.db_errors.inc()
                log.error("delivery_outcomes_not_stored", error=str(exc), rows=len(batch))
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
        m = self.metrics
        for d, o in batch:
            label = _outcome_label(o)
            m.deliveries.labels(outcome=label).inc()
            if o.state == "delivered":
                self.sent += 1
                m.delivery_latency.observe(max(0.0, (o.at - d.resolved_at).total_seconds()))
            if label != "delivered":
                log.info("delivery_not_delivered", delivery=d.id, target=d.target_id,
                         outcome=label, attempts=d.attempts + int(o.attempted),
                         error=o.error, next_attempt_at=o.next_attempt_at.isoformat())
        if any(o.state == "pending" for _, o in batch):
            self.wake()  # a retry may be due before the next poll

    async def _update_backlog(self) -> None:
        now = time.monotonic()
        if now - self._backlog_at < 1.0:
            return
        self._backlog_at = now
        self.metrics.outbox_backlog.set(await self.store.outbox_backlog())
