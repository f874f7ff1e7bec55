"""``proxy bench peers``: the proxy, then each real reader, against the same farm playing the same trace.

1. The proxy runs as in ``proxy bench live`` (:func:`proxy.bench.live.run_benchmark`),
   its farm logging every request.
2. Each peer then gets a farm of its own, playing the same workload with the same
   publication timing (``phase``) on its own wall chronon (:class:`PeerPlan`),
   subscribed to the rules' feeds, and polls it by its own scheduler, tuned to
   the proxy's number of feed GETs (:mod:`proxy.bench.peers._peers`).
3. Every poller's logged requests go through one scorer (:mod:`._score`).

Deliberately not here: command-line parsing (``proxy.bench.cli``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import math
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from proxy.bench.live import AnchoredClock, BenchWorkload, LiveConfig, reader_view, run_benchmark
from proxy.bench.metrics import Pub
from proxy.bench.peers._peers import Peer, PeerPlan, PeerRun
from proxy.bench.peers._score import Figures, RunClock, line, score
from proxy.farm import Publication, RequestRecord, load_publications, load_requests

LEAD_SECONDS = 1.0
"""Wall time between a peer's set-up and chronon 0."""
TOLERANCE = 0.05
"""Issue 47: a peer's feed GETs within 5 % of the proxy's."""


@dataclass(frozen=True, slots=True)
class PollerResult:
    """One poller's run: its name, figures, timing, configuration, and the farm's log of its requests."""

    name: str
    figures: Figures
    clock: RunClock
    settings: dict[str, Any]
    requests: tuple[RequestRecord, ...]
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "figures": self.figures.as_dict(), "clock": asdict(self.clock),
                "settings": self.settings, "note": self.note,
                "requests": [asdict(r) for r in self.requests]}


def _published(pubs: Sequence[Pub], phase: float) -> dict[tuple[int, int], float]:
    """(resource, update chronon) → first publication time, as the live bench keys it."""
    out: dict[tuple[int, int], float] = {}
    for p in pubs:
        out.setdefault((p.resource, math.floor(p.time - phase + 0.5)), p.time)
    return out


def _score_run(bw: BenchWorkload, cfg: LiveConfig, clock: RunClock, pubs: Sequence[Publication],
               records: Sequence[RequestRecord]) -> Figures:
    chron = [Pub(int(p.feed_id), (p.wall_time - clock.anchor) / clock.chronon_seconds) for p in pubs]
    watched = frozenset(reader_view(bw).feeds)
    return score(records, clock, bw.workload.ceis, chron, _published(chron, cfg.phase), watched,
                 cfg.feed_window)


async def run_proxy(bw: BenchWorkload, cfg: LiveConfig, out: Path, tag: str, command: str,
                    on_chronon: Callable[[int], None] | None = None) -> tuple[PollerResult, dict[str, Any]]:
    """The proxy's live run, scored from its farm's request log; also the live bench's own result."""
    live = await run_benchmark(bw, cfg, out, tag, command, on_chronon)
    pubs = load_publications(out / f"{tag}-pubs.jsonl")
    records = load_requests(out / f"{tag}-requests.jsonl")
    length = cfg.chronon_seconds
    # The farm's clock was anchored one chronon before workload chronon 0 and plays update u at
    # trace time u + 1 + phase; the earliest publication is the least delayed estimate.
    anchor = min(p.wall_time - (p.trace_time - 1) * length for p in pubs) if pubs else 0.0
    clock = RunClock(anchor, length, bw.workload.chronons)
    figures = _score_run(bw, cfg, clock, pubs, records)
    settings = {"policy": cfg.policy, "budget": cfg.budget, "chronon_seconds": length}
    return PollerResult("proxy", figures, clock, settings, tuple(records)), live


async def run_peer(bw: BenchWorkload, cfg: LiveConfig, peer: Peer, plan: PeerPlan, out: Path,
                   tag: str) -> PollerResult:
    """One peer against a fresh farm playing ``bw`` on ``plan``'s chronon, scored like the proxy."""
    from proxy.farm import FeedFarm, TraceEvent

    wl = bw.workload
    k, n, length = wl.chronons, wl.resources, plan.chronon_seconds
    workdir = out / f"{tag}-peer-{peer.name}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    pubs_log, req_log = out / f"{tag}-peer-{peer.name}-pubs.jsonl", out / f"{tag}-peer-{peer.name}-requests.jsonl"
    for path in (pubs_log, req_log):
        path.unlink(missing_ok=True)
    events = sorted((u + 1 + cfg.phase, r) for r, ups in enumerate(bw.updates) for u in ups)
    clock = AnchoredClock()
    view = reader_view(bw)
    async with FeedFarm(feeds=[str(i) for i in range(n)], window=cfg.feed_window, prefill=0, clock=clock,
                        drive=True, seconds_per_trace_unit=length, trace_unit=dt.timedelta(seconds=length),
                        schedule=[TraceEvent(t, str(r)) for t, r in events], log_path=pubs_log,
                        request_log=req_log) as farm:
        urls = tuple(farm.url(str(r)) for r in view.feeds)
        anchor = time.time() + LEAD_SECONDS
        # As in the live run: each document starts with one entry dated a chronon before the run
        # (or the trace's history), so the first fetch has something to compare later ones to.
        if bw.history:
            for r, times in enumerate(bw.history):
                farm.backfill(str(r), (dt.datetime.fromtimestamp(anchor + x * length, dt.UTC) for x in times))
        else:
            for r in range(n):
                farm.backfill(str(r), [dt.datetime.fromtimestamp(anchor - length, dt.UTC)])
        run = PeerRun(workdir, urls, plan, anchor, anchor + k * length, out / f"{tag}-peer-{peer.name}.log")
        await peer.prepare(run)
        anchor = max(anchor, time.time() + 0.2)  # set-up may have taken longer than the lead
        run = replace(run, start=anchor, end=anchor + k * length)
        clock.anchor(anchor - length)
        farm.epoch = dt.datetime.fromtimestamp(anchor - length, dt.UTC)
        await peer.run(run)
        records = list(farm.request_log.records) if farm.request_log is not None else []
    rclock = RunClock(anchor, length, k)
    figures = _score_run(bw, cfg, rclock, load_publications(pubs_log), records)
    settings = {**plan.settings, "chronon_seconds": round(length, 6),
                "minute_chronons": round(plan.minute_chronons, 3), "rounds": plan.rounds,
                "feeds": len(urls)}
    return PollerResult(f"peer {peer.name}", figures, rclock, settings, tuple(records))


def gets_note(peer: PollerResult, proxy: PollerResult, feeds: int | None) -> str:
    """Empty when the poller's GETs are within 5 % of the proxy's; else why not.

    ``feeds``: a peer's round (it polls all of them each time); ``None`` for a replica,
    whose minute is bisected and whose GETs move in uneven steps as it grows.
    """
    want, got = proxy.figures.feed_gets, peer.figures.feed_gets
    if want and abs(got - want) <= TOLERANCE * want:
        return ""
    why = ("its minute's bisection found no closer count" if feeds is None else
           f"it polls all {feeds} feeds per round, so its GETs come in steps of {feeds}")
    return f"feed GETs {got} vs the proxy's {want}: off by more than 5 %; {why}"


def write_result(out: Path, tag: str, command: str, bw: BenchWorkload,
                 results: Sequence[PollerResult], skipped: dict[str, str], live: dict[str, Any]) -> Path:
    """``out/{tag}-peers.json``: each poller's figures, configuration and request log."""
    path = out / f"{tag}-peers.json"
    body = {"tag": tag, "command": command, "workload": bw.name, "description": bw.description,
            "chronons": bw.workload.chronons, "ceis": len(bw.workload.ceis),
            "lines": [line(r.name, r.figures, r.note) for r in results],
            "pollers": [r.to_json() for r in results], "skipped": skipped,
            "live": {k: live[k] for k in ("live", "sim_lag", "readers") if k in live}}
    path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    return path


async def main(bw: BenchWorkload, cfg: LiveConfig, peers: Sequence[Peer], out: Path, tag: str,
               command: str, echo: Callable[[str], None],
               on_chronon: Callable[[int], None] | None = None, replicas: bool = True) -> Path:
    """The proxy, then each peer; prints a line per poller as it finishes.

    SIGTERM cancels it like Ctrl-C does, so that no peer (each in a session of its
    own, to stop its children with it) outlives the command.
    """
    task = asyncio.current_task()
    if task is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    proxy, live = await run_proxy(bw, cfg, out, tag, command, on_chronon)
    echo(line("proxy", proxy.figures))
    results = [proxy]
    skipped: dict[str, str] = {}
    if replicas:
        from proxy.bench.peers.miniflux import replica_results

        for rep in replica_results(bw, cfg.phase, cfg.feed_window, proxy.figures.feed_gets):
            off = gets_note(rep, proxy, None)
            rep = replace(rep, note=f"{rep.note}; {off}" if off else rep.note)
            results.append(rep)
            echo(line(rep.name, rep.figures, rep.note))
    feeds = len(reader_view(bw).feeds)

    async def one(peer: Peer) -> PollerResult | None:
        why = peer.missing()
        if why is not None:
            skipped[peer.name] = why
            echo(f"peer {peer.name}: not run: {why}")
            return None
        plan = peer.plan(feeds, bw.workload.chronons, proxy.figures.feed_gets, cfg.chronon_seconds)
        echo(f"peer {peer.name}: running {bw.workload.chronons} chronons of "
             f"{plan.chronon_seconds:.3g} s ({plan.rounds} rounds, a minute = {plan.minute_chronons:.1f} "
             f"chronons){' beside the others' if peer.idle else ''}")
        try:
            res = await run_peer(bw, cfg, peer, plan, out, tag)
        except (OSError, RuntimeError) as exc:
            skipped[peer.name] = f"failed: {exc}"
            echo(f"peer {peer.name}: failed: {exc}")
            return None
        res = replace(res, note=gets_note(res, proxy, feeds))
        echo(line(res.name, res.figures, res.note))
        return res

    # A peer that sleeps through real minutes between its rounds (newsboat) runs beside the
    # others, each on its own farm; the others run one after the other.
    beside = {p.name: asyncio.create_task(one(p)) for p in peers if p.idle}
    done: dict[str, PollerResult | None] = {}
    try:
        for peer in peers:
            if not peer.idle:
                done[peer.name] = await one(peer)
        for name, task in beside.items():
            done[name] = await task
    finally:
        for task in beside.values():
            task.cancel()
        await asyncio.gather(*beside.values(), return_exceptions=True)
    results += [r for p in peers if (r := done.get(p.name)) is not None]
    return write_result(out, tag, command, bw, results, skipped, live)
