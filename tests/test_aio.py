"""The event loop the proxy's processes run on (proxy.aio)."""

from __future__ import annotations

import asyncio

import pytest

from proxy import aio


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_by_default_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROXY_EVENT_LOOP", raising=False)
    assert aio.loop_name() == "uvloop"
    assert aio.run(_loop_module()).startswith("uvloop")


def test_the_standard_loop_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXY_EVENT_LOOP", " Asyncio ")
    assert aio.loop_name() == "asyncio"
    assert aio.loop_factory() is None
    assert aio.run(_loop_module()).startswith("asyncio")


def test_a_bad_choice_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXY_EVENT_LOOP", "tokio")
    with pytest.raises(ValueError, match="PROXY_EVENT_LOOP must be auto, uvloop or asyncio, not 'tokio'"):
        aio.loop_name()


def test_run_returns_the_coroutine_result_and_propagates_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROXY_EVENT_LOOP", raising=False)

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def fail() -> None:
        raise LookupError("nope")

    assert aio.run(answer()) == 42
    with pytest.raises(LookupError, match="nope"):
        aio.run(fail())


def test_farm_serve_refuses_an_unknown_event_loop() -> None:
    from typer.testing import CliRunner

    from proxy.cli import app

    result = CliRunner().invoke(
        app, ["farm", "serve", "--feeds", "1", "--duration", "0.1"], env={"PROXY_EVENT_LOOP": "tokio"}
    )
    assert result.exit_code == 2
    assert "PROXY_EVENT_LOOP must be auto, uvloop or asyncio" in result.output


async def _slow_to_stop(started: asyncio.Event) -> None:
    """A task that needs a moment to wind down once cancelled (a rollback, a send's timeout)."""
    started.set()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.05)
        raise


async def test_cancel_and_wait_ends_the_task_and_returns() -> None:
    started = asyncio.Event()
    inner = asyncio.create_task(_slow_to_stop(started))
    await started.wait()
    await aio.cancel_and_wait(inner)
    assert inner.cancelled()


async def test_cancel_and_wait_passes_on_a_cancellation_of_the_caller() -> None:
    started = asyncio.Event()
    inner = asyncio.create_task(_slow_to_stop(started))
    carried_on = False

    async def stopping() -> None:
        nonlocal carried_on
        await aio.cancel_and_wait(inner)
        carried_on = True  # what the old ``suppress(CancelledError)`` let happen

    outer = asyncio.create_task(stopping())
    await started.wait()
    await asyncio.sleep(0)  # outer is now waiting for inner to wind down
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert inner.cancelled() and not carried_on


async def test_a_task_that_swallows_its_cancel_is_cancelled_again() -> None:
    # As the lease keeper did when asyncio.wait_for (CPython 3.11) returned instead of raising:
    # the first CancelledError is lost and the task goes back to its loop.
    swallowed = 0

    async def keeper() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed += 1

    task = asyncio.create_task(keeper())
    await asyncio.sleep(0.01)
    await asyncio.wait_for(aio.cancel_and_wait(task), timeout=10)  # without a second cancel: for ever
    assert task.cancelled() and swallowed == 1
