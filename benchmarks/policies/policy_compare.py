"""Online policies head to head on held-out seeds, without the optimum.

``policy_sweep.py`` measures shares of the exact optimum on seeds 1..10; this
script answers the cheaper question asked while designing a policy: does
policy A capture more than policy B, on how many seeds, at which settings?
It is how every "held-out seeds" figure in ``docs/policies.md`` is measured.

A point is a label of ``policy_sweep.POINTS`` (``baseline``, ``overwrite``,
``n=400,C=2,W=20``...), optionally followed by ``+name=value`` overrides of
:class:`proxy.sim.generate.GenParams` joined by ``/``: ``overwrite+budget=2``,
``baseline+lam=50/beta=1``.  Points are separated by ``;`` because labels
hold commas.  One more point, ``scattered``, is not the paper's generator:
the workload of ``bench_select.py``'s whole small simulations (n=1000,
K=1000, C=1, 2000 CEIs of rank 1..3 whose EIs, of width 0..10, start at
independent uniform chronons, so a CEI's EIs lie hundreds of chronons
apart).

Usage::

    .venv/bin/python benchmarks/policies/policy_compare.py --points "overwrite;n=400,C=2,W=20" \\
        --seeds 101-150 --policies mrsf-p,adm-edf

Prints, per point, each policy's total captured CEIs, its mean ratio to the
first policy's count per seed, and the seeds it won and lost against it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import fields, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "machinery"))
from bench_select import scattered_workload  # a sibling script, not a package
from policy_sweep import BASE, POINTS

from proxy.core.model import Workload
from proxy.sim.generate import GenParams, generate
from proxy.sim.run import simulate

SCATTERED = "scattered"


def point_workload(point: str, seed: int) -> Workload:
    return scattered_workload(seed) if point == SCATTERED else generate(point_params(point), seed)


def point_params(point: str) -> GenParams:
    """The generator parameters of ``label[+name=value/...]``; a clear error for anything else."""
    label, _, extra = point.partition("+")
    known = {lab: over for lab, _, over in POINTS}
    if label not in known:
        raise ValueError(f"unknown point {label!r}; known: {', '.join(known)}")
    params = replace(BASE, **known[label])  # type: ignore[arg-type]
    if not extra:
        return params
    types = {f.name: type(getattr(params, f.name)) for f in fields(GenParams)}
    over: dict[str, object] = {}
    for item in extra.split("/"):
        name, eq, value = item.partition("=")
        if not eq or name not in types:
            raise ValueError(f"bad override {item!r} in {point!r}: want name=value with name one of {', '.join(types)}")
        kind = types[name]
        try:
            if kind is bool:
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                over[name] = value.lower() in ("true", "1")
            else:
                over[name] = kind(value)
        except ValueError:
            raise ValueError(f"bad value in {item!r}: {name} wants a {kind.__name__}") from None
    return replace(params, **over)  # type: ignore[arg-type]


def seed_range(text: str) -> list[int]:
    lo, sep, hi = text.partition("-")
    seeds = list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    if not seeds:
        raise ValueError(f"empty seed range {text!r}")
    return seeds


def _job(args: tuple[str, int, str]) -> tuple[tuple[str, int, str], int]:
    point, seed, policy = args
    return args, simulate(point_workload(point, seed), policy).captured


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", default="baseline", help="';'-separated points (see the module docstring)")
    ap.add_argument("--seeds", default="101-120", help="FIRST-LAST (default 101-120, outside the sweep's 1-10)")
    ap.add_argument("--policies", default="mrsf-p,adm-edf", help="comma-separated; the first is the reference")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    points = [p for p in args.points.split(";") if p]
    try:
        for p in points:
            if p != SCATTERED:
                point_params(p)
        seeds = seed_range(args.seeds)
    except ValueError as exc:
        ap.error(str(exc))
    policies = [p for p in args.policies.split(",") if p]
    jobs = [(pt, s, pol) for pt in points for s in seeds for pol in policies]
    got: dict[tuple[str, int, str], int] = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for key, captured in pool.map(_job, jobs):
            got[key] = captured
    ref = policies[0]
    print(f"seeds {seeds[0]}..{seeds[-1]}; ratio and won/lost against {ref}")
    for pt in points:
        cells = []
        for pol in policies:
            mine = [got[(pt, s, pol)] for s in seeds]
            base = [got[(pt, s, ref)] for s in seeds]
            ratio = sum(a / b for a, b in zip(mine, base, strict=True) if b) / len(seeds)
            won = sum(a > b for a, b in zip(mine, base, strict=True))
            lost = sum(a < b for a, b in zip(mine, base, strict=True))
            cells.append(f"{pol} {sum(mine)} ({ratio:.4f}, won {won}, lost {lost})")
        print(f"{pt}: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
