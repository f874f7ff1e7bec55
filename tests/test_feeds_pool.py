"""ProbePool: the fetcher's contract, kept across worker processes (farm on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.farm import FeedFarm, ManualClock
from proxy.feeds import (
    Entry,
    FeedState,
    FeedUrlRefusedError,
    FetcherSettings,
    Gone,
    HttpError,
    MemoryKnownEntries,
    NetworkError,
    NotModified,
    Ok,
    ParseError,
    RateLimited,
    Redirected,
    Refused,
    Timeout,
    TooLarge,
)
from proxy.feeds.pool import ProbePool, decode_result, encode_result
from tests.proc_support import kill
from tests.test_e2e_support import eventually

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
LOCAL = FetcherSettings(allow_private_networks=True, per_host_concurrency=8, per_host_min_delay=0,
                        total_timeout=5.0, max_body_bytes=1_000_000)


@pytest.fixture
async def farm() -> AsyncIterator[FeedFarm]:
    async with FeedFarm(feeds=12, window=20, prefill=20, clock=ManualClock(),
                        also_hosts=("127.0.0.2", "127.0.0.3")) as f:
        yield f


@pytest.fixture
async def pool() -> AsyncIterator[ProbePool]:
    async with ProbePool(LOCAL, processes=2) as p:
        yield p


async def test_full_then_not_modified_then_new_entry_through_the_pool(
    farm: FeedFarm, pool: ProbePool
) -> None:
    known = MemoryKnownEntries()
    first = await pool.probe(FeedState(farm.url("0")), known, now=NOW)
    assert isinstance(first, Ok)
    assert len(first.entries) == 20 and len(first.new) == 20 and first.parser == "fast"
    assert all(e.published is not None and e.published.tzinfo is not None for e in first.entries)
    known.add(e.identity for e in first.new)

    second = await pool.probe(first.state, known, now=NOW)
    assert isinstance(second, NotModified) and second.state == first.state
    assert second.not_before is None  # the farm says Cache-Control: max-age=0

    farm.publish("0", title="Oil prices rise")
    third = await pool.probe(second.state, known, now=NOW)
    assert isinstance(third, Ok)
    # New-entry detection runs in this process, with this process's KnownEntries.
    assert [e.title for e in third.new] == ["Oil prices rise"]
    assert farm.stats("0").not_modified == 1


async def test_entries_equal_those_of_an_in_process_fetcher(farm: FeedFarm, pool: ProbePool) -> None:
    from proxy.feeds import Fetcher

    async with Fetcher(LOCAL) as fetcher:
        here = await fetcher.probe(FeedState(farm.url("5")), MemoryKnownEntries(), now=NOW)
    there = await pool.probe(FeedState(farm.url("5")), MemoryKnownEntries(), now=NOW)
    assert isinstance(here, Ok) and isinstance(there, Ok)
    assert there.entries == here.entries and there.new == here.new
    assert (there.state, there.feed_title, there.not_before) == (here.state, here.feed_title, here.not_before)


@pytest.mark.parametrize(
    ("mode", "params", "expected"),
    [
        ("gone", {}, Gone),
        ("error500", {"status": 502}, HttpError),
        ("html", {}, ParseError),
        ("redirect_loop", {}, Redirected),
        ("rate_limited", {"retry_after": 30}, RateLimited),
        ("huge", {"size": 3_000_000}, TooLarge),
    ],
)
async def test_every_outcome_crosses_the_process_boundary(
    farm: FeedFarm, pool: ProbePool, mode: str, params: dict[str, object], expected: type
) -> None:
    farm.set_fault("3", mode, **params)
    result = await pool.probe(FeedState(farm.url("3"), consecutive_errors=2), MemoryKnownEntries(),
                              now=NOW)
    assert isinstance(result, expected), result
    if result.is_error and not isinstance(result, RateLimited):
        assert result.consecutive_errors == 3
        assert result.not_before == NOW + timedelta(seconds=LOCAL.backoff_base * 4)


async def test_refused_urls_are_refused_in_the_worker_and_at_registration(farm: FeedFarm) -> None:
    async with ProbePool(FetcherSettings(), processes=1) as strict:
        result = await strict.probe(FeedState(farm.url("1")), MemoryKnownEntries(), now=NOW)
        assert isinstance(result, Refused) and "loopback" in result.reason
        with pytest.raises(FeedUrlRefusedError, match="loopback"):
            await strict.check_url(farm.url("1"))


async def test_one_host_always_goes_to_one_worker(farm: FeedFarm, pool: ProbePool) -> None:
    """Per-host limits live in a worker: a host's feeds must all be probed by the same one."""
    urls = [farm.url(str(i)).replace("127.0.0.1", f"127.0.0.{1 + i % 3}") for i in range(12)]
    by_host: dict[str, set[int]] = {}
    for url in urls:
        host = url.split("/")[2]
        by_host.setdefault(host, set()).add(pool._worker_for(url).index)
        result = await pool.probe(FeedState(url), MemoryKnownEntries(), now=NOW)
        assert isinstance(result, Ok)
    assert all(len(workers) == 1 for workers in by_host.values())


async def _in_the_worker(farm: FeedFarm, feed_id: str) -> None:
    """Until the probe of ``feed_id`` reached the farm (a fixed 0.3 s was too short on a
    loaded machine: the kill or cancel then hit a probe not yet sent)."""

    async def arrived() -> bool:
        return farm.stats(feed_id).requests >= 1

    await eventually(arrived, within=30, what=f"the probe of feed {feed_id} at the farm")


async def test_a_worker_that_dies_fails_its_probes_and_is_replaced(farm: FeedFarm) -> None:
    farm.set_fault("7", "timeout", seconds=30)
    async with ProbePool(LOCAL, processes=1) as pool:
        [pid] = pool.worker_pids()
        hanging = asyncio.ensure_future(pool.probe(FeedState(farm.url("7")), MemoryKnownEntries(), now=NOW))
        await _in_the_worker(farm, "7")
        os.kill(pid, signal.SIGKILL)
        result = await asyncio.wait_for(hanging, 10)
        assert isinstance(result, NetworkError)
        assert "probe worker exited" in result.reason and result.consecutive_errors == 1
        # The next probe waits for the replacement and succeeds.
        again = await asyncio.wait_for(pool.probe(FeedState(farm.url("8")), MemoryKnownEntries(), now=NOW), 30)
        assert isinstance(again, Ok)
        assert pool.worker_pids() != [pid]


async def test_a_replacement_that_dies_too_is_replaced_again(farm: FeedFarm) -> None:
    async with ProbePool(LOCAL, processes=1) as pool:
        seen = set(pool.worker_pids())
        for _ in range(2):
            [pid] = pool.worker_pids()
            os.kill(pid, signal.SIGKILL)
            for _ in range(300):  # the replacement says hello
                await asyncio.sleep(0.05)
                if pool.worker_pids() and pool.worker_pids()[0] not in seen:
                    break
            seen.update(pool.worker_pids())
        assert len(seen) == 3
        ok = await asyncio.wait_for(pool.probe(FeedState(farm.url("4")), MemoryKnownEntries(), now=NOW), 30)
        assert isinstance(ok, Ok)


async def test_cancelling_a_probe_cancels_it_in_the_worker(farm: FeedFarm, pool: ProbePool) -> None:
    farm.set_fault("9", "timeout", seconds=30)
    task = asyncio.ensure_future(pool.probe(FeedState(farm.url("9")), MemoryKnownEntries(), now=NOW))
    await _in_the_worker(farm, "9")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all(not w.pending for w in pool._workers)
    # The pool goes on serving.
    ok = await pool.probe(FeedState(farm.url("2")), MemoryKnownEntries(), now=NOW)
    assert isinstance(ok, Ok)


async def test_misuse_raises_clear_errors(farm: FeedFarm) -> None:
    pool = ProbePool(LOCAL, processes=1)
    with pytest.raises(RuntimeError, match="outside 'async with ProbePool"):
        await pool.probe(FeedState(farm.url("0")), MemoryKnownEntries(), now=NOW)
    with pytest.raises(ValueError, match="at least 1 process"):
        ProbePool(LOCAL, processes=0)
    async with pool:
        with pytest.raises(ValueError, match="timezone-aware"):
            await pool.probe(FeedState(farm.url("0")), MemoryKnownEntries(), now=datetime(2026, 1, 1))
    await pool.aclose()  # idempotent
    with pytest.raises(RuntimeError):
        await pool.probe(FeedState(farm.url("0")), MemoryKnownEntries(), now=NOW)


# --------------------------------------------------------------------------- the codec

_text = st.one_of(st.none(), st.text(max_size=30))
_when = st.one_of(st.none(), st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1),
                                          timezones=st.just(UTC)))
_state = st.builds(FeedState, url=st.just("http://feeds.test/f"), etag=_text, last_modified=_text,
                   consecutive_errors=st.integers(0, 50))
_entry = st.builds(Entry, identity=st.text(min_size=1, max_size=20), title=_text, link=_text,
                   summary=_text, content=_text, published=_when)


@settings(max_examples=60, deadline=None)
@given(state=_state, entries=st.lists(_entry, max_size=6, unique_by=lambda e: e.identity),
       not_before=_when, moved=_text, known=st.sets(st.text(min_size=1, max_size=20), max_size=5))
def test_ok_and_not_modified_round_trip_exactly(
    state: FeedState, entries: list[Entry], not_before: datetime | None, moved: str | None, known: set[str]
) -> None:
    ok = Ok(state=state, elapsed=0.25, not_before=not_before, moved_to=moved, entries=tuple(entries),
            new=tuple(entries), feed_title="t", parser="fast", warning=None, final_url="http://x/")
    back = decode_result(encode_result(ok), MemoryKnownEntries(known | {e.identity for e in entries[:1]}))
    assert isinstance(back, Ok)
    assert back.entries == ok.entries and back.state == ok.state and back.not_before == ok.not_before
    assert back.new == tuple(e for e in entries[1:] if e.identity not in known)
    nm = NotModified(state=state, elapsed=0.5, not_before=not_before, moved_to=moved)
    assert decode_result(encode_result(nm), MemoryKnownEntries()) == nm


def test_rare_outcomes_travel_as_themselves() -> None:
    t = Timeout(state=FeedState("http://x/"), elapsed=1.0, not_before=NOW, phase="read")
    assert decode_result(encode_result(t), MemoryKnownEntries()) == t


_ORPHAN_SCRIPT = """
import asyncio, sys
from proxy.feeds import FetcherSettings
from proxy.feeds.pool import ProbePool

async def main():
    async with ProbePool(FetcherSettings(), processes=2) as pool:
        print(*pool.worker_pids(), flush=True)
        await asyncio.sleep(60)

if __name__ == "__main__":
    asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_workers_ignore_sigint_and_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
    """A SIGKILLed service leaves no probe workers behind: each exits when its link closes."""
    script = tmp_path / "orphans.py"
    script.write_text(_ORPHAN_SCRIPT, encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(sys.executable, str(script), stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    pids = [int(p) for p in line.split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    # ^C at a terminal reaches every process of the group: workers leave stopping to the parent.
    for pid in pids:
        os.kill(pid, signal.SIGINT)
    await asyncio.sleep(0.5)
    assert all(_alive(p) for p in pids)
    await kill(proc)
    for _ in range(100):
        if not any(_alive(p) for p in pids):
            break
        await asyncio.sleep(0.1)
    assert not any(_alive(p) for p in pids), "probe workers outlived their parent"
