"""Signal and wait on a benchmark's child processes, tolerating a child that already exited.

A ``proxy serve`` child can exit by itself at any moment: it fails to start, it is killed
by a fault point, or it finishes. ``Process.kill()`` or ``send_signal()`` on one whose exit
asyncio has already seen raises ``ProcessLookupError`` (its transport is closed), and that
error would end a benchmark run that measured nothing wrong (issue 48 found it in the
tests). The same four helpers as ``tests/proc_support.py``, kept here so that the
benchmarks do not import the test suite:

``signal_process(proc, sig)``  send ``sig`` unless the process already exited.
``wait_exit(proc, within)``    its return code, or ``None`` if still running at the deadline.
``kill(proc)``                 SIGKILL (if still running) and wait, with a deadline.
``stop(proc, sig, grace)``     ``sig`` (SIGTERM), ``grace`` seconds to exit, then :func:`kill`.

They do not say how the child ended: a caller that cares reads the return code they give.
Not a benchmark: the leading underscore keeps it out of the scripts the README lists.
"""

from __future__ import annotations

import asyncio
import signal

__all__ = ["kill", "signal_process", "stop", "wait_exit"]

# SIGKILL cannot be caught or delayed by the child: only a loaded machine makes its exit slow.
KILL_WAIT = 30.0


def signal_process(proc: asyncio.subprocess.Process, sig: int) -> bool:
    """Send ``sig`` to ``proc``; ``False`` (and nothing sent) when it has already exited."""
    if proc.returncode is not None:
        return False
    try:
        proc.send_signal(sig)
    except ProcessLookupError:  # exited between the look and the signal
        return False
    return True


async def wait_exit(proc: asyncio.subprocess.Process, within: float) -> int | None:
    """``proc``'s return code once it exits, or ``None`` if it still runs after ``within`` s."""
    try:
        return await asyncio.wait_for(proc.wait(), within)
    except TimeoutError:
        return proc.returncode  # it may have exited just as the deadline passed


async def kill(proc: asyncio.subprocess.Process, *, within: float = KILL_WAIT) -> int:
    """SIGKILL ``proc`` unless it already exited, and wait for it: its return code."""
    signal_process(proc, signal.SIGKILL)
    code = await wait_exit(proc, within)
    if code is None:
        raise RuntimeError(f"pid {proc.pid} still running {within} s after SIGKILL")
    return code


async def stop(proc: asyncio.subprocess.Process, sig: int = signal.SIGTERM, *,
               grace: float = 15.0) -> int:
    """Send ``sig`` (unless it already exited), wait up to ``grace`` s, then :func:`kill`."""
    signal_process(proc, sig)
    code = await wait_exit(proc, grace)
    return await kill(proc) if code is None else code
