"""``proxy sim experiments`` in a worker process: progress as it goes, and the first Ctrl-C stops it.

HiGHS (the exact optimum) runs for up to ``--time-limit`` seconds in C++ and a
Ctrl-C during a solve was lost: the command ran on for minutes (issue 23). So
the figures are computed in a child process that ignores SIGINT (a terminal
sends it to the whole process group) and sends every finished run back over a
queue; the parent draws the progress, and on the first Ctrl-C kills the child
at once and keeps what is done: the figures already written, and the finished
runs of the current one as its CSV (no PNG: half a sweep is not the figure).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue as queue_module
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.sim._worker import start_without_sigint
from proxy.sim.experiments import (
    FIGURES,
    RUNTIME_PANELS,
    run_figure,
    run_runtime_panel,
    write_figure_csv,
    write_runtime_csv,
)


@dataclass
class ExperimentsOutcome:
    """What a run produced: figures written whole, and the one interrupted (if any)."""

    written: list[tuple[str, Path, Path]] = field(default_factory=list)
    interrupted: str | None = None  # the figure being computed at the Ctrl-C
    partial_rows: int = 0  # its finished runs, kept in its CSV
    partial_csv: Path | None = None


def _worker(messages: Any, names: Sequence[str], out: Path, seeds: Sequence[int], optimal: bool,
            time_limit: float | None) -> None:
    # The parent decides what a Ctrl-C does; this process is killed, not interrupted.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for name in names:
            messages.put(("start", name))
            fig = next((f for f in FIGURES if f.name == name), None)
            if fig is not None:
                csv_path, png_path = run_figure(
                    fig, out, seeds, with_optimal=optimal, time_limit=time_limit,
                    on_row=lambda row, n=name: messages.put(("row", n, row)))  # type: ignore[misc]
            else:
                panel = next(p for p in RUNTIME_PANELS if p.name == name)
                csv_path, png_path = run_runtime_panel(
                    panel, out, seeds, time_limit=time_limit,
                    on_row=lambda row, n=name: messages.put(("row", n, row)))  # type: ignore[misc]
            messages.put(("wrote", name, str(csv_path), str(png_path)))
        messages.put(("done",))
    except BaseException as exc:  # reported to the parent, which exits non-zero with it
        messages.put(("error", f"{type(exc).__name__}: {exc}"))


def run_experiments(
    names: Sequence[str],
    out: Path,
    seeds: Sequence[int],
    *,
    optimal: bool,
    time_limit: float | None,
    on_row: Callable[[str, Any], None],
    on_written: Callable[[str, Path, Path], None],
) -> ExperimentsOutcome:
    """Compute ``names`` (in order) in a child process; return early on the first Ctrl-C.

    ``on_row(figure, row)`` is called for every finished run, ``on_written`` for
    every figure written. Raises ``RuntimeError`` if the child fails.
    """
    ctx = multiprocessing.get_context("spawn")  # no fork of a process with tqdm's thread
    messages = ctx.Queue()
    child = ctx.Process(target=_worker, args=(messages, list(names), out, list(seeds), optimal, time_limit),
                        name="proxy-experiments", daemon=True)
    outcome = ExperimentsOutcome()
    rows: dict[str, list[Any]] = {}
    current: str | None = None
    start_without_sigint(child)
    try:
        while True:
            try:
                message = messages.get(timeout=0.2)
            except queue_module.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"the experiments worker died (exit code {child.exitcode})") from None
                continue
            kind = message[0]
            if kind == "start":
                current = message[1]
                rows[message[1]] = []
            elif kind == "row":
                rows[message[1]].append(message[2])
                on_row(message[1], message[2])
            elif kind == "wrote":
                written = (message[1], Path(message[2]), Path(message[3]))
                outcome.written.append(written)
                current = None
                on_written(*written)
            elif kind == "error":
                raise RuntimeError(f"the experiments failed: {message[1]}")
            else:
                break
    except KeyboardInterrupt:
        child.kill()
        child.join()
        if current is not None:
            outcome.interrupted = current
            done = rows.get(current, [])
            outcome.partial_rows = len(done)
            with contextlib.suppress(FileNotFoundError):
                (out / f"{current}.png").unlink()  # perhaps half-written when the child was killed
            if done:
                fig = next((f for f in FIGURES if f.name == current), None)
                if fig is not None:
                    outcome.partial_csv = write_figure_csv(fig, done, out)
                else:
                    panel = next(p for p in RUNTIME_PANELS if p.name == current)
                    outcome.partial_csv = write_runtime_csv(panel, done, out)
        return outcome
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        messages.close()
    return outcome
