"""The child-process helpers of ``tests/proc_support.py`` (issue 48): a child that has already
exited is no error to signal, kill or stop, and every wait has a deadline."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest

from tests.proc_support import (
    communicate,
    kill,
    kill_group,
    poll_until,
    signal_group,
    signal_process,
    stop,
    wait_exit,
)

SUICIDE = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"  # as at a fault point
SLEEP = "import time; time.sleep(60)"
STUBBORN = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"


async def _child(code: str, **kw: object) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-c", code, **kw)  # type: ignore[arg-type]


async def test_a_child_gone_by_itself_is_no_error_to_kill_stop_or_signal() -> None:
    proc = await _child(SUICIDE)
    assert await wait_exit(proc, 30) == -signal.SIGKILL
    # The failure: the test's wait timed out as the service killed itself, and a
    # bare proc.kill() on the closed transport raised ProcessLookupError.
    assert signal_process(proc, signal.SIGKILL) is False
    assert await kill(proc) == -signal.SIGKILL
    assert await stop(proc) == -signal.SIGKILL  # the code it ended with, not ours


async def test_wait_exit_gives_none_at_its_deadline_and_kill_ends_the_child() -> None:
    proc = await _child(SLEEP)
    started = time.monotonic()
    assert await wait_exit(proc, 0.2) is None
    assert time.monotonic() - started < 10
    assert await kill(proc) == -signal.SIGKILL


async def test_stop_signals_then_kills_a_child_that_ignores_it() -> None:
    polite = await _child(SLEEP)
    assert await stop(polite, signal.SIGTERM, grace=30) == -signal.SIGTERM
    stubborn = await _child(STUBBORN, stdout=asyncio.subprocess.PIPE)
    assert stubborn.stdout is not None
    await asyncio.wait_for(stubborn.stdout.readline(), 30)  # its handler is in place
    assert await stop(stubborn, signal.SIGTERM, grace=0.3) == -signal.SIGKILL


async def test_communicate_has_a_deadline_and_leaves_nothing_running() -> None:
    proc = await _child(SLEEP, stdout=asyncio.subprocess.PIPE)
    with pytest.raises(AssertionError, match=r"did not finish within 0\.2 s"):
        await communicate(proc, 0.2)
    assert proc.returncode == -signal.SIGKILL
    done = await _child("print('hi')", stdout=asyncio.subprocess.PIPE)
    out, _ = await communicate(done, 30)
    assert out == b"hi\n" and done.returncode == 0


def test_a_group_is_killed_whole_and_a_gone_group_is_no_error() -> None:
    # The leader starts a grandchild in its group and prints its pid.
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); print(p.pid, flush=True); p.wait()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    assert int(proc.stdout.readline()) > 0
    assert kill_group(proc) == -signal.SIGKILL
    proc.stdout.close()
    assert poll_until(lambda: not signal_group(proc.pid, 0), within=30)  # the grandchild too
    assert signal_group(proc.pid, signal.SIGKILL) is False
    assert signal_process(proc, signal.SIGTERM) is False


def test_poll_until_answers_at_once_or_at_its_deadline() -> None:
    assert poll_until(lambda: True, within=0) is True
    started = time.monotonic()
    assert poll_until(lambda: False, within=0.1, every=0.01) is False
    assert 0.1 <= time.monotonic() - started < 10
