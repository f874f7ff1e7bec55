"""Persisting what the loop decided: small frozen steps, written in order by one writer task.

The chronon loop and the probe tasks mutate the engine and the evaluator
synchronously on the event loop and describe the consequences as
:data:`Step` values (a CEI opened, an EI revealed, a probe with its captures
…). One :class:`Writer` task applies them to the store strictly in the order
they were decided, so a capture never refers to an EI row not yet written, and
the database always holds a prefix of the decisions: whole rounds, one
transaction each (what a crash keeps, docs/operations.md).

It does not decide anything and does not touch the engine; a step whose CEI or
profile vanished meanwhile (the profile was deleted) is skipped, not an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from proxy.aio import cancel_and_wait
from proxy.errors import NotFoundError, ProxyError, StorageError
from proxy.service.metrics import ServiceMetrics
from proxy.store import (
    CaptureInput,
    CeiState,
    CeiStateChange,
    FeedUpdate,
    Lease,
    MatchedRecord,
    NewEi,
    NewEntry,
    ProbeInput,
    ProbeItem,
    ProbeRecord,
    Store,
    fence_writes,
)

log = structlog.get_logger("proxy.service")

#: The ``service_state`` key of the token of the writer's last committed round.
ROUND_KEY = "writer_round"
#: The fewest steps a round sized by ``Writer.round_seconds`` takes (and the fewest whose time
#: teaches the rate): below it a round's own costs (the fence, the token, the commit) dominate.
MIN_ROUND_STEPS = 50


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
    matched: tuple[MatchedRecord, ...] = ()  # the entries that made it fire (issue 43)


@dataclass(frozen=True, slots=True)
class AddEi:
    """An EI joined an open CEI; ``seal``: it was the last one."""

    cei_id: str
    ei: NewEi
    seal: bool
    matched: tuple[MatchedRecord, ...] = ()  # entries that made the CEI fire, told with this EI


@dataclass(frozen=True, slots=True)
class Seal:
    """No more EIs will join the CEI; ``fired``: a single-feed alert fired by this seal."""

    cei_id: str
    fired: bool = False
    matched: tuple[MatchedRecord, ...] = ()  # an alert's matching entries


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
    feed_update: FeedUpdate | None  # None: a pushed document (issue 44) leaves the feed's health alone
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


@dataclass(slots=True)
class _Batch:
    """Steps submitted together, and when (monotonic seconds): the writer's lag is the oldest's age.
    ``size``: an estimate of the bytes they hold (:func:`batch_bytes`)."""

    steps: Sequence[Step]
    at: float
    size: int


# What a queued step holds in memory, in bytes: measured with tracemalloc on CPython 3.11
# (a Resolved ~155, an AddCei with two EIs ~545, a probe's row ~320) and rounded up. Text
# (entries' titles, links, summaries) counts one byte a character on top. Rule states are
# JSON of any shape: a flat estimate, as measuring each would cost more than writing it.
_BATCH_BYTES = 100
_STEP_BYTES = 160
_EI_BYTES = 170
_ENTRY_BYTES = 250
_RULE_STATE_BYTES = 300
# A matched entry told with a step (issue 43): a small record and its title and link, estimated.
_MATCHED_BYTES = 400


def _step_bytes(step: Step) -> int:
    if isinstance(step, ProbeWrite):
        text = sum(len(e.identity) + len(e.title or "") + len(e.link or "") + len(e.summary or "")
                   for e in step.entries)
        return (2 * _STEP_BYTES + _ENTRY_BYTES * len(step.entries) + text
                + _STEP_BYTES * (len(step.captures) + len(step.resolved)))
    if isinstance(step, AddCei):
        return _STEP_BYTES + _EI_BYTES * len(step.eis) + _MATCHED_BYTES * len(step.matched)
    if isinstance(step, AddEi):
        return _STEP_BYTES + _EI_BYTES + _MATCHED_BYTES * len(step.matched)
    if isinstance(step, Seal):
        return _STEP_BYTES + _MATCHED_BYTES * len(step.matched)
    if isinstance(step, RuleStates):
        return _STEP_BYTES + _RULE_STATE_BYTES * len(step.states)
    return _STEP_BYTES  # Captured, Resolved, ChrononRow: a few small fields


def batch_bytes(steps: Sequence[Step]) -> int:
    """An estimate of the memory a batch of steps holds while it waits for the database:
    cheap (no deep traversal), within a small factor of what tracemalloc measures."""
    return _BATCH_BYTES + sum(_step_bytes(step) for step in steps)


Unit = tuple[Step | OpenCeis | GrowCeis, ...]


class _UnitFailed(Exception):
    """A unit of a round failed: which one, and why (the round's transaction is rolled back)."""

    def __init__(self, index: int, error: ProxyError) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error


@dataclass
class _Round:
    """What one round's writes change outside the database, applied only once it commits."""

    ei_ids: dict[str, dict[int, int]] = field(default_factory=dict)
    forget: list[str] = field(default_factory=list)
    done: list[tuple[Callable[[ProbeRecord | None], None], ProbeRecord | None]] = field(
        default_factory=list)


@dataclass
class Writer:
    """Applies steps to the store in submission order (one task), ONE transaction per round.

    A round is every batch queued meanwhile (at most ``max_round``), written by
    :meth:`Store.unit`: a crash keeps a prefix of whole rounds, so a rule's state
    is never ahead of the CEIs it opened, and a probe's capture never lands
    without its probe. Batches leave the queue only once their round commits.

    While the database is away (a :class:`StorageError` it calls unavailable, or
    any error while it does not answer a ping) the round is retried, with a
    back-off up to ``retry_max_seconds``, until it commits: never dropped.
    Meanwhile :meth:`submit` keeps queueing; :attr:`full` says when the queue
    holds ``max_bytes`` (an estimate, :func:`batch_bytes`) or ``max_batches``,
    whichever comes first: the loop then decides nothing more until it is back
    under both (docs/operations.md, "Past the bound").

    A unit the database refuses while it answers (a conflict, a value it cannot
    store) is taken out of the round, counted in ``proxy_writes_refused`` and
    logged; the rest of the round is written. A refused probe still releases
    its feed (``done(None)``).

    ``guard``, when given, is asked before every round: while it says no (the
    loop's lease was not renewed in time) the writer waits; the lease is renewed
    (then it writes) or the process steps down and :meth:`abort` drops the queue.
    Dropping one round and writing the next would leave the database holding
    something other than a prefix of the decisions.
    ``fence``: the lease the writer's transactions are conditional on (a write
    after a takeover fails with :class:`~proxy.errors.FencedError`, counted in
    ``proxy_writes_refused``).
    ``fault``, tests only, is called at named points of a round (it may kill
    the process: the crash tests' fault injection).
    """

    store: Store
    metrics: ServiceMetrics
    max_round: int = 1000  # batches per round at most
    max_round_steps: int = 2000  # and steps (a round grows past it by its last batch only)
    #: A round's target length in seconds, or ``None`` (bounded by the two limits above alone).
    #: SQLite has one write lock, held from a round's first write to its commit: every other
    #: writer (the lease's renewal, a feed registered through the API) waits for it, and gives
    #: up after SQLite's 5 s busy timeout. After a restart of 100,000 profiles a round of
    #: 1,040 first probes (20 new entries each) held it 6.4 s and the process lost its lease.
    #: So on SQLite the round takes as many steps as the last rounds wrote in this time.
    round_seconds: float | None = None
    max_batches: int = 20_000
    max_bytes: int = 64 * 2**20
    retry_max_seconds: float = 1.0
    guard: Callable[[], bool] | None = None
    fault: Callable[[str], None] | None = None
    #: Held while a round's transaction is open; the service's profile and feed changes hold
    #: it too, so their transactions and a round's never wait on each other's row locks (a
    #: PostgreSQL deadlock, seen deleting a profile while its CEIs were being resolved).
    lock: asyncio.Lock | None = None
    # (cei id) -> ordinal -> store EI id, for CEIs whose EIs may still be captured.
    ei_ids: dict[str, dict[int, int]] = field(default_factory=dict)
    #: Called after a round that wrote CEI resolutions (and so, maybe, outbox rows): wakes
    #: the dispatcher and the event streams. Must not block.
    on_resolved: Callable[[], None] | None = None
    #: The loop's lease: every transaction of the writer's task checks it is still current
    #: (issue 21: a deposed leader's late writes are refused by the database itself).
    fence: Lease | None = None
    written: int = 0
    #: Monotonic time the database first failed the current round (None: writing fine).
    failing_since: float | None = None
    _step_rate: float | None = None  # steps per second the last rounds wrote (round_seconds)
    _queue: deque[_Batch] = field(default_factory=deque)
    _bytes: int = 0  # the queued batches' sizes (batch_bytes), summed
    _task: asyncio.Task[None] | None = None
    _submitted: int = 0
    _finished: int = 0
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _progress: asyncio.Event = field(default_factory=asyncio.Event)
    _stop_now: asyncio.Event = field(default_factory=asyncio.Event)
    # feed id -> identities of entries in queued probes (see :meth:`unwritten`)
    _unwritten: dict[int, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.metrics.write_backlog.set_function(lambda: len(self._queue))
        self.metrics.write_lag.set_function(self.lag)
        self.metrics.write_backlog_bytes.set_function(lambda: self._bytes)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="proxy-writer")

    def submit(self, steps: Sequence[Step]) -> None:
        if not steps:
            return
        size = batch_bytes(steps)
        self._queue.append(_Batch(steps, time.monotonic(), size))
        self._bytes += size
        self._submitted += 1
        for step in steps:
            if isinstance(step, ProbeWrite) and step.entries:
                known = self._unwritten.setdefault(step.probe.feed_id, {})
                for entry in step.entries:
                    known[entry.identity] = known.get(entry.identity, 0) + 1
        self._wake.set()

    @property
    def backlog(self) -> int:
        """Batches submitted and not yet written."""
        return len(self._queue)

    @property
    def backlog_bytes(self) -> int:
        """An estimate of the memory the unwritten batches hold (:func:`batch_bytes`)."""
        return self._bytes

    @property
    def full(self) -> bool:
        """``max_bytes`` or ``max_batches`` wait, whichever first: the loop should decide
        nothing more until the database takes some (docs/operations.md)."""
        return len(self._queue) >= self.max_batches or self._bytes >= self.max_bytes

    def lag(self) -> float:
        """Seconds the oldest unwritten batch has waited (0 when none). Safe from any thread
        (``/readyz`` and metrics scrapes read it while the writer's thread empties the queue)."""
        try:
            return time.monotonic() - self._queue[0].at
        except IndexError:
            return 0.0

    def unwritten(self, feed_id: int) -> set[str]:
        """Identities of ``feed_id``'s entries in probes not yet written: new to the database,
        yet not new any more (a second probe of the feed must not find them again)."""
        return set(self._unwritten.get(feed_id, ()))

    async def flush(self) -> None:
        """Wait until everything submitted so far is written."""
        target = self._submitted
        while self._finished < target:
            self._progress.clear()
            await self._progress.wait()

    async def stop(self, deadline: float = 30.0) -> bool:
        """Write what is queued (for at most ``deadline`` seconds, or until :meth:`stop_now`),
        then end the task; ``True`` if nothing was left. What is still queued after that
        is lost, as in a crash: a restart decides it again."""
        if self._task is None:
            return not self._queue
        flushing = asyncio.ensure_future(self.flush())
        now = asyncio.ensure_future(self._stop_now.wait())
        try:
            await asyncio.wait({flushing, now}, timeout=deadline,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in (flushing, now):
                fut.cancel()
            flushed, _ = await asyncio.gather(flushing, now, return_exceptions=True)
        if isinstance(flushed, Exception):  # e.g. its events bound to another thread's loop
            log.error("writer_drain_failed", error=repr(flushed))
        left = len(self._queue)
        if left:
            log.error("writer_stopped_with_backlog", batches=left,
                      oldest_seconds=round(self.lag(), 3))
        await cancel_and_wait(self._task)
        self._task = None
        return not left

    def stop_now(self) -> None:
        """End a :meth:`stop` at once (a second SIGTERM): what is queued is lost."""
        self._stop_now.set()

    async def abort(self) -> None:
        """Stop at once and drop what is queued: this process lost the loop's lease, and a
        stale leader's decisions must not reach the database (the new leader decides again)."""
        dropped = len(self._queue)
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        self._forget(dropped)
        if dropped:
            log.warning("writer_aborted", batches=dropped)

    def _forget(self, n: int) -> list[_Batch]:
        """Take the ``n`` oldest batches off the queue (written, or dropped)."""
        batches = [self._queue.popleft() for _ in range(min(n, len(self._queue)))]
        for batch in batches:
            self._bytes -= batch.size
            for step in batch.steps:
                if isinstance(step, ProbeWrite) and step.entries:
                    known = self._unwritten.get(step.probe.feed_id)
                    if known is None:
                        continue
                    for entry in step.entries:
                        left = known.get(entry.identity, 0) - 1
                        if left > 0:
                            known[entry.identity] = left
                        else:
                            known.pop(entry.identity, None)
                    if not known:
                        del self._unwritten[step.probe.feed_id]
        self._finished += len(batches)
        self._progress.set()
        return batches

    async def _run(self) -> None:
        fence = self.fence
        if fence is not None and fence.holder is not None:
            fence_writes(fence.name, fence.holder, fence.epoch)
        while True:
            while not self._queue:
                self._wake.clear()
                await self._wake.wait()
            # A round is one transaction: bounded in batches and in steps, so it never holds
            # SQLite's write lock long enough to time the API's own writes out.
            steps: list[Step] = []
            n = 0
            limit = self._round_steps()
            while n < min(len(self._queue), self.max_round) and len(steps) < limit:
                steps.extend(self._queue[n].steps)
                n += 1
            if self.guard is not None and not self.guard():
                # Not a drop: the database must keep holding a prefix of the decisions. Either
                # the lease is renewed (then write) or this process steps down (abort()).
                log.warning("writes_wait_for_lease", batches=len(self._queue))
                while not self.guard():  # noqa: ASYNC110 -- a clock check: nothing to await
                    await asyncio.sleep(0.05)
            try:
                await self._commit(steps)
            except Exception:  # a bug must not stop the writer: log it, count it, go on
                self.metrics.writes_refused.inc()
                log.exception("writer_round_failed", batches=n)
                for step in steps:
                    if isinstance(step, ProbeWrite) and step.done is not None:
                        step.done(None)
            self._forget(n)
            if self.on_resolved is not None and any(_resolves(s) for s in steps):
                self.on_resolved()

    # ------------------------------------------------------------------ one round

    def _units(self, steps: list[Step]) -> list[Unit]:
        """The round's writes in order. CEI openings first (they depend on nothing written in
        the round), then EI additions and seals (they depend only on their CEI's row), then
        the rest in order (captures name EI rows), consecutive probes together, and the rule
        states last (the latest snapshot of each rule wins)."""
        units: list[Unit] = []
        opened = tuple(s for s in steps if isinstance(s, AddCei))
        if opened:
            units.append((OpenCeis(opened),))
        grown = tuple(s for s in steps if isinstance(s, AddEi | Seal))
        if grown:
            units.append((GrowCeis(grown),))
        states: dict[int, Any] = {}
        run: list[Step] = []  # consecutive steps of one kind, written together
        for step in steps:
            if isinstance(step, AddCei | AddEi | Seal):
                continue
            if isinstance(step, RuleStates):
                states.update(step.states)
                continue
            if run and type(run[0]) is not type(step):
                units.append(tuple(run))
                run = []
            if isinstance(step, ProbeWrite | Resolved | Captured):
                # One statement per kind of row for the whole run: with 1,500 rules firing
                # every 5 s, one round trip per resolution was what the writer waited on.
                run.append(step)
            else:
                units.append((step,))
        if run:
            units.append(tuple(run))
        if states:
            units.append((RuleStates(tuple(states.items())),))
        return units

    async def _commit(self, steps: list[Step]) -> None:
        units = self._units(steps)
        refused: list[Unit] = []
        attempt = 0
        # A commit whose answer was lost with the connection may have committed: each attempt
        # stores a token in its transaction, and before writing the round again the writer
        # looks for it (writing it twice would refuse every CEI: "already exists").
        uncertain: tuple[str, _Round] | None = None
        while True:
            if uncertain is not None:
                token, attempted = uncertain
                try:
                    committed = await self.store.get_state(ROUND_KEY) == token
                except StorageError as away:
                    attempt = await self._outage(away, attempt)
                    continue
                uncertain = None
                if committed:
                    rnd = attempted
                    break
            rnd = _Round()
            token = uuid.uuid4().hex
            try:
                async with self._locked(), self.store.unit():
                    began = time.monotonic()
                    for k, unit in enumerate(units):
                        try:
                            await self._write_unit(unit, rnd)
                        except ProxyError as error:
                            raise _UnitFailed(k, error) from error
                        self._fault("writer.between_units")
                    await self.store.set_state(ROUND_KEY, token)
                    self._fault("writer.before_commit")
                self._learn_rate(len(steps), time.monotonic() - began)
            except _UnitFailed as failed:
                exc = failed.error
                if isinstance(exc, StorageError) and (exc.unavailable or not await self._reachable()):
                    attempt = await self._outage(exc, attempt)
                    continue
                unit = units.pop(failed.index)
                expanded = _expand(unit)
                if len(expanded) > 1:  # a group: find the refused step(s) one by one
                    units[failed.index:failed.index] = [(s,) for s in expanded]
                    continue
                refused.append(unit)
                if isinstance(exc, NotFoundError):
                    # The profile (and with it the CEI) was deleted while this step waited.
                    log.debug("persist_skipped", step=_name(unit), reason=str(exc))
                else:
                    self.metrics.writes_refused.inc()
                    log.error("persist_refused", step=_name(unit), error=str(exc))
                continue
            except StorageError as lost:  # the commit itself (or BEGIN, or the token) failed
                uncertain = (token, rnd)
                attempt = await self._outage(lost, attempt)
                continue
            break
        self._fault("writer.after_commit")
        if self.failing_since is not None:
            log.warning("database_back", seconds=round(time.monotonic() - self.failing_since, 3),
                        attempts=attempt, backlog=len(self._queue))
            self.failing_since = None
        self.written += sum(len(unit) for unit in units)
        for cei_id, by_ordinal in rnd.ei_ids.items():
            self.ei_ids.setdefault(cei_id, {}).update(by_ordinal)
        for cei_id in rnd.forget:
            self.ei_ids.pop(cei_id, None)
        for callback, record in rnd.done:
            callback(record)
        for unit in refused:
            for step in _expand(unit):
                if isinstance(step, ProbeWrite) and step.done is not None:
                    step.done(None)

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        if self.lock is None:
            yield
            return
        async with self.lock:
            yield

    async def _reachable(self) -> bool:
        try:
            await self.store.ping()
        except StorageError:
            return False
        return True

    def _round_steps(self) -> int:
        """How many steps the next round takes at most (``round_seconds``)."""
        if self.round_seconds is None or self._step_rate is None:
            return self.max_round_steps
        fit = int(self._step_rate * self.round_seconds)
        return max(MIN_ROUND_STEPS, min(self.max_round_steps, fit))

    def _learn_rate(self, steps: int, seconds: float) -> None:
        """A round of ``steps`` committed in ``seconds`` (from its lock to its commit)."""
        if self.round_seconds is None or steps < MIN_ROUND_STEPS:
            return  # a small round's fixed costs say little of the rate
        rate = steps / max(seconds, 1e-3)
        self._step_rate = rate if self._step_rate is None else (self._step_rate + rate) / 2

    async def _outage(self, exc: StorageError, attempt: int) -> int:
        """The database is away: count, log the first failure, back off; the round is retried."""
        self.metrics.db_errors.inc()
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            log.error("database_unavailable", error=str(exc), backlog=len(self._queue))
        await asyncio.sleep(min(self.retry_max_seconds, 0.05 * 2 ** min(attempt, 10)))
        return attempt + 1

    def _fault(self, point: str) -> None:
        if self.fault is not None:
            self.fault(point)

    def _ei_id(self, rnd: _Round, cei_id: str, ordinal: int) -> int | None:
        found = rnd.ei_ids.get(cei_id, {}).get(ordinal)
        return found if found is not None else self.ei_ids.get(cei_id, {}).get(ordinal)

    async def _write_unit(self, unit: Unit, rnd: _Round) -> None:
        if isinstance(unit[0], ProbeWrite):
            group = [s for s in unit if isinstance(s, ProbeWrite)]
            records = await self.store.record_probes([self._probe_args(s, rnd) for s in group])
            for probe, record in zip(group, records, strict=True):
                rnd.forget.extend(r.cei_id for r in probe.resolved)
                if probe.done is not None:
                    rnd.done.append((probe.done, record))
            return
        store = self.store
        if isinstance(unit[0], Resolved):
            resolved = [s for s in unit if isinstance(s, Resolved)]
            await store.resolve_ceis([CeiStateChange(s.cei_id, s.state, s.chronon) for s in resolved])
            rnd.forget.extend(s.cei_id for s in resolved)
            return
        if isinstance(unit[0], Captured) and len(unit) > 1:
            for step in unit:
                await self._write_unit((step,), rnd)
            return
        (step,) = unit
        if isinstance(step, GrowCeis):
            eis = [(s.cei_id, s.ei) for s in step.steps if isinstance(s, AddEi)]
            seal = [s.cei_id for s in step.steps if isinstance(s, Seal)]
            seal += [s.cei_id for s in step.steps if isinstance(s, AddEi) and s.seal]
            fired = [s.cei_id for s in step.steps if isinstance(s, Seal) and s.fired]
            matched: dict[str, list[MatchedRecord]] = {}
            for s in step.steps:
                if s.matched:
                    matched.setdefault(s.cei_id, []).extend(s.matched)
            for cei_id, by_ordinal in (
                await store.add_eis(eis, seal, fired=fired, matched=matched)
            ).items():
                rnd.ei_ids.setdefault(cei_id, {}).update(by_ordinal)
        elif isinstance(step, OpenCeis):
            rnd.ei_ids.update(await store.add_ceis([
                (c.cei_id, c.profile_id, c.rule_id, c.release, c.sealed, c.eis) for c in step.ceis],
                fired=[c.cei_id for c in step.ceis if c.fired],
                matched={c.cei_id: c.matched for c in step.ceis if c.matched}))
        elif isinstance(step, AddCei):
            cei = await store.add_cei(
                step.cei_id, step.profile_id, step.release, step.eis,
                rule_id=step.rule_id, sealed=step.sealed, fired=step.fired, matched=step.matched,
            )
            rnd.ei_ids[cei.id] = {ei.ordinal: ei.id for ei in cei.eis}
        elif isinstance(step, AddEi):
            ei = await store.add_ei(step.cei_id, step.ei, matched=step.matched)
            rnd.ei_ids.setdefault(step.cei_id, {})[ei.ordinal] = ei.id
            if step.seal:
                await store.seal_cei(step.cei_id)
        elif isinstance(step, Seal):
            await store.seal_cei(step.cei_id, fired=step.fired, matched=step.matched)
        elif isinstance(step, Captured):
            # Captured outside a probe's own write: an EI revealed after a successful probe of
            # its feed within its window (the engine's history). That probe is in the database
            # by now (it was decided, so submitted, before): the capture names it.
            ei_id = self._ei_id(rnd, step.cei_id, step.ordinal)
            if ei_id is not None:
                await store.capture_by_probe_of(ei_id, step.chronon)
        elif isinstance(step, RuleStates):
            await store.save_rule_states(step.states)
        elif isinstance(step, ChrononRow):
            await store.record_chronon_metrics(
                step.chronon, started_at=step.started_at, budget=step.budget,
                used=min(step.used, step.budget), captured_ceis=step.captured,
                missed_ceis=step.missed, tick_jitter_seconds=step.jitter,
            )
        else:  # a lone ProbeWrite is a group of one, handled above
            raise TypeError(f"not a step: {step!r}")

    def _probe_args(self, step: ProbeWrite, rnd: _Round) -> ProbeItem:
        captures = []
        for c in step.captures:
            ei_id = self._ei_id(rnd, c.cei_id, c.ordinal)
            if ei_id is not None:
                captures.append(CaptureInput(ei_id, c.chronon))
        changes = [CeiStateChange(r.cei_id, r.state, r.chronon) for r in step.resolved]
        return step.probe, step.entries, captures, changes, step.feed_update


def _expand(unit: Unit) -> list[Step]:
    """A unit's steps, groups opened up (to find which one the database refuses)."""
    out: list[Step] = []
    for step in unit:
        if isinstance(step, OpenCeis):
            out.extend(step.ceis)
        elif isinstance(step, GrowCeis):
            out.extend(step.steps)
        else:
            out.append(step)
    return out


def _name(unit: Unit) -> str:
    return type(unit[0]).__name__


def _resolves(step: Step) -> bool:
    return isinstance(step, Resolved) or (isinstance(step, ProbeWrite) and bool(step.resolved))
