"""The workload options ``proxy bench live`` and ``proxy bench peers`` share, declared once.

Both commands generate the same workloads from the same options (issue 47: the peers bench
"takes the live bench's workload options"), so the options are one table here and each
command gets them from :func:`with_workload_options`, which adds them to its signature and
hands it a :class:`WorkloadOptions`.  A command may change a default (``peers`` replays the
real trace unless told otherwise; ``live`` generates a Poisson workload), never a name, a
type or a help text.

Deliberately not here: the options that are not the workload's (budget, policy, timing):
each command declares its own, since their types differ (``live`` takes lists).  Nothing
heavy is imported at load time, so ``proxy --help`` stays fast.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from proxy.bench.live import BenchWorkload

DEFAULT_TRACE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "real_feeds_items.csv"
"""The real trace of ``../shared/traces``, beside the repository."""


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    """The workload a bench command runs, as its options gave it (defaults: ``live``'s)."""

    workload: Annotated[str, typer.Option(help="poisson (the paper's baseline-like) or trace.")] = "poisson"
    trace: Annotated[Path, typer.Option(help="CSV trace feed_id,timestamp for --workload trace.")] = DEFAULT_TRACE
    days: Annotated[float, typer.Option(help="Trace: length of the busiest window replayed.")] = 14.0
    feeds: Annotated[int, typer.Option(help="Poisson: number of feeds (resources).")] = 100
    lam: Annotated[float, typer.Option(help="Poisson: mean updates per feed over the run.")] = 15.0
    profiles: Annotated[int, typer.Option(help="AuctionWatch profiles (watch rules).")] = 100
    rank: Annotated[int, typer.Option(help="Largest profile rank (feeds per profile).")] = 3
    window: Annotated[int, typer.Option(help="EI window W in chronons (rule 'within').")] = 10
    chronons: Annotated[int, typer.Option(help="Number of chronons K.")] = 300
    history: Annotated[bool, typer.Option(
        help="Trace: first fetches show each feed's items before the window (as real documents do).")] = False
    seed: Annotated[int, typer.Option(help="Workload seed.")] = 1

    def build(self) -> BenchWorkload:
        """The workload these options generate; :class:`~proxy.bench.live.BenchError` if none."""
        from proxy.bench.live import BenchError, poisson_workload, trace_workload

        if self.workload == "poisson":
            return poisson_workload(resources=self.feeds, profiles=self.profiles, chronons=self.chronons,
                                    lam=self.lam, rank=self.rank, window=self.window, seed=self.seed)
        if self.workload == "trace":
            return trace_workload(self.trace, chronons=self.chronons, days=self.days, profiles=self.profiles,
                                  rank=self.rank, window=self.window, seed=self.seed, history=self.history)
        raise BenchError(f"--workload must be poisson or trace, got {self.workload!r}")


WORKLOAD_OPTION_NAMES = tuple(f.name for f in fields(WorkloadOptions))
"""The shared options' parameter names, in their order on both commands."""


def workload_parameters(**defaults: Any) -> list[inspect.Parameter]:
    """The shared options as keyword-only parameters, with ``defaults`` overriding some defaults."""
    unknown = set(defaults) - set(WORKLOAD_OPTION_NAMES)
    if unknown:
        raise TypeError(f"not workload options: {', '.join(sorted(unknown))}")
    hints = inspect.get_annotations(WorkloadOptions, eval_str=True)
    return [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[f.name],
                              default=defaults.get(f.name, f.default)) for f in fields(WorkloadOptions)]


def with_workload_options(**defaults: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the shared workload options; it receives them as ``wl: WorkloadOptions``.

    The command's own parameters follow the shared ones; ``defaults`` changes some defaults
    (``peers``: ``workload="trace"``).  Typer reads the command's ``__signature__``.
    """
    shared = workload_parameters(**defaults)

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "wl"]
        clash = {p.name for p in own} & set(WORKLOAD_OPTION_NAMES)
        if clash:
            raise TypeError(f"{command.__name__} declares shared workload options: {', '.join(sorted(clash))}")

        def run(**kwargs: Any) -> None:
            wl = WorkloadOptions(**{name: kwargs.pop(name) for name in WORKLOAD_OPTION_NAMES})
            command(wl=wl, **kwargs)

        run.__name__, run.__qualname__ = command.__name__, command.__qualname__
        run.__module__, run.__doc__ = command.__module__, command.__doc__
        params = [*shared, *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own)]
        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate
