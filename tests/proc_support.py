"""Helpers for the tests that start child processes: signal one that may be gone, wait with a deadline.

A child can exit on its own at any moment: the service kills itself at a fault point
(``PROXY_TEST_FAULTS``), fails to start, or finishes its run. It can do so between the
test's look at it and the test's signal, or just as the test's wait times out. Signalling
it then raises ``ProcessLookupError`` (asyncio's transport is closed once the exit is
seen; a reaped process group is gone), which is not what any test is about (issue 48:
``test_kill_9_at_random_points_on_postgres`` failed so). So every kill, signal and wait
on a child goes through here:

``signal_process(proc, sig)``  send ``sig`` unless the process already exited.
``wait_exit(proc, within)``    its return code, or ``None`` if still running at the deadline.
``kill(proc)``                 SIGKILL (if still running) and wait, with a deadline.
``stop(proc, sig, grace)``     ``sig`` (SIGTERM), ``grace`` seconds to exit, then :func:`kill`.
``communicate(proc, within)``  ``proc.communicate()`` with a deadline; past it, kill and fail.
``signal_group(pgid, sig)``    ``os.killpg`` tolerating a group that is already gone.
``kill_group(proc)``           SIGKILL a ``start_new_session`` child's whole group and reap it.
``poll_until(check, within)``  a synchronous poll with a deadline (for ``subprocess`` tests).

None of them asserts how the process ended: a test that needs "killed by our SIGKILL"
checks the return code they give back.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

# SIGKILL cannot be caught or delayed by the child: only a loaded machine makes its exit slow.
KILL_WAIT = 30.0

Child = asyncio.subprocess.Process | subprocess.Popen[Any]


def _exited(proc: Child) -> bool:
    if isinstance(proc, subprocess.Popen):
        return proc.poll() is not None  # reaps it if it has exited meanwhile
    return proc.returncode is not None


def signal_process(proc: Child, sig: int) -> bool:
    """Send ``sig`` to ``proc``; ``False`` (and nothing sent) when it has already exited."""
    if _exited(proc):
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
        raise AssertionError(f"pid {proc.pid} still running {within} s after SIGKILL")
    return code


async def stop(proc: asyncio.subprocess.Process, sig: int = signal.SIGTERM, *,
               grace: float = 15.0) -> int:
    """Send ``sig`` (unless it already exited), wait up to ``grace`` s, then :func:`kill`."""
    signal_process(proc, sig)
    code = await wait_exit(proc, grace)
    return await kill(proc) if code is None else code


async def communicate(proc: asyncio.subprocess.Process, within: float = 120.0) -> tuple[bytes, bytes]:
    """``proc.communicate()``; past ``within`` s, :func:`kill` it and fail (not hang the suite)."""
    try:
        return await asyncio.wait_for(proc.communicate(), within)
    except TimeoutError:
        await kill(proc)
        raise AssertionError(f"pid {proc.pid} did not finish within {within} s") from None


def signal_group(pgid: int, sig: int) -> bool:
    """``os.killpg``; ``False`` when no process of the group is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def kill_group(proc: subprocess.Popen[Any], *, within: float = KILL_WAIT) -> int:
    """SIGKILL the group of ``proc`` (started with ``start_new_session=True``) and reap ``proc``.

    Signals the group even when ``proc`` itself has exited: its children may not have.
    """
    signal_group(proc.pid, signal.SIGKILL)
    return proc.wait(timeout=within)


def poll_until(check: Callable[[], object], *, within: float, every: float = 0.02) -> bool:
    """Call ``check`` until it returns something truthy (``True``) or ``within`` s pass (``False``)."""
    deadline = time.monotonic() + within
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)
