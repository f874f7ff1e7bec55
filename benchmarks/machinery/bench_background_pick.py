"""The background allocation's cost per tick: ``CaptureExplore.pick`` over many watched feeds.

Figures quoted in ``docs/discovery.md`` (section "When in its week: the
models' cycles"). The chronon loop calls ``pick`` every tick with every feed a
rule waits for; this times it alone (no service, no I/O) on synthetic inputs:
Gamma-distributed rates, uniform weights, W = 10, every pick a successful
probe, and the cases the service meets: no feed with a cycle, and a share of
the feeds with an hour-of-week ``CycleShape`` (a seasonal model), each at the
frequencies' trust 1 (``weight × rate``) and 0 (by weight; the explore share
0.2: the service's allocation until the pooled rates), and the service's
allocation now (``service``: the loop's explore share and trust, its rates
pooled from each feed's evidence by ``pooled_rates`` inside the timed pick, as
the loop does every tick). CPU time per pick (``time.process_time``, so other
processes' load counts less than in wall time), median and 99th percentile
over ``--ticks`` ticks.

    .venv/bin/python benchmarks/machinery/bench_background_pick.py --feeds 10000 --budget 200

One output line per case, e.g. ``40% shaped, e=0: pick p50 8.4 ms  p99 51.2 ms``.
To compare with an older version, run the same command with that version's
``proxy`` package first on ``PYTHONPATH`` (cases it does not know are skipped).
"""

from __future__ import annotations

import argparse
import inspect
import time
from collections.abc import Callable

import numpy as np

from proxy.core.discovery import CaptureExplore


def run(feeds: int, budget: int, ticks: int, shaped_share: float, level_exponent: float | None,
        seed: int, service: bool = False) -> tuple[float, float]:
    """p50 and p99 of the CPU milliseconds per pick (``service``: the loop's allocation, pooling included)."""
    rng = np.random.default_rng(seed)
    resources = list(range(feeds))
    rate = [float(x) for x in rng.gamma(0.6, 0.02, feeds)]
    weight = [float(x) for x in rng.uniform(0.1, 2.0, feeds)]
    exposure = [float(x) for x in rng.uniform(100.0, 10_000.0, feeds)]  # chronons each feed was covered
    updates = [float(x) for x in rng.poisson(np.asarray(rate) * np.asarray(exposure))]
    extra: dict[str, object] = {}
    pool: Callable[[], list[float]] | None = None
    if level_exponent is not None:
        from proxy.core.rates import CycleShape

        w = rng.gamma(2.0, 0.5, 168)
        cycle = CycleShape(0.0, 10_080.0, tuple(float(x) for x in w / w.mean()))  # a week of minute chronons
        every = round(1 / shaped_share) if shaped_share > 0 else 0
        extra["shape"] = [cycle if every and i % every == 0 else None for i in range(feeds)]
        alloc = CaptureExplore(level_exponent=level_exponent)
    else:
        alloc = CaptureExplore()
    if service:
        from proxy.core.rates import pooled_rates
        from proxy.service.loop import EXPLORE_SHARE, LEVEL_EXPONENT, OPTIMISM_Z, POOL_STRENGTH

        alloc = CaptureExplore(epsilon=EXPLORE_SHARE, level_exponent=LEVEL_EXPONENT)

        def pool() -> list[float]:
            return pooled_rates(updates, exposure, POOL_STRENGTH, OPTIMISM_Z)

    last: dict[int, int | None] = dict.fromkeys(resources)
    times = []
    for t in range(ticks):
        ls = [last[r] for r in resources]
        t0 = time.process_time()
        picked = alloc.pick(budget, t, resources, ls, rate if pool is None else pool(), weight, 10,
                            **extra)  # type: ignore[arg-type]
        times.append(time.process_time() - t0)
        for r in picked:
            last[r] = t
    ms = np.array(times) * 1e3
    return float(np.median(ms)), float(np.percentile(ms, 99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--feeds", type=int, default=10_000, help="watched feeds")
    parser.add_argument("--budget", type=int, default=200, help="probes per chronon")
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--shaped-share", type=float, default=0.4, help="share of feeds with a cycle")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if "shape" not in inspect.signature(CaptureExplore.pick).parameters:  # a version before cycles
        p50, p99 = run(args.feeds, args.budget, args.ticks, 0.0, None, args.seed)
        print(f"mean rates only: pick p50 {p50:.1f} ms  p99 {p99:.1f} ms")
        return
    try:
        from proxy.core.rates import pooled_rates  # noqa: F401  a version with the pooled rates
    except ImportError:
        pooled = False
    else:
        pooled = True
    for share in (0.0, args.shaped_share):
        for e in (1.0, 0.0):
            p50, p99 = run(args.feeds, args.budget, args.ticks, share, e, args.seed)
            print(f"{100 * share:.0f}% shaped, e={e:g}: pick p50 {p50:.1f} ms  p99 {p99:.1f} ms")
        if pooled:
            p50, p99 = run(args.feeds, args.budget, args.ticks, share, 1.0, args.seed, service=True)
            print(f"{100 * share:.0f}% shaped, service (pooled rates): pick p50 {p50:.1f} ms  p99 {p99:.1f} ms")


if __name__ == "__main__":
    main()
