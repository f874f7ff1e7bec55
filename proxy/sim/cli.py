"""``proxy sim …``: workloads, policies, the optimum and experiments.

Heavy modules (numpy, scipy, the engine) are imported inside the commands so
that ``proxy --help`` stays fast.  Every command that can run for more than a
moment shows a tqdm progress bar on a terminal (stderr), none in pipes.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from proxy.core.model import Workload
    from proxy.sim.generate import GenParams
    from proxy.sim.pull import PullOptions
    from proxy.sim.run import Result
    from proxy.sim.sweep import SweepRow

sim_app = typer.Typer(no_args_is_help=True)

# Defaults are the baseline of the main paper's Table 1.
Resources = Annotated[int, typer.Option("--resources", "-n", help="n: number of resources (feeds).")]
Profiles = Annotated[int, typer.Option("--profiles", "-m", help="m: number of profiles.")]
Chronons = Annotated[int, typer.Option("--chronons", "-K", help="K: chronons in the epoch.")]
BudgetOpt = Annotated[int, typer.Option("--budget", "-C", help="C: probes per chronon.")]
Lam = Annotated[float, typer.Option("--lam", help="λ: average updates per resource per epoch (Poisson).")]
Rank = Annotated[int, typer.Option("--rank", "-k", help="Maximum profile rank (EIs per CEI).")]
LifeOpt = Annotated[str, typer.Option("--life", help="EI length: 'window' (window(W)) or 'overwrite'.")]
Window = Annotated[int, typer.Option("--window", "-W", help="W: window(W) length in chronons.")]
Alpha = Annotated[float, typer.Option("--alpha", help="α: Zipf skew of resource popularity (0 = uniform).")]
Beta = Annotated[float, typer.Option("--beta", help="β: Zipf skew of profile ranks towards 1 (0 = uniform).")]
ExactRank = Annotated[bool, typer.Option("--exact-rank", help="Every profile has exactly rank k (Figure 7).")]
RevealOpt = Annotated[str, typer.Option("--reveal", help="'release': whole CEI known at its release; 'update': each EI at its start.")]
RateSigma = Annotated[float, typer.Option("--rate-sigma", help="Lognormal σ of per-resource rates (0 = all λ).")]


def _params(
    resources: int, profiles: int, chronons: int, budget: int, lam: float, rank: int, life: str,
    window: int, alpha: float, beta: float, exact_rank: bool, reveal: str, rate_sigma: float,
) -> GenParams:
    from proxy.sim.generate import GenParams, Life, Reveal

    try:
        life_v, reveal_v = Life(life), Reveal(reveal)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    params = GenParams(
        resources=resources, profiles=profiles, chronons=chronons, budget=budget, lam=lam,
        rank=rank, life=life_v, window=window, alpha=alpha, beta=beta, exact_rank=exact_rank,
        reveal=reveal_v, rate_sigma=rate_sigma,
    )
    try:
        params.check()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return params


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code=2)


def _parse_when(text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    from proxy.sim.traces import parse_timestamp

    ts = parse_timestamp(text)
    if ts is None:
        raise typer.BadParameter(f"{option}: {text!r} is not an ISO 8601 timestamp")
    return ts


@sim_app.command()
def gen(
    out: Annotated[Path, typer.Option("--out", "-o", help="Workload file to write (proxy-workload/1).")],
    seed: Annotated[int, typer.Option("--seed", help="Seed of the numpy Generator.")] = 0,
    resources: Resources = 1000,
    profiles: Profiles = 100,
    chronons: Chronons = 1000,
    budget: BudgetOpt = 1,
    lam: Lam = 20.0,
    rank: Rank = 3,
    life: LifeOpt = "window",
    window: Window = 10,
    alpha: Alpha = 0.0,
    beta: Beta = 0.0,
    exact_rank: ExactRank = False,
    reveal: RevealOpt = "release",
    rate_sigma: RateSigma = 0.0,
    trace: Annotated[Path | None, typer.Option("--trace", help="CSV 'resource,timestamp' whose updates replace the Poisson stage; n becomes its resource count.")] = None,
    trace_days: Annotated[float, typer.Option("--trace-days", help="Trace window length when --trace-start is not given.")] = 30.0,
    trace_start: Annotated[str | None, typer.Option("--trace-start", help="Trace window start (ISO 8601).")] = None,
    trace_end: Annotated[str | None, typer.Option("--trace-end", help="Trace window end (ISO 8601); default: after the latest timestamp.")] = None,
    trace_not_after: Annotated[str | None, typer.Option("--trace-not-after", help="Timestamps after this are future placeholders and skipped.")] = None,
) -> None:
    """Generate a workload in the main paper's setup (§4.1, Table 1) and write it."""
    from dataclasses import asdict, replace

    from proxy.sim.generate import generate
    from proxy.sim.traces import TraceError, load_trace
    from proxy.sim.workload_io import write_workload

    params = _params(resources, profiles, chronons, budget, lam, rank, life, window, alpha, beta,
                     exact_rank, reveal, rate_sigma)
    updates = None
    trace_meta: dict[str, object] = {}
    if trace is not None:
        try:
            tr = load_trace(
                trace, chronons, start=_parse_when(trace_start, "--trace-start"),
                end=_parse_when(trace_end, "--trace-end"), days=trace_days,
                not_after=_parse_when(trace_not_after, "--trace-not-after"),
            )
        except TraceError as exc:
            raise _fail(str(exc)) from None
        typer.echo(f"trace: {tr.stats.summary()}", err=True)
        params = replace(params, resources=len(tr.names))
        updates = tr.updates
        trace_meta = {"trace": str(trace), "trace_stats": asdict(tr.stats)}
    workload = generate(params, seed, updates=updates, updated_only=updates is not None)
    workload.meta.update(trace_meta)
    write_workload(workload, out)
    typer.echo(f"wrote {out}: {len(workload.ceis)} CEIs, {workload.total_eis} EIs, "
               f"n={workload.resources}, K={workload.chronons}")


@sim_app.command()
def run(
    workload_path: Annotated[Path, typer.Argument(metavar="WORKLOAD", help="Workload file.")],
    policy: Annotated[str, typer.Option("--policy", "-p", help="Policy name (see the spec), or optimal / lp-bound.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Result file to write (proxy-result/1).")] = None,
    time_limit: Annotated[float | None, typer.Option("--time-limit", help="Seconds for optimal / lp-bound.")] = None,
    max_variables: Annotated[int | None, typer.Option("--max-variables", help="optimal / lp-bound refuse models with more probe variables (default 2,000,000).")] = None,
    reveal: Annotated[str | None, typer.Option("--reveal", help="'pushed': update EIs known at their start, as if pinged (default); 'pull': only when a probe finds the update (sup / fbsup imply it).")] = None,
    background: Annotated[str, typer.Option("--background", help="Pull only: where the budget the policy leaves goes: greedy, wic, round-robin, sqrt, freshness, capture, capture-explore, none.")] = "greedy",
    rates: Annotated[str, typer.Option("--rates", help="Pull only: rate model of background probes and SUP: 'known' (true rates) or 'online' (learnt).")] = "known",
    planner: Annotated[str | None, typer.Option("--planner", help="Pull only: add SUP's or fbSUP's predicted EIs to the engine ('sup', 'fbsup').")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Pull only: seed of the sqrt background's draws.")] = 0,
    revisit_factor: Annotated[float, typer.Option("--revisit-factor", min=0.0, help="Pull only, capture-explore: no watched feed waits longer than this many round-robin cycles (feeds / budget, at least the window + 1) for a probe; 0: no bound.")] = 0.0,
    co_update: Annotated[bool, typer.Option("--co-update", help="Pull only, capture-explore: probe the likely partners of an update a probe found, as learnt online (issue 45; PROXY_DISCOVERY_COUPDATE).")] = False,
) -> None:
    """Run one policy over a workload; print completeness and write the full schedule."""
    from tqdm import tqdm

    from proxy.core.model import WorkloadError
    from proxy.sim._worker import run_killable
    from proxy.sim.pull import (
        PLANNERS,
        Background,
        PullOptions,
        Rates,
        update_eis,
        updates_from_meta,
    )
    from proxy.sim.run import OFFLINE
    from proxy.sim.workload_io import read_workload, write_result

    if policy not in OFFLINE and policy not in PLANNERS:
        from proxy.core.policies import policy_names

        if policy not in policy_names():
            raise _fail(f"unknown policy {policy!r}; valid: {', '.join([*policy_names(), *PLANNERS, *OFFLINE])}")
    mode = reveal or ("pull" if policy in PLANNERS else "pushed")
    if mode not in ("pushed", "pull"):
        raise _fail(f"--reveal must be 'pushed' or 'pull', got {mode!r}")
    if mode == "pushed" and policy in PLANNERS:
        raise _fail(f"{policy} is a pull-only planner: use --reveal pull (or leave --reveal out)")
    try:
        bg, rate_kind = Background(background), Rates(rates)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if planner is not None and planner not in PLANNERS:
        raise _fail(f"unknown planner {planner!r}; valid: {', '.join(PLANNERS)}")
    try:
        workload = read_workload(workload_path)
    except (WorkloadError, OSError) as exc:
        raise _fail(str(exc)) from None
    pull = None
    if mode == "pull":
        if update_eis(workload) == 0:
            typer.secho("warning: no EI of this workload is revealed at its start (an update EI); "
                        "pull-only changes nothing (generate with --reveal update)", err=True,
                        fg=typer.colors.YELLOW)
        chosen_bg = bg if policy not in PLANNERS or background != "greedy" else Background.NONE
        if 0 < revisit_factor < 1:
            raise _fail(f"--revisit-factor must be 0 (no bound) or at least 1, got {revisit_factor:g}")
        pull = PullOptions(background=chosen_bg, rates=rate_kind, planner=planner, seed=seed,
                           updates=updates_from_meta(workload), revisit_factor=revisit_factor,
                           co_update=co_update)
    from proxy.core.optimum import OptimumTooLargeError

    if policy in OFFLINE:
        # Fail here, named by the entry point, not in the worker (where it would only be re-raised).
        import scipy.optimize  # noqa: F401

    # A bar on a terminal; elsewhere (logs, pipes) a line per tenth of the epoch instead.
    lines = not sys.stderr.isatty()
    step = max(1, workload.chronons // 10)
    done = 0
    with tqdm(total=workload.chronons, desc=policy, unit="chronon", file=sys.stderr,
              disable=True if policy in OFFLINE else None) as bar:

        def on_chronons(n: int) -> None:
            nonlocal done
            before, done = done, done + n
            bar.update(n)
            if lines and (done // step > before // step or done == workload.chronons):
                print(f"run: {policy}: chronon {done}/{workload.chronons}", file=sys.stderr, flush=True)

        def on_started() -> None:
            if policy in OFFLINE:
                # HiGHS reports no progress we could draw; say what is happening instead.
                typer.echo(f"solving {policy} with HiGHS (time limit: {time_limit or 'none'})…", err=True)

        try:
            outcome = run_killable(_run_target, (workload, policy, time_limit, max_variables, mode, pull),
                                   on_chronons, name="run", on_started=on_started)
        except OptimumTooLargeError as exc:
            raise _fail(str(exc)) from None
    if outcome.interrupted:
        at = "during the solve" if policy in OFFLINE else f"at chronon {done}/{workload.chronons}"
        typer.echo(f"interrupted: {policy} stopped {at}; nothing written (a partial schedule "
                   "has no completeness)", err=True)
        raise typer.Exit(code=130)  # 128 + SIGINT, as a shell reports it
    result: Result = outcome.value
    engine_captured = result.extra.get("engine_captured")
    if engine_captured is not None and engine_captured != result.captured:
        # There is one engine; if it and the independent scorer disagree, one has a bug.
        typer.secho(f"warning: the engine counted {engine_captured} captured CEIs, the scorer "
                    f"{result.captured}; the result file carries the scorer's count",
                    err=True, fg=typer.colors.YELLOW)
    if out is not None:
        write_result(result.to_file(), out)
    line = (f"{policy}: captured {result.captured}/{result.total} "
            f"completeness {result.completeness:.4f} probes {result.probes} "
            f"runtime {result.runtime_s:.3f}s")
    if policy in OFFLINE:
        ex = result.extra
        line += f" status {ex['status']} bound {ex['bound']} gap {ex['gap']}"
    elif mode == "pull":
        ex = result.extra
        line += f" (pull: {ex['background_probes']} background probes"
        if "predicted_eis" in ex:
            line += f", {ex['predicted_eis']} predicted EIs"
        line += ")"
    typer.echo(line)
    if mode == "pull" and pull is not None:
        typer.echo(f"{policy}: detection delay p50/p90/p99 (chronons): {_update_delays(workload, pull, result)}")


def _update_delays(workload: Workload, pull: PullOptions, result: Result) -> str:
    """Chronons from each update of a watched feed to the first probe at or after it (issue 45), ``p50/p90/p99``."""
    from bisect import bisect_left

    from proxy.bench.metrics import quantiles
    from proxy.sim.pull import true_updates, watch_specs

    probed: dict[int, list[int]] = {}
    for t, r in result.schedule:
        probed.setdefault(r, []).append(t)
    delays: list[float] = []
    updates = true_updates(workload, pull)
    for spec in watch_specs(workload, pull):
        times = sorted(probed.get(spec.resource, []))
        for u in updates[spec.resource]:
            i = bisect_left(times, u)
            if i < len(times):
                delays.append(float(times[i] - u))
    q = quantiles(delays)
    return "/".join("-" if q[k] != q[k] else f"{q[k]:.0f}" for k in ("p50", "p90", "p99"))


def _run_target(send: Callable[[int], None], workload: Workload, policy: str, time_limit: float | None,
                max_variables: int | None, reveal: str, pull: PullOptions | None) -> Result:
    """One policy's run, in :func:`run_killable`'s child: chronons done are sent as they pass."""
    from proxy.sim.run import simulate

    return simulate(workload, policy, time_limit=time_limit, max_variables=max_variables,
                    progress=send, reveal=reveal, pull=pull)


@sim_app.command()
def score(
    workload_path: Annotated[Path, typer.Argument(metavar="WORKLOAD", help="Workload file.")],
    result_path: Annotated[Path, typer.Argument(metavar="RESULT", help="Result file to check.")],
) -> None:
    """Re-score a result from the workload and its schedule alone; exit 1 if anything is wrong."""
    from proxy.core.model import WorkloadError
    from proxy.sim.score import check_result
    from proxy.sim.workload_io import read_result, read_workload

    try:
        workload = read_workload(workload_path)
        result = read_result(result_path)
    except (WorkloadError, OSError) as exc:
        raise _fail(str(exc)) from None
    sc, problems = check_result(workload, result)
    typer.echo(f"re-scored: captured {sc.captured}/{sc.total} completeness {sc.completeness:.4f} "
               f"probes {sc.probes}")
    if problems:
        for p in problems:
            typer.secho(f"wrong: {p}", err=True, fg=typer.colors.RED)
        raise typer.Exit(code=1)
    typer.echo("ok: claims match and every chronon is within budget")


@sim_app.command()
def sweep(
    policy: Annotated[list[str], typer.Option("--policy", "-p", help="Online policy (repeatable).")] = ["mrsf-p", "m-edf-p", "s-edf-np", "wic"],  # noqa: B006  # Typer needs a literal default list
    seeds: Annotated[int, typer.Option("--seeds", help="Seeds 0..N-1 per parameter point.")] = 3,
    vary: Annotated[list[str] | None, typer.Option("--vary", help="NAME=V1,V2,… (repeatable; Cartesian product), e.g. lam=10,20,30.")] = None,
    optimal: Annotated[bool, typer.Option("--optimal", help="Also solve the exact optimum and report shares of it.")] = False,
    lp_bound: Annotated[bool, typer.Option("--lp-bound", help="Also report the LP upper bound.")] = False,
    time_limit: Annotated[float | None, typer.Option("--time-limit", help="Seconds per optimal / lp-bound solve.")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write one row per (point, seed, policy).")] = None,
    resources: Resources = 1000,
    profiles: Profiles = 100,
    chronons: Chronons = 1000,
    budget: BudgetOpt = 1,
    lam: Lam = 20.0,
    rank: Rank = 3,
    life: LifeOpt = "window",
    window: Window = 10,
    alpha: Alpha = 0.0,
    beta: Beta = 0.0,
    exact_rank: ExactRank = False,
    reveal: RevealOpt = "release",
    rate_sigma: RateSigma = 0.0,
) -> None:
    """Policies × seeds × generator parameters → a completeness table (and CSV)."""
    from tqdm import tqdm

    from proxy.core.policies import policy_names
    from proxy.sim._worker import run_killable
    from proxy.sim.sweep import format_table, parse_vary, points, summarise

    base = _params(resources, profiles, chronons, budget, lam, rank, life, window, alpha, beta,
                   exact_rank, reveal, rate_sigma)
    for p in policy:
        if p not in policy_names():
            raise _fail(f"unknown online policy {p!r}; valid: {', '.join(policy_names())} "
                        "(use --optimal / --lp-bound for the offline columns)")
    try:
        varied = parse_vary(vary or [])
    except ValueError as exc:
        raise _fail(str(exc)) from None
    runs = len(points(varied)) * seeds * (len(policy) + int(optimal) + int(lp_bound))
    # A bar on a terminal; elsewhere (logs, pipes) a line per finished run instead.
    lines = not sys.stderr.isatty()
    finished: list[SweepRow] = []
    with tqdm(total=runs, desc="sweep", unit="run", disable=None, file=sys.stderr) as bar:

        def on_row(row: SweepRow) -> None:
            finished.append(row)
            bar.update()
            if lines:
                where = " ".join(f"{n}={v}" for n, v in row.point)
                print(f"sweep: run {len(finished)}/{runs}: {where + ' ' if where else ''}seed {row.seed} "
                      f"{row.policy} completeness {row.completeness:.4f}", file=sys.stderr, flush=True)

        try:
            outcome = run_killable(_sweep_target, (base, varied, list(range(seeds)), policy, optimal,
                                                   lp_bound, time_limit), on_row, name="sweep")
        except ValueError as exc:
            raise _fail(str(exc)) from None
    rows: list[SweepRow] = finished if outcome.interrupted else outcome.value
    if rows:
        header, table = summarise(rows)
        typer.echo(format_table(header, table))
    if csv_out is not None and rows:
        _write_sweep_csv(rows, csv_out)
        typer.echo(f"wrote {csv_out} ({len(rows)} rows)")
    if outcome.interrupted:
        kept = f"in {csv_out}" if csv_out is not None and rows else "in the table above" if rows else ""
        typer.echo(f"interrupted: kept {len(rows)} of {runs} finished runs {kept}".rstrip(), err=True)
        raise typer.Exit(code=130)  # 128 + SIGINT, as a shell reports it


def _sweep_target(send: Callable[[SweepRow], None], base: GenParams, varied: dict[str, list[object]],
                  seeds: list[int], policies: list[str], optimal: bool, lp_bound: bool,
                  time_limit: float | None) -> list[SweepRow]:
    """The sweep itself, in :func:`run_killable`'s child: each row is sent as it is made."""
    from proxy.sim.sweep import run_sweep

    return run_sweep(base, varied, seeds, policies, with_optimal=optimal, with_lp_bound=lp_bound,
                     time_limit=time_limit, on_row=send)


def _write_sweep_csv(rows: list[SweepRow], path: Path) -> None:
    names = list(dict.fromkeys(n for r in rows for n, _ in r.point))
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow([*names, "seed", "policy", "captured", "total", "completeness",
                    "share_of_optimum", "runtime_s", "status", "bound"])
        for r in rows:
            values = dict(r.point)
            w.writerow([*(values.get(n, "") for n in names), r.seed, r.policy, r.captured,
                        r.total, f"{r.completeness:.6f}",
                        "" if r.share_of_optimum is None else f"{r.share_of_optimum:.6f}",
                        f"{r.runtime_s:.6f}", r.status,
                        "" if r.bound is None else f"{r.bound:.6f}"])


@sim_app.command()
def experiments(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for <figure>.csv and <figure>.png.")],
    figure: Annotated[list[str] | None, typer.Option("--figure", "-f", help="Only these figures (repeatable): fig6, fig7, fig8a, fig8b, fig9, fig10a, fig10b, fig11; fig8 means both panels.")] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="Seeds 0..N-1 per point (the paper averages 10 runs, §4.1).")] = 10,
    optimal: Annotated[bool, typer.Option("--optimal", help="Add the exact optimum to every completeness figure (Figure 7 always has it).")] = False,
    time_limit: Annotated[float | None, typer.Option("--time-limit", help="Seconds per optimum solve (W=0 instances of rank >= 3 rarely finish; the bound is kept).")] = 30.0,
) -> None:
    """Reproduce the main paper's Figures 6-11 as CSV + PNG (Figure 8: runtime per EI).

    A progress bar on a terminal, a line per finished run otherwise. The first
    Ctrl-C stops at once (exit status 130) keeping the figures written and the
    finished runs of the current one in its CSV.
    """
    from tqdm import tqdm

    from proxy.sim._interruptible import run_experiments
    from proxy.sim.experiments import (
        FIGURES,
        RUNTIME_PANELS,
        figure_names,
        runs_of,
        runtime_runs_of,
    )

    if seeds < 1:
        raise _fail(f"--seeds must be >= 1, got {seeds}")
    wanted = [name for f in (figure or figure_names()) for name in (["fig8a", "fig8b"] if f == "fig8" else [f])]
    unknown = [f for f in wanted if f not in figure_names()]
    if unknown:
        raise _fail(f"unknown figure {unknown[0]!r}; valid: {', '.join(figure_names())}, fig8")
    figs = [f for f in FIGURES if f.name in wanted]
    panels = [p for p in RUNTIME_PANELS if p.name in wanted]
    total = sum(runs_of(f, seeds, optimal) for f in figs) + sum(runtime_runs_of(p, seeds) for p in panels)
    names = [name for name in figure_names() if name in wanted]
    # A bar on a terminal; elsewhere (logs, pipes) a line per finished run instead.
    lines = not sys.stderr.isatty()
    done = 0
    with tqdm(total=total, desc="experiments", unit="run", disable=None, file=sys.stderr) as bar:

        def on_row(name: str, row: object) -> None:
            nonlocal done
            done += 1
            bar.update()
            if lines:
                policy = getattr(row, "policy", None) or (row.get("policy") if isinstance(row, dict) else "")
                seed = getattr(row, "seed", None) if not isinstance(row, dict) else row.get("seed")
                print(f"experiments: run {done}/{total}: {name} {policy} seed {seed}", file=sys.stderr,
                      flush=True)

        def on_written(name: str, csv_path: Path, png_path: Path) -> None:
            tqdm.write(f"{name}: wrote {csv_path} and {png_path}", file=sys.stderr)

        try:
            outcome = run_experiments(names, out, list(range(seeds)), optimal=optimal,
                                      time_limit=time_limit, on_row=on_row, on_written=on_written)
        except RuntimeError as exc:
            raise _fail(str(exc)) from None
    if outcome.interrupted is not None:
        kept = ", ".join(name for name, _, _ in outcome.written) or "no figure"
        partial = (f"{outcome.interrupted}: {outcome.partial_rows} finished runs in {outcome.partial_csv} "
                   "(no PNG)" if outcome.partial_csv is not None else f"{outcome.interrupted}: no run finished")
        typer.echo(f"interrupted: kept {kept} whole; {partial}", err=True)
        raise typer.Exit(code=130)  # 128 + SIGINT, as a shell reports it
    typer.echo(f"wrote {len(figs) + len(panels)} figures into {out}")


@sim_app.command("synth-trace")
def synth_trace(
    out: Annotated[Path, typer.Option("--out", "-o", help="CSV to write (feed_id,timestamp_utc_iso, as the real trace).")],
    feeds: Annotated[int, typer.Option("--feeds", help="Number of feeds (paper 002's Synthetic Data 2: 792).")] = 792,
    weeks: Annotated[float, typer.Option("--weeks", help="Weeks covered, from Monday 2026-01-05.")] = 4.0,
    items_per_week: Annotated[float, typer.Option("--items-per-week", help="Mean items per feed and week.")] = 1.3,
    sigma: Annotated[float, typer.Option("--sigma", help="Lognormal σ of per-feed rates.")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the numpy Generator.")] = 0,
    clusters: Annotated[int, typer.Option(
        "--clusters", help="Co-update clusters: groups of feeds reacting to common events (0: none).")] = 0,
    cluster_share: Annotated[float, typer.Option(
        "--cluster-share", help="Share of the feeds in a cluster (with --clusters).")] = 0.5,
    cluster_events: Annotated[float, typer.Option(
        "--cluster-events-per-week", help="Mean events per cluster and week (with --clusters).")] = 3.0,
    react_prob: Annotated[float, typer.Option(
        "--react-prob", help="Chance a cluster's feed publishes at one of its events (with --clusters).")] = 0.7,
    lag: Annotated[float, typer.Option(
        "--lag", help="Longest delay in minutes from an event to a reaction (with --clusters).")] = 10.0,
    regime_shift: Annotated[float, typer.Option(
        "--regime-shift", help="Share of the feeds whose rate changes once, for good (0: none).")] = 0.0,
    regime_factor: Annotated[float, typer.Option(
        "--regime-factor", help="How much a shifted feed's rate changes: times or divided by this.")] = 4.0,
) -> None:
    """Write paper 002's weekly-cycle synthetic trace ("Synthetic Data 2") as a trace CSV.

    With ``--clusters``, clusters of feeds also publish within ``--lag`` minutes of
    their cluster's common events (co-updates, issue 45); without, the trace is the
    same as before the option existed. With ``--regime-shift``, that share of the feeds
    change their rate once, by ``--regime-factor`` up or down (``proxy.sim.regimes``).
    """
    from proxy.sim.regimes import shift_regimes
    from proxy.sim.synthetic import CoUpdates, weekly_trace, write_trace_csv

    try:
        co = CoUpdates(clusters, cluster_share, cluster_events, react_prob, lag)
        trace = weekly_trace(feeds, seed, weeks=weeks, items_per_week=items_per_week, sigma=sigma, coupdates=co)
        trace, shifts = shift_regimes(trace, regime_shift, regime_factor, seed)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    rows = write_trace_csv(trace, out)
    extra = ""
    if trace.clusters:
        extra = f", {len(trace.clusters)} co-update clusters of {sum(map(len, trace.clusters))} feeds"
    if shifts:
        extra += f", {len(shifts)} feeds shifting regime"
    typer.echo(f"wrote {out}: {rows} items from {feeds} feeds over {weeks:g} weeks{extra}")
