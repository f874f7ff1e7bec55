"""Policies × seeds × generator parameters, with the optimum as a yardstick.

One row per (parameter point, seed, policy).  The offline columns are rows
too: ``optimal`` (its proven or best-known completeness, with its status) and
``lp-bound`` (the LP upper bound as a completeness, not a schedule).  Each
online row carries its completeness as a share of the same workload's optimum
when that was computed.

Not here: printing and CSV (``proxy.sim.cli``) or plotting (``experiments``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace

from proxy.sim.generate import GenParams, Life, Reveal, generate
from proxy.sim.run import simulate

_FIELD_TYPES: dict[str, type] = {
    "resources": int, "profiles": int, "chronons": int, "budget": int, "lam": float, "rank": int,
    "life": Life, "window": int, "alpha": float, "beta": float, "exact_rank": bool,
    "reveal": Reveal, "rate_sigma": float,
}


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One policy on one generated workload."""

    point: tuple[tuple[str, object], ...]  # the varied parameters and their values
    seed: int
    policy: str
    captured: int
    total: int
    completeness: float
    runtime_s: float
    share_of_optimum: float | None = None
    status: str = ""
    bound: float | None = None  # offline rows: proven upper bound, as a completeness


def parse_vary(specs: Sequence[str]) -> dict[str, list[object]]:
    """``["lam=10,20", "life=window,overwrite"]`` → typed value lists; errors name the spec."""
    out: dict[str, list[object]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not values.strip():
            raise ValueError(f"--vary {spec!r}: expected NAME=V1,V2,…")
        if name not in _FIELD_TYPES:
            raise ValueError(f"--vary {spec!r}: unknown parameter {name!r} (one of {', '.join(_FIELD_TYPES)})")
        kind = _FIELD_TYPES[name]
        parsed: list[object] = []
        for raw in values.split(","):
            raw = raw.strip()
            try:
                if kind is bool:
                    if raw.lower() not in ("true", "false", "1", "0"):
                        raise ValueError(raw)
                    parsed.append(raw.lower() in ("true", "1"))
                else:
                    parsed.append(kind(raw))
            except ValueError:
                raise ValueError(f"--vary {spec!r}: {raw!r} is not a valid {name}") from None
        out[name] = parsed
    return out


def points(vary: Mapping[str, Sequence[object]]) -> list[tuple[tuple[str, object], ...]]:
    """The Cartesian product of the varied values, in the order given."""
    names = list(vary)
    return [tuple(zip(names, combo, strict=True)) for combo in itertools.product(*(vary[n] for n in names))]


def run_sweep(
    base: GenParams,
    vary: Mapping[str, Sequence[object]],
    seeds: Sequence[int],
    policies: Sequence[str],
    *,
    with_optimal: bool = False,
    with_lp_bound: bool = False,
    time_limit: float | None = None,
    on_run: Callable[[], None] | None = None,
    on_row: Callable[[SweepRow], None] | None = None,
) -> list[SweepRow]:
    """Generate each workload once and run every policy on it.

    ``on_run`` is called after every run, ``on_row`` with each row as it is
    made (a caller that may be interrupted keeps what is done from them).
    """
    known = {f.name for f in fields(GenParams)}
    rows: list[SweepRow] = []
    for point in points(vary):
        assert all(name in known for name, _ in point)
        params = replace(base, **dict(point))  # type: ignore[arg-type]
        for seed in seeds:
            workload = generate(params, seed)
            opt_captured: int | None = None
            offline: list[SweepRow] = []
            if with_optimal:
                res = simulate(workload, "optimal", time_limit=time_limit)
                opt_captured = res.captured
                opt_bound = float(res.extra.get("bound", res.captured))  # type: ignore[arg-type]
                offline.append(SweepRow(point, seed, "optimal", res.captured, res.total,
                                        res.completeness, res.runtime_s, 1.0 if res.total else None,
                                        str(res.extra.get("status", "")),
                                        opt_bound / res.total if res.total else None))
                if on_row:
                    on_row(offline[-1])
                if on_run:
                    on_run()
            if with_lp_bound:
                res = simulate(workload, "lp-bound", time_limit=time_limit)
                bound = float(res.extra.get("bound", 0.0))  # type: ignore[arg-type]
                offline.append(SweepRow(point, seed, "lp-bound", int(bound), res.total,
                                        bound / res.total if res.total else 0.0, res.runtime_s,
                                        None, str(res.extra.get("status", "")),
                                        bound / res.total if res.total else None))
                if on_row:
                    on_row(offline[-1])
                if on_run:
                    on_run()
            for policy in policies:
                res = simulate(workload, policy)
                share = res.captured / opt_captured if opt_captured else None
                rows.append(SweepRow(point, seed, policy, res.captured, res.total,
                                     res.completeness, res.runtime_s, share))
                if on_row:
                    on_row(rows[-1])
                if on_run:
                    on_run()
            rows.extend(offline)
    return rows


def summarise(rows: Sequence[SweepRow]) -> tuple[list[str], list[list[str]]]:
    """A table: one line per parameter point, mean completeness per policy over seeds.

    With the optimum computed, each online policy also gets a ``/opt`` column
    (mean share of the optimum's captured CEIs).
    """
    policies = list(dict.fromkeys(r.policy for r in rows))
    varied = list(dict.fromkeys(name for r in rows for name, _ in r.point))
    has_opt = any(r.share_of_optimum is not None and r.policy != "optimal" for r in rows)
    header = [*varied, "seeds", *policies]
    if has_opt:
        header += [f"{p}/opt" for p in policies if p not in ("optimal", "lp-bound")]
    lines: list[list[str]] = []
    for point in dict.fromkeys(r.point for r in rows):
        mine = [r for r in rows if r.point == point]
        line = [str(v) for _, v in point]
        line.append(str(len({r.seed for r in mine})))
        for p in policies:
            vals = [r.completeness for r in mine if r.policy == p]
            line.append(f"{sum(vals) / len(vals):.4f}" if vals else "")
        if has_opt:
            for p in policies:
                if p in ("optimal", "lp-bound"):
                    continue
                shares = [r.share_of_optimum for r in mine if r.policy == p and r.share_of_optimum is not None]
                line.append(f"{sum(shares) / len(shares):.3f}" if shares else "")
        lines.append(line)
    return header, lines


def format_table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]
    out = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    out.extend("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines)
    return "\n".join(out)
