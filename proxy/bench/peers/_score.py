"""One scorer for every poller (issue 47, item 3): the farm's request log against the workload's CEIs.

The proxy and each real reader are scored the same way: their feed GETs as the
farm logged them become probes (:class:`~proxy.bench.metrics.ProbeRec`) and go
through :func:`~proxy.bench.metrics.cei_outcome`, the scorer the live bench
uses on the proxy's own probe records.  Only ``kind == "feed"`` requests are
probes; HEAD, favicon and site-root requests count in ``bytes``, in
``other_requests`` and in the peak of concurrent requests per host (the load a
host bears) but never as feed GETs.

Deliberately not here: running anything (:mod:`proxy.bench.peers._run`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from proxy.bench.metrics import ProbeRec, Pub, cei_outcome, entry_outcome, quantiles
from proxy.core.model import CEI
from proxy.farm import RequestKind, RequestRecord, peak_concurrency


@dataclass(frozen=True, slots=True)
class RunClock:
    """How a poller's run maps wall time onto workload chronons: chronon ``c`` is
    ``[anchor + c * chronon_seconds, anchor + (c+1) * chronon_seconds)``."""

    anchor: float
    chronon_seconds: float
    chronons: int

    def chronon_of(self, t_ms: int) -> float:
        return (t_ms / 1000.0 - self.anchor) / self.chronon_seconds


@dataclass(frozen=True, slots=True)
class Figures:
    """One poller's scores, all from the farm's request log."""

    completeness: float
    captured: int
    ceis: int
    feed_gets: int
    conditional_share: float
    not_modified: int
    failed: int
    bytes: int
    other_requests: int
    delay_p50: float
    delay_p90: float
    entry_completeness: float
    peak_per_host: int = -1
    """The most requests in progress together on one host during the run (-1: not measured,
    as for a replica)."""

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


def probes_of(records: Sequence[RequestRecord], clock: RunClock,
              resource_of: Mapping[str, int]) -> list[ProbeRec]:
    """The run's feed GETs as probes: chronon and start time from the request's wall time."""
    out = []
    for r in records:
        if r.kind is not RequestKind.FEED or r.feed is None or r.feed not in resource_of:
            continue
        t = clock.chronon_of(r.t_ms)
        if 0 <= t < clock.chronons:
            out.append(ProbeRec(resource_of[r.feed], math.floor(t), t, r.status in (200, 304)))
    return out


def in_run(records: Sequence[RequestRecord], clock: RunClock) -> list[RequestRecord]:
    """The requests logged during the run's ``K`` chronons."""
    return [r for r in records if 0 <= clock.chronon_of(r.t_ms) < clock.chronons]


def score(
    records: Sequence[RequestRecord], clock: RunClock, ceis: Sequence[CEI], pubs: Sequence[Pub],
    published: Mapping[tuple[int, int], float], watched: frozenset[int], feed_window: int,
    resource_of: Mapping[str, int] | None = None,
) -> Figures:
    """Score one poller's requests: CEI completeness, GETs, conditional share, bytes, detection delay.

    ``pubs`` and ``published`` are in the same run's chronons (the farm's
    publication log read with ``clock``); the detection delay is the
    live bench's: publication to the first successful GET that saw it, on the
    watched feeds, in chronons.
    """
    resource_of = resource_of or {str(r): r for r in range(max((p.resource for p in pubs), default=-1) + 1)}
    run = in_run(records, clock)
    gets = [r for r in run if r.kind is RequestKind.FEED]
    probes = probes_of(records, clock, resource_of)
    outcome = cei_outcome(ceis, probes, published)
    seen = entry_outcome([p for p in pubs if p.resource in watched], probes, feed_window)
    q = quantiles(seen.delays, (0.5, 0.9))
    conditional = sum(1 for r in gets if r.conditional)
    return Figures(
        peak_per_host=max(peak_concurrency(run).values(), default=-1),
        completeness=outcome.completeness, captured=outcome.captured, ceis=outcome.total,
        feed_gets=len(gets), conditional_share=conditional / len(gets) if gets else 0.0,
        not_modified=sum(1 for r in gets if r.status == 304),
        failed=sum(1 for r in gets if r.status not in (200, 304)),
        # -1 when no request's size is known (a replica's): shown as "-", not as 0 bytes.
        bytes=sum(max(0, r.bytes) for r in run) if not run or any(r.bytes >= 0 for r in run) else -1,
        other_requests=len(run) - len(gets),
        delay_p50=q["p50"], delay_p90=q["p90"], entry_completeness=seen.completeness)


def _size(n: int) -> str:
    if n < 0:
        return "-"
    if n >= 100_000:
        return f"{n / 1e6:.1f}MB"
    if n >= 100:
        return f"{n / 1e3:.1f}kB"
    return f"{n}B"


def _whole(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0f}"


def line(name: str, f: Figures, extra: str = "") -> str:
    """The output contract's line (issue 47, item 4), then the peak per host; ``extra`` fields follow."""
    peak = "-" if f.peak_per_host < 0 else str(f.peak_per_host)
    text = (f"{name}: completeness {100 * f.completeness:.1f}%  feed GETs {f.feed_gets}  "
            f"conditional {100 * f.conditional_share:.0f}%  bytes {_size(f.bytes)}  "
            f"delay p50/p90 {_whole(f.delay_p50)}/{_whole(f.delay_p90)}  peak per host {peak}")
    return f"{text}  {extra}" if extra else text
