"""``proxy bench live``: the real service against the feed farm, beside the simulator and plain readers.

One run (:func:`run_benchmark`):

1. A workload from the simulator's generator in ``reveal=update`` mode
   (:func:`poisson_workload`, or :func:`trace_workload` over a busy,
   time-compressed window of a real publication trace).
2. The feed farm plays the workload's update times: update chronon ``u`` is
   published at service chronon ``u + phase`` (one trace unit = one chronon)
   and pings the service's ``/api/v1/feeds/{id}/ping`` for each publication
   ``ping_lag`` chronons later (optionally dropping or delaying a share more),
   so the service learns of updates only from pings.  Resource ``i`` is farm feed ``"i"``.
3. The service (uvicorn, REST, the configured database) gets the feeds and
   one ``watch`` rule per AuctionWatch profile over the REST API, then runs
   (``rule_kind="alert"``: one single-feed alert per profile instead, on a rank-1
   workload; :func:`rule_body`).
   Workload chronon 0 is service chronon ``c0`` (a few chronons after set-up):
   the farm's clock is anchored there.
4. After ``K`` chronons: ground-truth metrics from the farm's publication log
   and the service's database (:mod:`proxy.bench.metrics`), the simulator on
   the same CEIs with the same policy and budget, and the plain-reader
   baselines at the same total probes (:mod:`proxy.bench.baselines`).

Timing (defaults ``phase=-0.1``, ``ping_lag=0.2``): update ``u`` is published
just *before* chronon ``u`` starts, so every probe of chronon ``u`` sees it,
and its ping lands just *after* the tick of ``u``, so the service opens its EI
``[u, u+W]`` at ``u`` — the generator's EI exactly.  The service decided
chronon ``u`` before the ping, so the first decision that knows the EI is
``u+1``.  The paper's simulator reveals the EI at ``u``; the equivalent
workload for an online proxy fed by pings reveals it at ``u+1``
(:func:`lagged`) and holds each profile's last, never-completed CEI, which the
generator drops but the service cannot tell from the others
(:func:`tail_ceis`).  Both simulator numbers are reported
(:func:`live_equivalent`).  A positive ``phase`` (published inside chronon
``u``, no ping lag) makes probes of ``u`` miss the entry; the equivalent EI
then starts at ``u+1``.

Deliberately not here: markdown and plots (:mod:`proxy.bench.report`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proxy.bench.baselines import (
    READER_ORDERS,
    AdaptiveParams,
    CeisOf,
    match_probes,
    probes_to_reach,
)
from proxy.bench.metrics import (
    ProbeRec,
    Pub,
    budget_per_chronon,
    cei_outcome,
    completeness_curve,
    entry_outcome,
    quantiles,
)
from proxy.core.model import CEI, EI, Workload
from proxy.ports import free_port

if TYPE_CHECKING:
    from proxy.bench.workload_rules import RulePlan

PHASE = -0.1
"""When update ``u`` is published, in chronons from the start of chronon ``u`` (default)."""
PING_LAG = 0.2
"""How long (chronons) the farm holds each ping, so it lands after the tick of the update's chronon."""


class BenchError(ValueError):
    """A benchmark setting that cannot work; the message names it."""


@dataclass(frozen=True, slots=True)
class BenchWorkload:
    """A generated workload plus what the live run needs to rebuild it as feeds and rules."""

    name: str
    workload: Workload
    updates: tuple[tuple[int, ...], ...]
    watched: tuple[tuple[int, ...], ...]
    """Per profile with at least one CEI: its feeds, in EI order."""
    profile_names: tuple[str, ...]
    """The workload's profile name of each ``watched`` entry."""
    window: int
    description: str
    history: tuple[tuple[float, ...], ...] = ()
    """Per resource, the times (workload chronons, negative: before the run) of the entries its
    document already shows at the first fetch, oldest first; empty for generated workloads."""
    rules: RulePlan | None = None
    """A ``trigger`` or ``mixed`` workload's rules and keywords (:mod:`proxy.bench.workload_rules`);
    ``None``: every profile is posted as ``--rule-kind`` says (:func:`rule_body`)."""


@dataclass(frozen=True, slots=True)
class ReaderView:
    """What the plain readers poll: the watched feeds as ``0..n-1``, with their CEIs and updates."""

    feeds: tuple[int, ...]
    """The workload's resource of each reader feed."""
    index: dict[int, int]
    """Workload resource → reader feed."""
    ceis: tuple[CEI, ...]
    updates: list[list[int]]
    """Per reader feed, the chronons its documents show entries of: the run's updates and, where the
    workload has one, the history before it (the adaptive reader's first probe sees those, as the
    proxy's does)."""


def reader_view(bw: BenchWorkload) -> ReaderView:
    """The watched feeds, renumbered, and the workload's CEIs and updates on them."""
    feeds = tuple(sorted({r for w in bw.watched for r in w}))
    index = {r: i for i, r in enumerate(feeds)}
    ceis = tuple(CEI(c.id, c.profile, tuple(replace(e, resource=index[e.resource]) for e in c.eis))
                 for c in bw.workload.ceis)
    updates = [sorted({math.floor(x) for x in bw.history[r]} | set(bw.updates[r])) if bw.history
               else list(bw.updates[r]) for r in feeds]
    return ReaderView(feeds, index, ceis, updates)


@dataclass(frozen=True, slots=True)
class LiveConfig:
    """How the service runs: policy, budget, chronon length, database, ping faults."""

    policy: str = "mrsf-p"
    budget: int = 1
    chronon_seconds: float = 0.1
    database_url: str | None = None
    feed_window: int = 20
    ping_drop_rate: float = 0.0
    ping_delay: float = 0.0
    seed: int = 1
    lead_chronons: int = 10
    service: str = "process"
    """``process`` (``proxy serve`` in a child process) or ``inline`` (this event loop)."""
    phase: float = PHASE
    ping_lag: float = PING_LAG
    reader_orders: int = READER_ORDERS
    """Feed orders each plain reader's figures are the mean over (``proxy.bench.baselines``)."""
    rule_kind: str = "watch"
    """What each profile's rule is: ``watch`` (AuctionWatch) or ``alert`` (:func:`rule_body`)."""
    revisit_factor: float | None = None
    """The service's ``discovery_revisit_factor`` (issue 45's revisit bound); ``None``: its default."""
    co_update: bool = False
    """The service's ``discovery_coupdate`` (issue 45's co-update hints); off: its default."""
    publisher_hints: float | None = None
    """Issue 45's publisher hints: each RSS feed states one update per its true mean interval over the
    run times ``exp(σ · N(0, 1))`` (σ this, drawn per feed from ``seed``) in the syndication module,
    and the service takes them as priors (``discovery_publisher_hints``). ``None``: no hints, as in
    every real trace we have."""
    push_share: float = 0.0
    """Share of the feeds that push through a real WebSub hub (issue 44; :mod:`proxy.farm.hub`):
    they advertise it and publish to it ``ping_lag`` chronons after each publication, and the
    service (``PROXY_PUBLIC_URL`` set) subscribes. 0: no hub, WebSub off."""


# ---------------------------------------------------------------------- workloads


def poisson_workload(
    *, resources: int, profiles: int, chronons: int, lam: float, rank: int, window: int, seed: int,
    budget: int = 1, exact_rank: bool = False,
) -> BenchWorkload:
    """The paper's baseline-like workload (Table 1) with EIs revealed at their update."""
    import numpy as np

    from proxy.sim.generate import GenParams, Reveal, generate, poisson_updates

    params = GenParams(resources=resources, profiles=profiles, chronons=chronons, budget=budget,
                       lam=lam, rank=rank, window=window, reveal=Reveal.UPDATE, exact_rank=exact_rank)
    params.check()
    # generate() draws the updates first from the same seed: replay that draw to keep them.
    updates = poisson_updates(np.random.default_rng(seed), resources, chronons, lam)
    wl = generate(params, seed, updates)
    desc = (f"Poisson: {resources} feeds, lambda={lam:g} updates per feed per {chronons} chronons, "
            f"{profiles} AuctionWatch profiles of rank <= {rank}, window W={window}, seed {seed}")
    return _bench_workload("poisson", wl, updates, window, desc)


def stated_intervals(bw: BenchWorkload, length: float, sigma: float, seed: int) -> dict[str, float]:
    """Seconds between updates each feed states (``LiveConfig.publisher_hints``): its true mean over the run, noisy.

    A feed with no update in the run states half an update per run. Honest about the trace (its own
    rate, not its times) and no more: a real publisher's "hourly" is a round figure, hence ``sigma``.
    """
    import numpy as np

    if not (sigma >= 0 and math.isfinite(sigma)):
        raise BenchError(f"--publisher-hints must be a finite sigma >= 0, got {sigma}")
    k = bw.workload.chronons
    noise = np.random.default_rng(seed).standard_normal(len(bw.updates)).tolist()
    return {str(r): k * length / max(len(ups), 0.5) * math.exp(sigma * z)
            for r, (ups, z) in enumerate(zip(bw.updates, noise, strict=True))}


def busiest_window(path: Path, days: float) -> tuple[dt.datetime, dt.datetime, int]:
    """The ``days``-long window of the trace holding the most usable timestamps: (start, end, count)."""
    from proxy.sim.traces import DEFAULT_NOT_BEFORE, FAR_FUTURE, read_rows, swapped_hint

    stamps = [ts for _, ts in read_rows(path) if ts is not None and DEFAULT_NOT_BEFORE <= ts < FAR_FUTURE]
    if not stamps:
        raise BenchError(f"trace {path}: no usable timestamps (ISO 8601, RFC 822 or Unix epoch seconds, "
                         f"after {DEFAULT_NOT_BEFORE:%Y-%m-%d}){swapped_hint(path)}")
    stamps.sort()
    span = dt.timedelta(days=days)
    best, best_i, j = 0, 0, 0
    for i, s in enumerate(stamps):
        while j < len(stamps) and stamps[j] < s + span:
            j += 1
        if j - i > best:
            best, best_i = j - i, i
    start = stamps[best_i]
    return start, start + span, best


def trace_workload(
    path: Path, *, chronons: int, days: float, profiles: int, rank: int, window: int, seed: int,
    budget: int = 1, history: bool = False,
) -> BenchWorkload:
    """The busiest ``days`` of a real trace compressed onto ``chronons``; profiles on updated feeds.

    ``history``: each feed's first fetch shows its items before the window
    (:func:`trace_history`), for the proxy and the adaptive reader alike.
    Off by default: the window is the trace's *busiest*, so the history before
    it is systematically slower than the run (``docs/discovery.md``).
    """
    from proxy.sim.generate import GenParams, Reveal, generate
    from proxy.sim.traces import load_trace

    start, end, count = busiest_window(path, days)
    trace = load_trace(path, chronons, start=start, end=end)
    past = trace_history(path, trace.names, start, end, chronons) if history else ()
    updates = [list(u) for u in trace.updates]
    params = GenParams(resources=len(updates), profiles=profiles, chronons=chronons, budget=budget,
                       rank=rank, window=window, reveal=Reveal.UPDATE)
    wl = generate(params, seed, updates, updated_only=True)
    minutes = days * 24 * 60 / chronons
    desc = (f"real trace {path.name}: {len(updates)} feeds, busiest {days:g} days "
            f"({start:%Y-%m-%d} to {end:%Y-%m-%d}, {count} timestamps, "
            f"{sum(map(len, updates))} distinct feed-chronon updates), one chronon = {minutes:.0f} min "
            f"of trace; {profiles} AuctionWatch profiles of rank <= {rank} on updated feeds, "
            f"window W={window}, seed {seed}")
    if history:
        desc += "; first fetches show each feed's history before the window"
    return replace(_bench_workload("trace", wl, updates, window, desc), history=past)


def trace_history(
    path: Path, names: Sequence[str], start: dt.datetime, end: dt.datetime, chronons: int, keep: int = 20,
) -> tuple[tuple[float, ...], ...]:
    """What each feed's document shows before the window ``[start, end)``: its last ``keep`` items.

    In workload chronons (``[start, end)`` is ``[0, chronons)``, so these are
    negative), oldest first, per name of ``names``. A feed with no item before
    ``start`` shows an empty document: in a snapshot trace (the real one holds
    each feed's last N items) that is as often a busy feed whose older items
    fell out of the snapshot as a slow one, so nothing is claimed about it. A
    real feed's first fetch shows this history (its last N entries, dated);
    the proxy's update models and the adaptive reader both learn from it.
    """
    from proxy.sim.traces import DEFAULT_NOT_BEFORE, read_rows

    unit = (end - start).total_seconds() / chronons
    before: dict[str, list[float]] = {name: [] for name in names}
    for name, ts in read_rows(path):
        if ts is not None and DEFAULT_NOT_BEFORE <= ts < start and name in before:
            before[name].append((ts - start).total_seconds() / unit)
    return tuple(tuple(sorted(before[name])[-keep:]) for name in names)


def _bench_workload(
    name: str, wl: Workload, updates: Sequence[Sequence[int]], window: int, desc: str,
) -> BenchWorkload:
    watched: dict[str, tuple[int, ...]] = {}
    for cei in wl.ceis:
        watched.setdefault(cei.profile, tuple(ei.resource for ei in cei.eis))
    return BenchWorkload(name, wl, tuple(tuple(u) for u in updates),
                         tuple(watched.values()), tuple(watched), window, desc)


def lagged(wl: Workload, *, shift_start: bool = False) -> Workload:
    """The workload as an online proxy fed by pings can serve it: each EI known one chronon later.

    EI ``[u, f]`` is revealed at ``u+1``; with ``shift_start`` (the entry
    appears only during chronon ``u``, after its probes) it also becomes
    ``[u+1, f]``.  Values are kept within ``f`` and the last chronon.
    """
    k = wl.chronons
    ceis = []
    for c in wl.ceis:
        eis = []
        for e in c.eis:
            later = min(e.start + 1, e.finish, k - 1) if shift_start else e.start
            eis.append(EI(e.resource, later, e.finish, min(e.start + 1, k - 1)))
        ceis.append(CEI(c.id, c.profile, tuple(eis)))
    return replace(wl, ceis=tuple(ceis))


def tail_ceis(bw: BenchWorkload) -> tuple[CEI, ...]:
    """Each profile's last, never-completed CEI, as an online proxy holds it until the end.

    The generator drops a profile's CEI once some watched feed has no later
    update, but the service cannot know that: it opens the CEI at the first
    notification and may spend probes on it.  Each tail CEI gets a phantom EI
    revealed at the last chronon, so the engine keeps it unsealed all along,
    exactly as the service does.  Scores never count these CEIs.
    """
    from bisect import bisect_right

    if bw.rules is not None:  # trigger and mixed rules hold other CEIs (proxy.bench.workload_rules)
        return bw.rules.tail_ceis(bw)
    wl = bw.workload
    k, w = wl.chronons, bw.window
    last: dict[str, int] = {}
    for c in wl.ceis:
        last[c.profile] = max(last.get(c.profile, -1), max(e.start for e in c.eis))
    out = []
    for name, feeds in zip(bw.profile_names, bw.watched, strict=True):
        eis = []
        for r in feeds:
            ups = bw.updates[r]
            i = bisect_right(ups, last[name])
            if i < len(ups):
                eis.append(EI(r, ups[i], min(ups[i] + w, k - 1), ups[i]))
        if eis:
            eis.append(EI(feeds[0], k - 1, k - 1, k - 1))
            out.append(CEI(f"tail-{name}", name, tuple(eis)))
    return tuple(out)


def unclamped(bw: BenchWorkload) -> BenchWorkload:
    """``bw`` on a horizon of ``K + W`` chronons with every EI its full ``[u, u+W]``.

    The generator clips windows at the last chronon ``K-1``; the service
    does not know the run ends and keeps ``[u, u+W]``, so near the end the
    clipped deadlines would make the simulator rush where the service does
    not.  Simulate on this and keep only probes before ``K``.
    """
    wl, w = bw.workload, bw.window
    ceis = tuple(replace(c, eis=tuple(replace(e, finish=e.start + w) for e in c.eis)) for c in wl.ceis)
    return replace(bw, workload=replace(wl, chronons=wl.chronons + w, ceis=ceis))


def live_equivalent(bw: BenchWorkload, *, shift_start: bool = False) -> Workload:
    """What the live proxy faces: the CEIs plus the tail CEIs, every EI known one chronon later."""
    wl = bw.workload
    return lagged(replace(wl, ceis=wl.ceis + tail_ceis(bw)), shift_start=shift_start)


def service_labelled(
    eq: Workload, bw: BenchWorkload, rule_ids: Sequence[int], resources: Sequence[int],
) -> Workload:
    """``eq`` with the identifiers the service gave: resources, and CEI ids ``r{rule}:{seq}``.

    Policies break ties by resource number and CEI id; the generator's ids
    follow release order, which at C=1 is worth a few points on its own, so
    the simulator is compared on the service's ids.  A tail CEI gets the next
    sequence number of its rule, as in the service.
    """
    rule_of = dict(zip(bw.profile_names, rule_ids, strict=True))
    seq: dict[str, int] = {}
    ceis = []
    for c in sorted(eq.ceis, key=lambda c: c.id.startswith("tail-")):
        n = seq.get(c.profile, 0)
        seq[c.profile] = n + 1
        eis = tuple(replace(e, resource=resources[e.resource]) for e in c.eis)
        ceis.append(CEI(f"r{rule_of[c.profile]}:{n}", c.profile, eis))
    return replace(eq, ceis=tuple(ceis), resources=max(resources, default=-1) + 1)


# ---------------------------------------------------------------------- the live run


class AnchoredClock:
    """The farm's clock: 0 until :meth:`anchor` names the wall time of trace time 0, then seconds since.

    The farm starts trace time at its own start; the service's chronon origin
    is known only later, so the farm starts frozen at 0 and the benchmark
    anchors it on the service's clock (schedules hold no event at trace time 0).
    """

    def __init__(self) -> None:
        self._anchor: float | None = None

    def anchor(self, wall: float) -> None:
        self._anchor = wall

    def now(self) -> float:
        if self._anchor is None:
            return 0.0
        return max(0.0, time.time() - self._anchor)


@dataclass(frozen=True, slots=True)
class LiveRecords:
    """What one live run left behind, already in workload chronons."""

    pubs: tuple[Pub, ...]
    pub_entry_ids: tuple[str, ...]
    probes: tuple[ProbeRec, ...]
    stored_entries: frozenset[str]
    service_ceis: dict[str, int] = field(default_factory=dict)
    """The service's own CEI states: ``{"captured": …, "missed": …, "pending": …}``."""
    service_eis: tuple[tuple[int, int, int, int], ...] = ()
    rule_ids: tuple[int, ...] = ()
    """The service's rule id of each profile (``bw.watched`` order)."""
    resources: tuple[int, ...] = ()
    """The service's engine resource of each farm feed ``0..n-1``."""
    """``(profile index, rank position, resource, start)`` of every EI the service recorded."""
    pings: dict[str, int] = field(default_factory=dict)
    max_jitter_s: float = 0.0
    setup_s: float = 0.0
    max_busy: int = 0
    """Most feeds at once in flight or waiting for their probe to be written."""
    max_backlog: int = 0
    """Longest queue of the service's persistence writer."""
    pushes: tuple[ProbeRec, ...] = ()
    """The pushed documents the service settled (issue 44): observations no probe paid for."""
    pushed: tuple[int, ...] = ()
    """The workload resources whose farm feed pushes through the hub (``push_share``)."""
    subscribed_at: dict[int, float] = field(default_factory=dict)
    """Pushed resource → when its subscription was verified, in workload chronons."""



def within_text(window: int, chronon_seconds: float) -> str:
    """``window`` chronons as a whole-second rule duration; refuses lengths that do not divide."""
    seconds = window * chronon_seconds
    if abs(seconds - round(seconds)) > 1e-6 or round(seconds) < 1:
        raise BenchError(
            f"window {window} x chronon {chronon_seconds:g} s = {seconds:g} s: rule durations are whole "
            "seconds; pick a chronon length that makes it one (e.g. 0.1 or 0.2 s with W=10)")
    return f"{round(seconds)}s"


RULE_KINDS = ("watch", "alert", "trigger", "mixed")
"""The ``--rule-kind`` values (:func:`check_rule_kind`)."""


def check_rule_kind(kind: str, bw: BenchWorkload) -> None:
    """:class:`BenchError` unless ``kind`` can post ``bw``'s profiles as rules the scorer reads.

    An ``alert`` on update without condition has exactly one EI ``[u, u+W]`` per update
    of its feed: the rank-1 watch workload, scored the same way. So alerts need every
    profile to watch one feed. ``trigger`` and ``mixed`` need a workload of their own
    (:func:`proxy.bench.workload_rules.rules_workload`).
    """
    if kind not in RULE_KINDS:
        raise BenchError(f"--rule-kind must be one of {', '.join(RULE_KINDS)}, got {kind!r}")
    if (bw.rules.kind if bw.rules is not None else None) != (kind if kind in ("trigger", "mixed") else None):
        raise BenchError(f"--rule-kind {kind} needs a workload built for it "
                         "(proxy.bench.workload_rules.rules_workload), this one is not")
    if kind == "alert" and any(len(feeds) != 1 for feeds in bw.watched):
        worst = max(len(feeds) for feeds in bw.watched)
        raise BenchError(f"--rule-kind alert posts single-feed alerts: every profile must watch one "
                         f"feed (--rank 1), this workload has profiles of {worst} feeds")


def rule_body(kind: str, feeds: Sequence[int], within: str) -> dict[str, Any]:
    """The rule posted for one profile watching ``feeds`` (service feed ids).

    ``watch``: AuctionWatch over the feeds, ``within`` the window. ``alert``: a trigger on
    the one feed's updates with no query and no condition, ``slack`` the window, so the
    service opens the same EI ``[u, u+W]`` at each update notification.
    """
    if kind == "alert":
        (feed,) = feeds
        return {"name": "alert", "trigger": {"feed": str(feed), "on": "update", "slack": within}}
    if kind == "watch":
        return {"name": "watch", "watch": {"feeds": [str(f) for f in feeds], "within": within}}
    raise BenchError(f"--rule-kind {kind}: its rules come from its workload (RulePlan.rule_body)")


class _ServiceRunner:
    """The service under test, in this process (``inline``) or as ``proxy serve`` (``process``).

    A separate process is the default: the farm's publications, pings and
    feed documents then do not compete with the service's chronon loop for
    one event loop, as they would not in production.
    """

    def __init__(self, mode: str, settings: Any, env: dict[str, str]) -> None:
        if mode not in ("process", "inline"):
            raise BenchError(f"service mode must be 'process' or 'inline', got {mode!r}")
        self.mode = mode
        self.settings = settings
        self.env = env
        self.base = f"http://127.0.0.1:{settings.port}"
        self._proc: asyncio.subprocess.Process | None = None
        self._server: Any = None
        self._task: asyncio.Task[Any] | None = None
        self.service: Any = None

    async def start(self) -> str:
        """Start the service; returns an API key."""
        import httpx

        from proxy.store import Store, upgrade_database

        await upgrade_database(self.settings.database_url)
        store = Store.from_url(self.settings.database_url)
        try:
            _uid, key = await store.create_user("bench")
        finally:
            await store.close()
        if self.mode == "inline":
            import uvicorn

            from proxy.api import make_app
            from proxy.service import ProxyService

            self.service = ProxyService(self.settings, housekeeping=False)
            app = make_app(self.settings, service=self.service)
            self._server = uvicorn.Server(uvicorn.Config(
                app, host="127.0.0.1", port=self.settings.port, log_level="warning", access_log=False,
                lifespan="on"))
            self._task = asyncio.create_task(self._server.serve())
        else:
            import os
            import sys

            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "proxy.cli", "serve", env={**os.environ, **self.env},
                stdout=asyncio.subprocess.DEVNULL)
        async with httpx.AsyncClient(base_url=self.base, timeout=2) as client:
            for _ in range(600):
                if self._proc is not None and self._proc.returncode is not None:
                    raise BenchError(f"proxy serve exited with status {self._proc.returncode} at start-up")
                if self._task is not None and self._task.done():
                    self._task.result()
                    raise BenchError("the API server stopped during start-up")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        return key
                await asyncio.sleep(0.05)
        raise BenchError("the service did not become ready within 30 s")

    async def clock(self) -> Any:
        """The service's chronon clock, from the origin it persisted."""
        from proxy.service.clock import ChrononClock
        from proxy.store import Store

        store = Store.from_url(self.settings.database_url)
        try:
            saved = await store.get_state("chronon_origin")
        finally:
            await store.close()
        if saved is None:
            raise BenchError("the service has not persisted its chronon origin")
        return ChrononClock(dt.datetime.fromisoformat(saved["origin"]), float(saved["length"]))

    async def stop(self) -> None:
        """Stop gracefully: the service writes what it queued before it exits."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            try:
                await asyncio.wait_for(self._proc.wait(), timeout=30)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()


async def run_live(bw: BenchWorkload, cfg: LiveConfig, out: Path, tag: str,
                   on_chronon: Callable[[int], None] | None = None) -> LiveRecords:
    """Run the service on ``bw`` for its ``K`` chronons and read back what happened.

    ``on_chronon(done)`` is called as the run's chronons pass (``done`` of ``K``).
    Cancelled (the first Ctrl-C under ``asyncio.run``), it stops the service and
    the farm before it returns: no ``proxy serve`` child outlives it.
    """
    import httpx
    import structlog

    from proxy.farm import FeedFarm, TraceEvent
    from proxy.settings import env_name, load_settings

    wl = bw.workload
    k, n, length = wl.chronons, wl.resources, cfg.chronon_seconds
    within = within_text(bw.window, length)
    check_rule_kind(cfg.rule_kind, bw)
    if not -1 < cfg.phase < 1 or cfg.ping_lag < 0:
        raise BenchError(f"need -1 < phase < 1 and ping_lag >= 0, got {cfg.phase}, {cfg.ping_lag}")
    out.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 -- once, before anything runs
    db_url = cfg.database_url
    if db_url is None:
        db_file = out / f"{tag}.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db_file}{suffix}").unlink(missing_ok=True)  # noqa: ASYNC240 -- before the run
        db_url = f"sqlite+aiosqlite:///{db_file}"
    log_path = out / f"{tag}-pubs.jsonl"
    log_path.unlink(missing_ok=True)
    # Every request the proxy makes, for `proxy bench peers` to score it like the real readers.
    requests_path = out / f"{tag}-requests.jsonl"
    requests_path.unlink(missing_ok=True)
    values: dict[str, Any] = {
        "database_url": db_url, "chronon_seconds": length, "budget": cfg.budget, "policy": cfg.policy,
        "allow_private_networks": True, "host": "127.0.0.1", "port": free_port(),
        # Every farm feed shares host 127.0.0.1: no politeness delay, wide concurrency.
        "per_host_concurrency": 512, "per_host_min_delay_seconds": 0.0,
        # One log line per probe would cost more CPU than the probe.
        "log_level": "WARNING",
        # No probe between the feeds' registration and the rules' (the polling of feeds no rule
        # reads would fetch documents before their history is in place); in the run every feed
        # is read and the background's fill spends every probe, so it would never run anyway.
        "unwatched_probe_interval_seconds": 0.0,
    }
    if cfg.revisit_factor is not None:
        values["discovery_revisit_factor"] = cfg.revisit_factor
    if cfg.co_update:
        values["discovery_coupdate"] = True
    hints = None if cfg.publisher_hints is None else stated_intervals(bw, length, cfg.publisher_hints, cfg.seed)
    if hints is not None:
        values["discovery_publisher_hints"] = True
    if not 0.0 <= cfg.push_share <= 1.0:
        raise BenchError(f"--push-share must be in [0, 1], got {cfg.push_share}")
    hubs = contextlib.ExitStack()
    hub_url: str | None = None
    if cfg.push_share > 0:
        from proxy.farm.hub import HubUnavailableError, serve_hub

        try:
            hub_url = hubs.enter_context(serve_hub(out))
        except HubUnavailableError as exc:
            raise BenchError(f"--push-share: {exc}") from exc
        values["public_url"] = f"http://127.0.0.1:{values['port']}"  # the hub calls it back
        # The callbacks' rate limit is the pings' (per minute): a run compresses days of a
        # trace into seconds, so a busy feed's pushes would be answered 429, and flask-websub's
        # hub does not retry them. Scaled out of the way, as time is.
        values["ping_rate_per_minute"] = 60_000.0
        values["ping_burst"] = 10_000
    settings = load_settings(**values)
    env = {env_name(key): str(v).lower() if isinstance(v, bool) else str(v) for key, v in values.items()}
    # Farm trace time 0 is one chronon before workload chronon 0, so no event is due at once.
    events = sorted((u + 1 + cfg.phase, r) for r, ups in enumerate(bw.updates) for u in ups)
    schedule = [TraceEvent(t, str(r)) for t, r in events]
    clock = AnchoredClock()
    saved_log = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                        cache_logger_on_first_use=False)
    runner = _ServiceRunner(cfg.service, settings, env)
    began = time.time()
    busy: list[tuple[int, int]] = []
    try:
        # Each document starts as the trace's history, or as one placeholder entry so the first
        # fetch has something to compare later ones to; both are dated on the service's
        # timeline below, before the first fetch.
        async with FeedFarm(feeds=[str(i) for i in range(n)], window=cfg.feed_window,
                            prefill=0,
                            clock=clock, drive=True, seconds_per_trace_unit=length,
                            trace_unit=dt.timedelta(seconds=length),
                            schedule=schedule, log_path=log_path, request_log=requests_path,
                            ping_drop_rate=cfg.ping_drop_rate,
                            ping_delay=cfg.ping_delay + cfg.ping_lag * length,
                            ping_seed=cfg.seed, hub=hub_url, push_share=cfg.push_share or 1.0,
                            push_seed=cfg.seed, hub_delay=cfg.ping_lag * length, hints=hints,
                            entry_text=bw.rules.entry_text(bw) if bw.rules is not None else None) as farm:
            try:
                key = await runner.start()
                base = runner.base
                async with httpx.AsyncClient(base_url=base, timeout=30,
                                             headers={"Authorization": f"Bearer {key}"}) as api:
                    gate = asyncio.Semaphore(8)  # a few registrations at once; the database serialises

                    async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
                        async with gate:
                            resp = await api.post(path, json=body)
                        resp.raise_for_status()
                        return dict(resp.json())

                    feeds_out = await asyncio.gather(
                        *(post("/api/v1/feeds", {"url": farm.url(str(r))}) for r in range(n)))
                    feed_ids = [int(b["id"]) for b in feeds_out]
                    for r, b in enumerate(feeds_out):
                        farm.set_ping_target(str(r), f"{base}/api/v1/feeds/{b['id']}/ping",
                                             {"X-Ping-Token": b["ping_token"]})
                    # No feed is probed before a rule watches it, so what a document holds before
                    # the run is in place before the first fetch.
                    provisional = await runner.clock()
                    if bw.history:
                        # Dated on a provisional anchor: workload chronon 0 then starts later by
                        # the profiles' registration time, a gap of a few chronons with no update
                        # at the history's end.
                        early = provisional.start_of(provisional.current() + cfg.lead_chronons).timestamp()
                        for r, times in enumerate(bw.history):
                            farm.backfill(str(r), (dt.datetime.fromtimestamp(early + x * length, dt.UTC)
                                                   for x in times))
                    else:
                        # The placeholder is dated a chronon before the rules exist: it says
                        # nothing of the feed's past. Dated on the farm's default epoch it read as
                        # months of silence on the service's timeline, and the update models took
                        # every feed for a dead one (docs/discovery.md, "Other workloads").
                        placeholder = dt.datetime.fromtimestamp(
                            provisional.start_of(provisional.current()).timestamp() - length, dt.UTC)
                        for r in range(n):
                            farm.backfill(str(r), [placeholder])
                    profiles_out = await asyncio.gather(*(
                        post("/api/v1/profiles", {"name": f"p{p}", "rules": [
                            bw.rules.rule_body(p, [feed_ids[r] for r in feeds], within) if bw.rules is not None
                            else rule_body(cfg.rule_kind, [feed_ids[r] for r in feeds], within)]})
                        for p, feeds in enumerate(bw.watched)))
                    rule_of = {int(b["rules"][0]["id"]): p for p, b in enumerate(profiles_out)}
                    sclock = await runner.clock()
                    c0 = sclock.current() + cfg.lead_chronons
                    anchor = sclock.start_of(c0).timestamp()
                    clock.anchor(anchor - length)
                    # Entries are dated on the service's own timeline (a chronon of trace per
                    # chronon of wall time), as a real feed dates them in real time: the proxy
                    # learns update models and dates discovered updates from these dates.
                    farm.epoch = dt.datetime.fromtimestamp(anchor - length, dt.UTC)
                    setup_s = time.time() - began
                    # Sample the service's load: probes in flight or awaiting persistence
                    # are excluded from selection, so a backlog shows up as misses.
                    while (left := anchor + k * length - time.time()) > 0:
                        await asyncio.sleep(min(left, 0.5))
                        if on_chronon is not None:
                            on_chronon(min(k, max(0, int((time.time() - anchor) / length))))
                        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                            ready = (await api.get("/readyz")).json()
                            busy.append((int(ready["inflight"]), int(ready["backlog"])))
                    # The loop's last report may have come just before its end (then a
                    # readiness read took it past): the run's chronons have all passed now.
                    if on_chronon is not None:
                        on_chronon(k)
                    await farm.drain_pings(at_most=5.0)
                    # Probes started in the last chronons finish and are written; later ones
                    # are outside the run and ignored when reading back.
                    await asyncio.sleep(max(0.5, 5 * length))
                    pings: dict[str, int] = {}
                    for ping in farm.pings:
                        pings[ping.outcome] = pings.get(ping.outcome, 0) + 1
                    pushed = tuple(int(f) for f in farm.push_feeds)
            finally:
                await runner.stop()
    finally:
        hubs.close()
        structlog.configure(**saved_log)
    rec = await _read_back(db_url, log_path, feed_ids, rule_of, c0, anchor, length, k, pings, setup_s)
    return replace(rec, max_busy=max((b for b, _ in busy), default=0),
                   max_backlog=max((q for _, q in busy), default=0), pushed=pushed)


def _as_dt(value: Any) -> dt.datetime:
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    assert isinstance(value, dt.datetime)
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


async def _read_back(
    db_url: str, log_path: Path, feed_ids: list[int], rule_of: dict[int, int], c0: int,
    anchor: float, length: float, k: int, pings: dict[str, int], setup_s: float,
) -> LiveRecords:
    """Probes, CEIs and entries from the database; publications from the farm's log."""
    from sqlalchemy import text

    from proxy.farm import load_publications
    from proxy.store import make_engine

    res = {fid: r for r, fid in enumerate(feed_ids)}

    def ch(when: float) -> float:
        return (when - anchor) / length

    pubs: list[Pub] = []
    entry_ids: list[str] = []
    for pub in load_publications(log_path):
        pubs.append(Pub(int(pub.feed_id), ch(pub.wall_time)))
        entry_ids.append(pub.entry_id)
    engine = make_engine(db_url)
    try:
        async with engine.connect() as conn:
            probes: list[ProbeRec] = []
            pushes: list[ProbeRec] = []
            for f, c, s, o in await conn.execute(text(
                    "SELECT feed_id, chronon, started_at, outcome FROM probes WHERE chronon IS NOT NULL")):
                if int(f) in res and 0 <= int(c) - c0 < k:
                    # A pushed document's row (issue 44) observed the feed but spent no budget.
                    (pushes if o == "push" else probes).append(ProbeRec(
                        res[int(f)], int(c) - c0, ch(_as_dt(s).timestamp()), o in ("ok", "not_modified", "push")))
            subscribed = {
                res[int(f)]: ch(_as_dt(e).timestamp() - float(n))
                for f, e, n in await conn.execute(text(
                    "SELECT feed_id, lease_expires_at, lease_seconds FROM websub_subscriptions "
                    "WHERE lease_expires_at IS NOT NULL AND lease_seconds IS NOT NULL"))
                if int(f) in res
            }
            stored = frozenset(str(i) for (i,) in await conn.execute(text("SELECT identity FROM entries")))
            states: dict[str, int] = {}
            for state, count in await conn.execute(text("SELECT state, COUNT(*) FROM ceis GROUP BY state")):
                states[str(state)] = int(count)
            eis = tuple(
                (rule_of[int(rule)], int(o), res[int(f)], int(s) - c0)
                for rule, o, f, s in await conn.execute(text(
                    "SELECT c.rule_id, e.ordinal, e.feed_id, e.start FROM eis e JOIN ceis c ON c.id = e.cei_id"))
                if rule is not None and int(rule) in rule_of
            )
            resource_of = {int(i): int(r) for i, r in await conn.execute(text(
                "SELECT id, resource FROM feeds"))}
            jitter = (await conn.execute(text(
                "SELECT MAX(tick_jitter_seconds) FROM chronon_metrics WHERE chronon >= :a AND chronon < :b"),
                {"a": c0, "b": c0 + k})).scalar()
    finally:
        await engine.dispose()
    rules = tuple(sorted(rule_of, key=rule_of.__getitem__))
    return LiveRecords(tuple(pubs), tuple(entry_ids), tuple(probes), stored, states, eis, rules,
                       tuple(resource_of[f] for f in feed_ids), pings, float(jitter or 0.0), setup_s,
                       pushes=tuple(pushes), subscribed_at=subscribed)


async def records_from_run(bw: BenchWorkload, cfg: LiveConfig, out: Path, tag: str,
                           saved: dict[str, Any]) -> LiveRecords:
    """Rebuild a finished run's records from its database and publication log (to re-analyse it).

    The feed and rule numbering come from the database (farm feed URLs,
    profile names ``p{i}``), workload chronon 0 from the persisted chronon
    origin and the publications' farm trace times; pings and load samples
    from the earlier result ``saved``.
    """
    from sqlalchemy import text

    from proxy.farm import load_publications
    from proxy.store import make_engine

    db_url = cfg.database_url or f"sqlite+aiosqlite:///{out / f'{tag}.sqlite3'}"
    log_path = out / f"{tag}-pubs.jsonl"
    length = cfg.chronon_seconds
    engine = make_engine(db_url)
    try:
        async with engine.connect() as conn:
            farm_of = {int(i): int(str(u).rsplit("/", 1)[1].split(".")[0])
                       for i, u in await conn.execute(text("SELECT id, url FROM feeds"))}
            names = {str(n): int(r) for r, n in await conn.execute(text(
                "SELECT r.id, p.name FROM rules r JOIN profiles p ON p.id = r.profile_id"))}
            origin = (await conn.execute(text(
                "SELECT value FROM service_state WHERE key = 'chronon_origin'"))).scalar()
    finally:
        await engine.dispose()
    if origin is None:
        raise BenchError(f"{db_url}: no chronon origin; is this a benchmark database?")
    start = dt.datetime.fromisoformat((json.loads(origin) if isinstance(origin, str) else origin)["origin"])
    by_farm = {r: i for i, r in farm_of.items()}
    feed_ids = [by_farm[r] for r in range(bw.workload.resources)]
    rule_of = {names[f"p{p}"]: p for p in range(len(bw.watched))}
    # Farm trace time T of update u is u + 1 + phase, at wall origin + (c0 - 1 + T) * length.
    offsets = [round((p.wall_time - start.timestamp()) / length - p.trace_time + 1)
               for p in load_publications(log_path)]
    c0 = max(set(offsets), key=offsets.count)
    anchor = start.timestamp() + c0 * length
    live = saved["live"]
    rec = await _read_back(db_url, log_path, feed_ids, rule_of, c0, anchor, length, bw.workload.chronons,
                           dict(live["pings"]), float(live["setup_s"]))
    return replace(rec, max_busy=int(live.get("max_busy", 0)),
                   max_backlog=int(live.get("max_writer_backlog", 0)),
                   pushed=tuple(live.get("push", {}).get("pushed_feeds", ())))


# ---------------------------------------------------------------------- the whole benchmark


def _published_map(pubs: Sequence[Pub], phase: float) -> dict[tuple[int, int], float]:
    """(resource, update chronon) → publication time in chronons (the first of that chronon)."""
    out: dict[tuple[int, int], float] = {}
    for p in pubs:
        key = (p.resource, math.floor(p.time - phase + 0.5))
        out.setdefault(key, p.time)
    return out


def _ei_agreement(bw: BenchWorkload, rec: LiveRecords) -> tuple[int, int]:
    """How many of the generator's EIs the service recorded with the same feed and start."""
    mapping = {name: i for i, name in enumerate(bw.profile_names)}
    want = {(mapping[c.profile], e.resource, e.start) for c in bw.workload.ceis for e in c.eis}
    got = {(p, r, s) for p, _o, r, s in rec.service_eis}
    return len(want & got), len(want)


def analyse(bw: BenchWorkload, cfg: LiveConfig, rec: LiveRecords,
            adaptive: AdaptiveParams | None = None) -> dict[str, Any]:
    """Every figure of one run: live ground truth, the simulator twice, the two readers."""
    from proxy.sim.run import simulate

    wl = replace(bw.workload, budget=type(bw.workload.budget)(cfg.budget))
    k = wl.chronons
    published = _published_map(rec.pubs, cfg.phase)
    # Every observation of a feed: the probes, and the pushed documents (issue 44), which spent
    # no budget (``used`` counts probes only).
    observed = rec.probes + rec.pushes
    # Trigger rules: each schedule is scored on its own CEIs, the query EIs from its own probe
    # of the trigger (proxy.bench.workload_rules); every other CEI is the generator's.
    anchor = bw.rules.anchored(bw.window) if bw.rules is not None else None

    def own(ceis: Sequence[CEI], probes: Sequence[ProbeRec],
            pub: dict[tuple[int, int], float] | None = None) -> Sequence[CEI]:
        return ceis if anchor is None else anchor(ceis, probes, pub)

    live = cei_outcome(own(wl.ceis, observed, published), observed, published)
    entries = entry_outcome(rec.pubs, observed, cfg.feed_window)
    used = budget_per_chronon(rec.probes, k)
    probes = sum(used)
    sim = simulate(wl, cfg.policy)
    # The live-equivalent simulator: tail CEIs included (the proxy probes for them too),
    # EIs usable one chronon later; scored on the generator's CEIs only.
    shift = cfg.phase > 0
    equivalent = replace(live_equivalent(unclamped(bw), shift_start=shift), budget=wl.budget)
    back = {res: r for r, res in enumerate(rec.resources)}
    sim_lag = simulate(service_labelled(equivalent, bw, rec.rule_ids, rec.resources), cfg.policy)
    sim_probes = [ProbeRec(r, t, float(t)) for t, r in sim.schedule]
    sim_lag_probes = [ProbeRec(back[r], t, float(t)) for t, r in sim_lag.schedule if t < k]
    lag_outcome = cei_outcome(own(lagged(wl, shift_start=shift).ceis, sim_lag_probes), sim_lag_probes)
    # The same with the generator's ids, to show what tie-breaking alone is worth.
    gen_ids = simulate(equivalent, cfg.policy)
    gen_ids_probes = [ProbeRec(r, t, float(t)) for t, r in gen_ids.schedule if t < k]
    gen_ids_outcome = cei_outcome(own(lagged(wl, shift_start=shift).ceis, gen_ids_probes), gen_ids_probes)
    sim_pubs = [Pub(r, float(u)) for r, ups in enumerate(bw.updates) for u in ups]
    ap = adaptive or AdaptiveParams(max_interval=max(2, k // 2), lookback=max(1, k // 5),
                                    window=cfg.feed_window)
    view = reader_view(bw)
    remap = view.index
    # Update-detection delay (publication to the first probe that saw it) on the watched
    # feeds, the proxy's and each reader's at equal probes; entries pushed out unseen count
    # in no delay (entry completeness says how many).
    live_watched = entry_outcome([pub for pub in rec.pubs if pub.resource in remap], observed,
                                 cfg.feed_window)
    reader_pubs = [Pub(remap[pub.resource], pub.time) for pub in sim_pubs if pub.resource in remap]
    readers: dict[str, Any] = {}
    # Each reader's figures are the mean over cfg.reader_orders feed orders (its delays pooled
    # over them): which feed a reader visits first is chance, and one order is one draw.
    orders = cfg.reader_orders
    scored: CeisOf = view.ceis if anchor is None else (
        lambda schedule: own(view.ceis, [ProbeRec(r, t, float(t)) for t, r in schedule]))
    for kind in ("round-robin", "adaptive"):
        eq = match_probes(kind, scored, view.updates, k, probes, ap, orders)
        need = probes_to_reach(kind, scored, view.updates, k, live.completeness, ap, orders)
        seen = [entry_outcome(reader_pubs, [ProbeRec(r, t, float(t)) for t, r in s], cfg.feed_window)
                for s in eq.schedules]
        spread = quantiles(eq.spread, (0.05, 0.95))
        readers[kind] = {"probes": eq.probes, "completeness": eq.completeness,
                         "orders": orders,
                         "completeness_feed_order": eq.spread[0],
                         "completeness_p5": spread["p5"],
                         "completeness_p95": spread["p95"],
                         "probes_to_match": need.probes if need else None,
                         "completeness_at_match": need.completeness if need else None,
                         "detection_delay_chronons": quantiles([d for e in seen for d in e.delays]),
                         "entry_completeness": statistics.fmean(e.completeness for e in seen)}
    agree, total_eis = _ei_agreement(bw, rec)
    curve_live = completeness_curve(live, k)
    sim_outcome = cei_outcome(own(wl.ceis, sim_probes), sim_probes)
    curve_sim = completeness_curve(sim_outcome, k)
    curve_lag = completeness_curve(lag_outcome, k)
    return {
        "workload": bw.name,
        "description": bw.description,
        "config": asdict(cfg) | {"database_url": _redact(cfg.database_url)},
        "chronons": k,
        "feeds": wl.resources,
        "profiles": len(bw.watched),
        "ceis": len(wl.ceis),
        "publications": len(rec.pubs),
        "live": {
            "cei_completeness": live.completeness,
            "captured": live.captured,
            "service_states": rec.service_ceis,
            "entry_completeness": entries.completeness,
            "entries_stored": sum(1 for e in rec.pub_entry_ids if e in rec.stored_entries),
            "delay_chronons": quantiles(entries.delays),
            "detection_delay_chronons": quantiles(live_watched.delays),
            "watched_entry_completeness": live_watched.completeness,
            "delays": [round(d, 3) for d in entries.delays],
            "probes": probes,
            "failed_probes": sum(1 for p in rec.probes if not p.ok),
            "budget_mean": probes / k,
            "budget_full_share": sum(1 for u in used if u >= cfg.budget) / k,
            "budget_max": max(used, default=0),
            "eis_agree": agree,
            "eis_total": total_eis,
            "pings": rec.pings,
            "max_tick_jitter_s": rec.max_jitter_s,
            "setup_s": rec.setup_s,
            "max_busy": rec.max_busy,
            "max_writer_backlog": rec.max_backlog,
            **({"push": push_figures(wl.ceis, rec, published, cfg)} if cfg.push_share else {}),
        },
        "sim": {"cei_completeness": sim.completeness if anchor is None else sim_outcome.completeness,
                "probes": sim.probes,
                "entry_completeness": entry_outcome(sim_pubs, sim_probes, cfg.feed_window).completeness,
                # The clairvoyant's: told of every update at its chronon (pings), same budget (issue 45).
                "detection_delay_chronons": quantiles(entry_outcome(
                    [pub for pub in sim_pubs if pub.resource in remap], sim_probes, cfg.feed_window).delays)},
        "sim_lag": {"cei_completeness": lag_outcome.completeness, "probes": len(sim_lag_probes),
                    "entry_completeness":
                        entry_outcome([Pub(p.resource, p.time + shift) for p in sim_pubs], sim_lag_probes,
                                      cfg.feed_window).completeness},
        "sim_lag_generator_ids": {"cei_completeness": gen_ids_outcome.completeness},
        "readers": readers,
        "curves": {"live": _thin(curve_live), "sim": _thin(curve_sim), "sim_lag": _thin(curve_lag)},
    }


def push_figures(ceis: Sequence[CEI], rec: LiveRecords, published: dict[tuple[int, int], float],
                 cfg: LiveConfig) -> dict[str, Any]:
    """What push did in a ``--push-share`` run (issue 44), pushed feeds beside polled ones.

    A pushed feed counts as pushed from its subscription's verification on (``subscribed_at``;
    before it, and if it never got one, it is polled like the others): its EIs starting then
    or later, its publications then or later, and its probes after it, the health probes
    (target: at most one per lease). Each EI is scored alone (a one-EI CEI), by the same
    ground truth as the run's CEIs: an observation in its window after the publication.
    """
    seen = rec.probes + rec.pushes
    since = {r: rec.subscribed_at[r] for r in rec.pushed if r in rec.subscribed_at}

    def is_pushed(r: int, at: float) -> bool:
        return r in since and at >= since[r]

    def eis(pushed: bool) -> dict[str, Any]:
        singles = [CEI(f"{c.id}#{i}", c.profile, (e,)) for c in ceis for i, e in enumerate(c.eis)
                   if is_pushed(e.resource, e.start) == pushed]
        out = cei_outcome(singles, seen, published)
        return {"eis": out.total, "captured": out.captured,
                "completeness": out.completeness if out.total else None}

    def delays(pushed: bool) -> dict[str, float]:
        pubs = [p for p in rec.pubs if is_pushed(p.resource, p.time) == pushed]
        return quantiles(entry_outcome(pubs, seen, cfg.feed_window).delays)

    after = [p for p in rec.probes if is_pushed(p.resource, p.time)]
    per_feed = [sum(1 for p in after if p.resource == r) for r in since]
    return {
        "share": cfg.push_share,
        "pushed_feeds": list(rec.pushed),
        "subscribed_feeds": len(since),
        "pushes": len(rec.pushes),
        "pushed_eis": eis(True),
        "polled_eis": eis(False),
        "probes_on_pushed_feeds": sum(1 for p in rec.probes if p.resource in set(rec.pushed)),
        "probes_on_polled_feeds": sum(1 for p in rec.probes if p.resource not in set(rec.pushed)),
        "health_probes": len(after),
        "health_probes_max_per_feed": max(per_feed, default=0),
        "detection_delay_pushed_chronons": delays(True),
        "detection_delay_polled_chronons": delays(False),
    }


def _thin(curve: list[float], points: int = 200) -> list[float | None]:
    step = max(1, len(curve) // points)
    return [None if math.isnan(v) else round(v, 4) for v in curve[::step]]


def _redact(url: str | None) -> str | None:
    if url is None or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    return f"{scheme}://***@{rest.split('@', 1)[1]}"


async def run_benchmark(
    bw: BenchWorkload, cfg: LiveConfig, out: Path, tag: str, command: str = "",
    on_chronon: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """One live run plus its analysis, saved as ``out/{tag}.json`` (``command``: how it was invoked)."""
    rec = await run_live(bw, cfg, out, tag, on_chronon)
    result = analyse(bw, cfg, rec)
    result["tag"] = tag
    result["command"] = command
    (out / f"{tag}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


__all__ = [
    "PHASE",
    "PING_LAG",
    "RULE_KINDS",
    "AnchoredClock",
    "BenchError",
    "BenchWorkload",
    "LiveConfig",
    "LiveRecords",
    "ReaderView",
    "analyse",
    "busiest_window",
    "check_rule_kind",
    "lagged",
    "live_equivalent",
    "poisson_workload",
    "push_figures",
    "reader_view",
    "records_from_run",
    "rule_body",
    "run_benchmark",
    "run_live",
    "service_labelled",
    "tail_ceis",
    "trace_workload",
    "unclamped",
    "within_text",
]
