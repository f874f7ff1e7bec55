"""Persisting what the loop decided: small frozen steps, written in order by one writer task.

The chronon loop and the probe tasks mutate the engine and the evaluator
synchronously on the event loop and describe the consequences as
:data:`Step` values (a CEI opened, an EI revealed, a probe with its captures
…). One :class:`Writer` task applies them to the store strictly in the order
they were decided, so a capture never refers to an EI row not yet written, and
the database always holds a prefix of the decisions (what a crash keeps).

It does not decide anything and does not touch the engine; a step whose CEI or
profile vanished meanwhile (the profile was deleted) is skipped, not an error.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from proxy.aio import cancel_and_wait
from proxy.errors import ConflictError, NotFoundError, ProxyError, StorageError
from proxy.service.metrics import ServiceMetrics
from proxy.store import (
    CaptureInput,
    CeiState,
    CeiStateChange,
    FeedUpdate,
    Lease,
    NewEi,
    NewEntry,
    ProbeInput,
    ProbeItem,
    ProbeRecord,
    Store,
    fence_writes,
)

log = structlog.get_logger("proxy.service")


@dataclass(frozen=True, slots=True)
class AddCei:
    """A CEI released at ``release`` with its first EIs (ordinals 0..)."""

    cei_id: str
    profile_id: int
    rule_id: int | None
    release: int
    eis: tuple[NewEi, ...]
    sealed: bool
    fired: bool = False  # a watch rule's CEI opens fired; a trigger rule's when its query EIs join


@dataclass(frozen=True, slots=True)
class AddEi:
    """An EI joined an open CEI; ``seal``: it was the last one."""

    cei_id: str
    ei: NewEi
    seal: bool


@dataclass(frozen=True, slots=True)
class Seal:
    """No more EIs will join the CEI."""

    cei_id: str


@dataclass(frozen=True, slots=True)
class Captured:
    """EI ``ordinal`` of ``cei_id`` captured at ``chronon`` by a probe recorded earlier."""

    cei_id: str
    ordinal: int
    chronon: int


@dataclass(frozen=True, slots=True)
class Resolved:
    """The CEI resolved to ``state`` at ``chronon``."""

    cei_id: str
    state: CeiState
    chronon: int


@dataclass(frozen=True, slots=True)
class ProbeWrite:
    """One finished probe: its row, new entries, captures and CEI resolutions, in ONE transaction."""

    probe: ProbeInput
    entries: tuple[NewEntry, ...]
    captures: tuple[Captured, ...]
    resolved: tuple[Resolved, ...]
    feed_update: FeedUpdate
    done: Callable[[ProbeRecord | None], None] | None = None


@dataclass(frozen=True, slots=True)
class RuleStates:
    """The evaluator's runtime state of some rules (JSON), by store rule id."""

    states: tuple[tuple[int, Any], ...]


@dataclass(frozen=True, slots=True)
class ChrononRow:
    """One chronon's budget figures."""

    chronon: int
    started_at: dt.datetime
    budget: int
    used: int
    captured: int
    missed: int
    jitter: float


@dataclass(frozen=True, slots=True)
class GrowCeis:
    """The :class:`AddEi` and :class:`Seal` steps of a round, written in one transaction."""

    steps: tuple[AddEi | Seal, ...]


@dataclass(frozen=True, slots=True)
class OpenCeis:
    """Consecutive :class:`AddCei` steps, written in one transaction."""

    ceis: tuple[AddCei, ...]


Step = AddCei | AddEi | Seal | Captured | Resolved | ProbeWrite | RuleStates | ChrononRow


@dataclass
class Writer:
    """Applies steps to the store in submission order (one task); counts database errors.

    A step that fails with :class:`StorageError` is retried ``retries`` times
    with a short pause, then dropped with an error log line (the loop must go on
    while the database is briefly away; ``proxy_db_errors`` tells).

    ``guard``, when given, is asked before every round: while it says no (the
    loop's lease was not renewed in time) the round is dropped, not written.
    ``fence``: the lease the writer's transactions are conditional on (a write
    after a takeover fails with :class:`~proxy.errors.FencedError`, counted in
    ``proxy_writes_refused``).
    """

    store: Store
    metrics: ServiceMetrics
    retries: int = 3
    max_round: int = 1000  # batches per round at most
    stop_timeout: float = 30.0
    guard: Callable[[], bool] | None = None
    # (cei id) -> ordinal -> store EI id, for CEIs whose EIs may still be captured.
    ei_ids: dict[str, dict[int, int]] = field(default_factory=dict)
    #: Called after a round that wrote CEI resolutions (and so, maybe, outbox rows): wakes
    #: the dispatcher and the event streams. Must not block.
    on_resolved: Callable[[], None] | None = None
    #: The loop's lease: every transaction of the writer's task checks it is still current
    #: (issue 21: a deposed leader's late writes are refused by the database itself).
    fence: Lease | None = None
    _queue: asyncio.Queue[Sequence[Step]] = field(default_factory=asyncio.Queue)
    _task: asyncio.Task[None] | None = None
    written: int = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="proxy-writer")

    def submit(self, steps: Sequence[Step]) -> None:
        if steps:
            self._queue.put_nowait(steps)

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    async def flush(self) -> None:
        """Wait until everything submitted so far is written."""
        await self._queue.join()

    async def stop(self) -> None:
        """Write what is queued (for at most ``stop_timeout`` seconds), then end the task.

        What is still queued after that is lost, as in a crash: a restart decides it again.
        """
        if self._task is None:
            return
        try:
            await asyncio.wait_for(self.flush(), self.stop_timeout)
        except TimeoutError:
            log.error("writer_stopped_with_backlog", batches=self.backlog)
        await cancel_and_wait(self._task)
        self._task = None

    async def abort(self) -> None:
        """Stop at once and drop what is queued: this process lost the loop's lease, and a
        stale leader's decisions must not reach the database (the new leader decides again)."""
        dropped = 0
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
            dropped += 1
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        if dropped:
            log.warning("writer_aborted", batches=dropped)

    async def _run(self) -> None:
        fence = self.fence
        if fence is not None and fence.holder is not None:
            fence_writes(fence.name, fence.holder, fence.epoch)
        while True:
            batches = [await self._queue.get()]
            # Everything queued meanwhile joins this round: consecutive CEI openings share a
            # transaction, and rule states are written once per round (the latest wins).
            while len(batches) < self.max_round and not self._queue.empty():
                batches.append(self._queue.get_nowait())
            steps = [step for batch in batches for step in batch]
            try:
                if self.guard is not None and not self.guard():
                    log.error("writes_dropped_without_lease", batches=len(batches))
                else:
                    await self._round(steps)
            except Exception:  # the writer must outlive any bug: log it and go on
                log.exception("writer_round_failed")
            finally:
                if self.on_resolved is not None and any(_resolves(s) for s in steps):
                    self.on_resolved()
                for _ in batches:
                    self._queue.task_done()

    async def _round(self, steps: list[Step]) -> None:
        """Write one round. CEI openings first (one transaction), then EI additions and seals
        (one transaction): they depend only on their CEI's row, and everything else may
        depend on them (captures name EI rows). Then the rest in order, consecutive probes
        sharing a transaction, and the rule states last (the latest snapshot wins)."""
        opened = tuple(s for s in steps if isinstance(s, AddCei))
        if opened:
            await self._retrying(OpenCeis(opened))
        grown = tuple(s for s in steps if isinstance(s, AddEi | Seal))
        if grown:
            await self._retrying(GrowCeis(grown))
        steps = [s for s in steps if not isinstance(s, AddCei | AddEi | Seal)]
        states: dict[int, Any] = {}
        i = 0
        while i < len(steps):
            step = steps[i]
            if isinstance(step, ProbeWrite):
                j = i
                while j < len(steps) and isinstance(steps[j], ProbeWrite | RuleStates):
                    j += 1
                group = [s for s in steps[i:j] if isinstance(s, ProbeWrite)]
                for s in steps[i:j]:
                    if isinstance(s, RuleStates):
                        states.update(s.states)
                await self._probes(group)
                i = j
                continue
            if isinstance(step, RuleStates):
                states.update(step.states)
            else:
                await self._retrying(step)
            i += 1
        if states:
            await self._retrying(RuleStates(tuple(states.items())))

    async def _retrying(self, step: Step | OpenCeis | GrowCeis) -> None:
        for attempt in range(self.retries + 1):
            try:
                await self._write(step)
                self.written += 1
                return  # a ProbeWrite's done() ran inside _probe
            except NotFoundError as exc:
                # The profile (and with it the CEI) was deleted while this step waited.
                log.debug("persist_skipped", step=type(step).__name__, reason=str(exc))
                break
            except StorageError as exc:
                self.metrics.db_errors.inc()
                if attempt == self.retries:
                    log.error("persist_failed", step=type(step).__name__, error=str(exc))
                    break
                await asyncio.sleep(0.05 * 2**attempt)
            except ProxyError as exc:
                # A conflict (e.g. a CEI id written before a crash lost its rule's state): the
                # decision stands in memory; the database keeps what it has.
                self.metrics.writes_refused.inc()
                log.error("persist_refused", step=type(step).__name__, error=str(exc))
                break
        if isinstance(step, ProbeWrite) and step.done is not None:
            step.done(None)

    async def _write(self, step: Step | OpenCeis | GrowCeis) -> None:
        store = self.store
        if isinstance(step, ProbeWrite):
            await self._probe(step)
        elif isinstance(step, GrowCeis):
            await self._grow(step)
        elif isinstance(step, OpenCeis):
            try:
                ids = await store.add_ceis([
                    (c.cei_id, c.profile_id, c.rule_id, c.release, c.sealed, c.eis) for c in step.ceis],
                    fired=[c.cei_id for c in step.ceis if c.fired])
            except ConflictError:
                # One refused CEI (its id written before a crash) must not lose the others.
                for c in step.ceis:
                    await self._retrying(c)
                return
            self.ei_ids.update(ids)
        elif isinstance(step, AddCei):
            cei = await store.add_cei(
                step.cei_id, step.profile_id, step.release, step.eis,
                rule_id=step.rule_id, sealed=step.sealed, fired=step.fired,
            )
            self.ei_ids[cei.id] = {ei.ordinal: ei.id for ei in cei.eis}
        elif isinstance(step, AddEi):
            ei = await store.add_ei(step.cei_id, step.ei)
            self.ei_ids.setdefault(step.cei_id, {})[ei.ordinal] = ei.id
            if step.seal:
                await store.seal_cei(step.cei_id)
        elif isinstance(step, Seal):
            await store.seal_cei(step.cei_id)
        elif isinstance(step, Captured):
            ei_id = self.ei_ids.get(step.cei_id, {}).get(step.ordinal)
            if ei_id is not None:
                await store.set_ei_captured(ei_id, step.chronon)
        elif isinstance(step, Resolved):
            await store.set_cei_state(step.cei_id, step.state, step.chronon)
            self.ei_ids.pop(step.cei_id, None)
        elif isinstance(step, RuleStates):
            await store.save_rule_states(step.states)
        else:
            await store.record_chronon_metrics(
                step.chronon, started_at=step.started_at, budget=step.budget,
                used=min(step.used, step.budget), captured_ceis=step.captured,
                missed_ceis=step.missed, tick_jitter_seconds=step.jitter,
            )

    async def _grow(self, step: GrowCeis) -> None:
        eis = [(s.cei_id, s.ei) for s in step.steps if isinstance(s, AddEi)]
        seal = [s.cei_id for s in step.steps if isinstance(s, Seal)]
        seal += [s.cei_id for s in step.steps if isinstance(s, AddEi) and s.seal]
        try:
            ids = await self.store.add_eis(eis, seal)
        except ConflictError:
            # One refused EI must not lose the others: one by one.
            for s in step.steps:
                await self._retrying(s)
            return
        for cei_id, by_ordinal in ids.items():
            self.ei_ids.setdefault(cei_id, {}).update(by_ordinal)

    async def _probes(self, group: list[ProbeWrite]) -> None:
        """Consecutive probes in one transaction; if any is refused, each on its own."""
        if len(group) == 1:
            await self._retrying(group[0])
            return
        for attempt in range(self.retries + 1):
            try:
                args = [self._probe_args(step) for step in group]
                records = await self.store.record_probes(args)
            except StorageError as exc:
                self.metrics.db_errors.inc()
                if attempt < self.retries:
                    await asyncio.sleep(0.05 * 2**attempt)
                    continue
                log.error("persist_failed", step="ProbeWrite", probes=len(group), error=str(exc))
            except ProxyError:
                pass  # e.g. a feed deleted meanwhile: store the others one by one
            else:
                self.written += len(group)
                for step, record in zip(group, records, strict=True):
                    self._after_probe(step, record)
                return
            break
        for step in group:
            await self._retrying(step)

    def _probe_args(self, step: ProbeWrite) -> ProbeItem:
        captures = []
        for c in step.captures:
            ei_id = self.ei_ids.get(c.cei_id, {}).get(c.ordinal)
            if ei_id is not None:
                captures.append(CaptureInput(ei_id, c.chronon))
        changes = [CeiStateChange(r.cei_id, r.state, r.chronon) for r in step.resolved]
        return step.probe, step.entries, captures, changes, step.feed_update

    def _after_probe(self, step: ProbeWrite, record: ProbeRecord) -> None:
        for r in step.resolved:
            self.ei_ids.pop(r.cei_id, None)
        if step.done is not None:
            step.done(record)

    async def _probe(self, step: ProbeWrite) -> None:
        record = await self.store.record_probe(*self._probe_args(step))
        self._after_probe(step, record)


def _resolves(step: Step) -> bool:
    return isinstance(step, Resolved) or (isinstance(step, ProbeWrite) and bool(step.resolved))
