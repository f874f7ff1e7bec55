"""Run long simulation work in a child process that the first Ctrl-C kills at once.

HiGHS (``optimal`` / ``lp-bound``) solves in C++ and does not see Python's
KeyboardInterrupt until it returns, up to ``--time-limit`` seconds later
(issue 23, item 9). So ``proxy sim run`` and ``proxy sim sweep`` hand their work
to a child that ignores SIGINT (a terminal sends it to the whole process
group); the child sends each finished step back over a queue, and the parent
draws the progress and, on the first Ctrl-C, kills the child and returns what
it has been told so far. ``proxy sim experiments`` has its own loop
(:mod:`proxy.sim._interruptible`) because it also writes files per figure.

Not here: what a command keeps or prints after an interrupt (the caller's).
"""

from __future__ import annotations

import multiprocessing
import pickle
import queue as queue_module
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class WorkerOutcome:
    """The work's return value, or ``interrupted`` when the first Ctrl-C killed it first."""

    value: Any
    interrupted: bool


def _child(messages: Any, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    # The parent decides what a Ctrl-C does; this process is killed, not interrupted.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        value = target(lambda step: messages.put(("step", step)), *args)
        messages.put(("done", value))
    except BaseException as exc:  # re-raised in the parent
        try:
            pickle.dumps(exc)
        except Exception:
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        messages.put(("error", exc))


def start_without_sigint(child: Any) -> None:
    """``child.start()`` with SIGINT ignored in the child from its first instruction.

    A spawned child imports for a while before its target runs and ignores SIGINT
    itself; a Ctrl-C in that while raised KeyboardInterrupt in the middle of its
    imports and printed a traceback. An ignored disposition survives exec, and Python
    keeps it at start-up, so the parent ignores SIGINT for the moment of the start.
    A Ctrl-C within that moment is lost (the user presses again); off the main thread
    signals cannot be set, and the child is started as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        child.start()
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        child.start()
    finally:
        signal.signal(signal.SIGINT, previous)


def run_killable(target: Callable[..., Any], args: tuple[Any, ...], on_step: Callable[[Any], None],
                 *, name: str, on_started: Callable[[], None] | None = None) -> WorkerOutcome:
    """Call ``target(send, *args)`` in a child; ``on_step`` gets each ``send(step)`` in the parent.

    ``target`` must be a module-level function (the child is spawned, not
    forked: the parent may run tqdm's monitor thread). An exception in the
    child is raised here; the first KeyboardInterrupt kills the child and
    returns ``WorkerOutcome(None, interrupted=True)``. ``on_started`` is called
    once that Ctrl-C is handled here (a place to say what is going on).
    """
    ctx = multiprocessing.get_context("spawn")
    messages = ctx.Queue()
    child = ctx.Process(target=_child, args=(messages, target, args), name=name, daemon=True)
    try:
        start_without_sigint(child)
        if on_started is not None:
            on_started()
        while True:
            try:
                message = messages.get(timeout=0.2)
            except queue_module.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"the {name} worker died (exit code {child.exitcode})") from None
                continue
            kind, payload = message
            if kind == "step":
                on_step(payload)
            elif kind == "error":
                raise payload
            else:
                return WorkerOutcome(payload, interrupted=False)
    except KeyboardInterrupt:
        return WorkerOutcome(None, interrupted=True)
    finally:
        if child.pid is not None and child.is_alive():
            child.kill()
        if child.pid is not None:
            child.join()
        messages.close()
