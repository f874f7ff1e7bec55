"""Probe workers over NATS JetStream (issue 21), with real ``proxy serve --role worker`` processes.

Each test runs its own nats-server (free port, own store directory) and the
scheduler's side in-process (:class:`BrokerProber`, exactly what the leader's
chronon loop calls). Checked: a worker killed mid-probe leaves its job to be
delivered again and the result is applied once; the broker killed and
restarted loses no queued job and the workers reconnect by themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
from pathlib import Path

import httpx
import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType

from proxy.cluster import (
    BrokerProber,
    BrokerSettings,
    Job,
    JobResult,
    MessageError,
    ProbeWorker,
    decode_job,
    decode_result,
    encode_job,
    encode_result,
)
from proxy.cluster.broker import NoJetStreamError, PullConsumer, connect, ensure_streams
from proxy.errors import SettingsError
from proxy.farm import FeedFarm
from proxy.feeds import (
    AddressPolicy,
    Entry,
    FeedState,
    FetcherSettings,
    Gone,
    MemoryKnownEntries,
    NetworkError,
    NothingKnown,
    NotModified,
    Ok,
    ParseError,
    RateLimited,
    Redirected,
    Timeout,
    TooLarge,
)
from proxy.settings import load_settings
from proxy.store import upgrade_database
from tests.cluster_support import (
    NATS_SERVER,
    NatsServer,
    free_port,
    nats_server,
    require_nats_server,
    role_env,
    serve_role,
)
from tests.fault_proxy import FaultProxy
from tests.proc_support import kill, stop
from tests.test_e2e_support import eventually, parse_metrics

__all__ = ["nats_server"]  # the fixture, imported for pytest

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)
STATE = FeedState("http://127.0.0.1:1/f", '"v1"', "Wed, 25 Nov 2026 11:00:00 GMT", 0)
E1 = Entry("id-1", "Oil", "http://x/1", "sum", None, NOW, author="Ann", categories=("Energy", "Oil"))
E2 = Entry("id-2", None, None, None, "body", None)

RESULTS = [
    Ok(state=STATE, elapsed=0.01, entries=(E1, E2), new=(E1, E2), feed_title="T",
       parser="fast", warning=None, final_url="http://127.0.0.1:1/f"),
    NotModified(state=STATE, elapsed=0.002, not_before=NOW, moved_to="http://127.0.0.1:1/g"),
    Redirected(state=STATE, elapsed=0.1, location="http://l", hops=11, reason="loop"),
    Gone(state=STATE, elapsed=0.1),
    RateLimited(state=STATE, elapsed=0.1, status=429, retry_after=NOW, not_before=NOW),
    Timeout(state=STATE, elapsed=5.0, phase="read"),
    TooLarge(state=STATE, elapsed=0.3, limit=1000, declared=None),
    NetworkError(state=STATE, elapsed=0.1, reason="refused"),
    ParseError(state=STATE, elapsed=0.1, reason="not-a-feed", detail="<html>"),
]


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: r.outcome)
def test_every_outcome_crosses_the_broker_unchanged(result: object) -> None:
    data = encode_result(JobResult("s1.7", "w1", result))  # type: ignore[arg-type]
    back = decode_result(data, NothingKnown())
    assert back.id == "s1.7" and back.worker == "w1"
    assert back.result == result


def test_entries_of_a_worker_not_yet_upgraded_read_without_author_and_categories() -> None:
    data = encode_result(JobResult("s1.8", "w1", RESULTS[0]))  # type: ignore[arg-type]
    old = data.replace(b',"Ann",["Energy","Oil"]]', b"]")
    assert old != data
    back = decode_result(old, NothingKnown())
    (e1, _) = back.result.entries  # type: ignore[union-attr]
    assert (e1.author, e1.categories) == (None, ()) and e1.title == "Oil"


def test_new_entries_are_decided_by_the_scheduler_not_the_worker() -> None:
    ok = RESULTS[0]
    back = decode_result(encode_result(JobResult("j", "w", ok)), MemoryKnownEntries(["id-1"]))
    assert isinstance(back.result, Ok) and back.result.new == (E2,)


def test_a_job_carries_the_validators() -> None:
    job = Job("s1.1", STATE, NOW, 1234.5, "proxy.results.s1")
    assert decode_job(encode_job(job)) == job


@pytest.mark.parametrize(("data", "message"), [
    (b"\xff", "not JSON"),
    (b"[1]", "expected a JSON object"),
    (b'{"id": "j"}', "missing field 'reply'"),
    (b'{"id": "j", "reply": "r", "expires": 1, "now": "yesterday", "state": ["u", null, null, 0]}',
     "now: not an ISO 8601 time"),
    (b'{"id": "j", "reply": "r", "expires": 1, "now": "2026-01-01T00:00:00", "state": []}',
     "now: needs a UTC offset"),
    (b'{"id": "j", "reply": "r", "expires": 1, "now": "2026-01-01T00:00:00+00:00", "state": [1]}',
     "state: expected"),
])
def test_a_malformed_job_is_refused_naming_the_field(data: bytes, message: str) -> None:
    with pytest.raises(MessageError, match=message):
        decode_job(data)


def test_a_result_of_an_unknown_outcome_is_refused() -> None:
    data = (b'{"id": "j", "worker": "w", "outcome": "teleported", "state": ["u", null, null, 0],'
            b' "elapsed": 0, "fields": {}}')
    with pytest.raises(MessageError, match="unknown probe outcome 'teleported'"):
        decode_result(data, NothingKnown())


# ---------------------------------------------------------------------- real processes

def _prober(server: NatsServer, **kw: float) -> BrokerProber:
    settings = BrokerSettings(server.url, job_timeout=kw.get("job_timeout", 90.0),
                              per_host_concurrency=50, per_host_min_delay=0.0)
    return BrokerProber(settings, AddressPolicy(allow_private_networks=True))


async def _metrics(port: int) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=5) as c:
        return parse_metrics((await c.get(f"http://127.0.0.1:{port}/metrics")).text)


async def _worker_env(tmp_path: Path, broker_url: str, **extra: str) -> dict[str, str]:
    """A worker's environment, its heartbeats going to a migrated SQLite file."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'proxy.sqlite3'}"
    await upgrade_database(url)
    return role_env(url, broker_url, **extra)


async def _worker_ready(port: int) -> None:
    async def check() -> bool:
        try:
            async with httpx.AsyncClient(timeout=2) as c:
                return (await c.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
        except httpx.TransportError:
            return False

    await eventually(check, within=30, what=f"worker on {port} ready")


@pytest.mark.slow
async def test_a_worker_killed_mid_probe_leaves_its_job_to_another_and_it_counts_once(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    env = await _worker_env(tmp_path, nats_server.url, PROXY_BROKER_ACK_WAIT_SECONDS="2")
    port_a, port_b = free_port(), free_port()
    async with FeedFarm(["slow", "fine"], prefill=3) as farm, _prober(nats_server) as prober:
        farm.set_fault("slow", "timeout", seconds=3600)  # worker A hangs in this probe
        async with serve_role("worker", env, port_a, tmp_path / "a.log") as worker_a:
            await _worker_ready(port_a)
            probe = asyncio.create_task(prober.probe(FeedState(farm.url("slow")), NothingKnown(),
                                                     now=NOW))

            async def a_is_probing() -> bool:
                return farm.stats("slow").requests >= 1

            await eventually(a_is_probing, within=30, what="worker A probing the slow feed")
            await kill(worker_a)  # mid-probe: the job is never acknowledged
        farm.clear_fault("slow")
        async with serve_role("worker", env, port_b, tmp_path / "b.log"):
            await _worker_ready(port_b)
            result = await asyncio.wait_for(probe, 60)
            assert isinstance(result, Ok), result
            assert [e.title for e in result.entries] and result.state.url == farm.url("slow")
            # Another job goes through the same worker normally: nothing stuck behind the first.
            fine = await prober.probe(FeedState(farm.url("fine")), NothingKnown(), now=NOW)
            assert isinstance(fine, Ok)
            metrics = await _metrics(port_b)
    assert farm.stats("slow").requests == 2  # probed by A (killed), then by B
    assert prober.results == 2 and prober.duplicates == 0  # each job applied exactly once
    assert metrics["proxy_worker_jobs_redelivered_total"] == 1.0
    assert metrics['proxy_worker_jobs_total{result="probed"}'] == 2.0


@pytest.mark.slow
async def test_the_broker_restarted_loses_no_job_and_workers_reconnect(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    env = await _worker_env(tmp_path, nats_server.url, PROXY_BROKER_ACK_WAIT_SECONDS="5")
    feeds = [f"f{i}" for i in range(12)]
    port = free_port()
    async with FeedFarm(feeds, prefill=2) as farm, _prober(nats_server) as prober:
        async with serve_role("worker", env, port, tmp_path / "w.log"):
            await _worker_ready(port)
            first = await asyncio.gather(*(
                prober.probe(FeedState(farm.url(f)), NothingKnown(), now=NOW) for f in feeds[:4]))
            assert all(isinstance(r, Ok) for r in first)
        # No worker now: jobs wait in the stream. Then the broker crashes and comes back.
        queued = [asyncio.create_task(prober.probe(FeedState(farm.url(f)), NothingKnown(), now=NOW))
                  for f in feeds[4:8]]

        async def stored() -> bool:
            return prober.published >= 8

        await eventually(stored, within=20, what="4 jobs stored by the broker")
        await nats_server.restart()
        # Published while the broker was away or reconnecting: retried until it stores them.
        later = [asyncio.create_task(prober.probe(FeedState(farm.url(f)), NothingKnown(), now=NOW))
                 for f in feeds[8:]]
        async with serve_role("worker", env, port, tmp_path / "w2.log"):
            await _worker_ready(port)
            rest = await asyncio.wait_for(asyncio.gather(*queued, *later), 90)
            assert all(isinstance(r, Ok) for r in rest), rest
            await nats_server.restart()  # again, with a worker connected: it reconnects
            again = await asyncio.wait_for(asyncio.gather(*(
                prober.probe(FeedState(farm.url(f)), NothingKnown(), now=NOW) for f in feeds[:3])), 90)
            assert all(isinstance(r, Ok) for r in again), again
    assert prober.results == 15 and prober.timeouts == 0
    assert sum(farm.stats(f).requests for f in feeds) >= 15


@pytest.mark.slow
async def test_a_broker_back_without_its_store_gets_streams_and_consumers_made_again(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    # A broker restarted without its volume: no streams, no consumers. Before, the worker
    # fetched from a consumer that no longer existed and the scheduler published to no stream,
    # for ever; now both make what is missing and probing goes on.
    env = await _worker_env(tmp_path, nats_server.url)
    feeds = [f"f{i}" for i in range(6)]
    port = free_port()
    async with (FeedFarm(feeds, prefill=2) as farm, _prober(nats_server) as prober,
                serve_role("worker", env, port, tmp_path / "w.log")):
        await _worker_ready(port)
        first = await asyncio.gather(*(
            prober.probe(FeedState(farm.url(f)), NothingKnown(), now=NOW) for f in feeds[:3]))
        assert all(isinstance(r, Ok) for r in first), first
        await nats_server.restart(wipe=True)
        after = await asyncio.wait_for(asyncio.gather(*(
            prober.probe(FeedState(farm.url(f)), NothingKnown(), now=NOW) for f in feeds[3:])), 60)
        assert all(isinstance(r, Ok) for r in after), after
        metrics = await _metrics(port)
    assert metrics['proxy_worker_consumer_repairs_total{kind="recreated"}'] == 1.0
    assert metrics['proxy_worker_consumer_repairs_total{kind="resubscribed"}'] == 0.0
    assert prober.results_consumer is not None and prober.results_consumer.recreated == 1
    events = [json.loads(line) for line in (tmp_path / "w.log").read_text().splitlines()
              if line.startswith("{")]
    recreated = [e for e in events if e["event"] == "consumer_recreated"]
    assert [(e["consumer"], e["stream"]) for e in recreated] == [("proxy-workers", "PROXY_JOBS")]


async def test_a_consumer_deleted_under_a_running_worker_is_made_again(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    settings = BrokerSettings(nats_server.url, ack_wait=5)
    worker = ProbeWorker(settings, FetcherSettings(allow_private_networks=True), concurrency=4)
    task = asyncio.create_task(worker.run())
    try:
        async with FeedFarm(["a", "b"], prefill=1) as farm, _prober(nats_server) as prober:
            ok = await prober.probe(FeedState(farm.url("a")), NothingKnown(), now=NOW)
            assert isinstance(ok, Ok) and worker.connected
            nc = await nats.connect(nats_server.url)
            try:
                assert await nc.jetstream().delete_consumer("PROXY_JOBS", "proxy-workers")
            finally:
                await nc.close()
            again = await asyncio.wait_for(
                prober.probe(FeedState(farm.url("b")), NothingKnown(), now=NOW), 60)
            assert isinstance(again, Ok), again
        assert worker.consumer is not None and worker.consumer.recreated == 1
        assert worker.probed == 2
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_pull_subscription_gone_silent_is_made_afresh(nats_server: NatsServer) -> None:
    # The broker forgets this client's interest in the pull inbox while the client believes
    # it is subscribed (what nats-io/nats.py#504 reports after restarts): jobs wait, fetches
    # time out. The consumer notices the waiting jobs and subscribes again.
    nc = await connect(nats_server.url, "silent")
    try:
        consumer = PullConsumer(
            nc, "proxy.jobs", "proxy-workers", "PROXY_JOBS",
            lambda: ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=30), check_every=0.5)
        await consumer.open()
        assert consumer.ready and await consumer.fetch(1) == []
        sub = consumer._sub
        assert sub is not None
        await nc._send_command(f"UNSUB {sub._sub._id}\r\n".encode())  # the fault, on the wire
        await nc.flush()
        await nc.jetstream().publish("proxy.jobs", b"job", stream="PROXY_JOBS")
        got: list[bytes] = []
        for _ in range(10):
            got += [m.data for m in await consumer.fetch(1)]
            if got:
                break
        assert got == [b"job"]
        assert consumer.resubscribed == 1 and consumer.recreated == 0
    finally:
        await nc.close()


@pytest.mark.slow
async def test_a_worker_started_before_the_broker_waits_and_logs_the_outage_once(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    env = await _worker_env(tmp_path, nats_server.url.replace("nats://", "nats://ops:s3cret@"))
    port = free_port()
    await nats_server.kill()
    async with (FeedFarm(["a", "b"], prefill=1) as farm,
                serve_role("worker", env, port, tmp_path / "w.log")):

        async def answers() -> bool:
            try:
                async with httpx.AsyncClient(timeout=2) as c:
                    r = await c.get(f"http://127.0.0.1:{port}/readyz")
            except httpx.TransportError:
                return False
            assert r.status_code == 503 and r.json()["broker"] is False
            return True

        await eventually(answers, within=30, what="the worker answering /readyz")
        await asyncio.sleep(2.0)  # ~8 connection attempts at 0.25 s
        await nats_server.start()
        await _worker_ready(port)
        async with _prober(nats_server) as prober:
            first = await prober.probe(FeedState(farm.url("a")), NothingKnown(), now=NOW)
            await nats_server.restart()
            second = await asyncio.wait_for(
                prober.probe(FeedState(farm.url("b")), NothingKnown(), now=NOW), 60)
    assert isinstance(first, Ok) and isinstance(second, Ok), (first, second)
    text = (tmp_path / "w.log").read_text()
    assert "Traceback" not in text and "s3cret" not in text
    events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    warned = [e["error"] for e in events if e["event"] == "broker_error" and e["level"] == "warning"]
    # Once for the broker not there at start (not once per attempt), once for its restart
    # (an EOF or a reset, as the kill falls).
    assert len(warned) == 2 and "refused" in warned[0] and "refused" not in warned[1], warned
    assert {e["url"] for e in events if "url" in e} == {nats_server.url}  # no credentials
    assert [e["event"] for e in events if e["event"].startswith("broker_")].count(
        "broker_disconnected") == 1
    back = [e for e in events if e["event"] == "broker_reconnected"]
    assert len(back) == 1 and back[0]["after_seconds"] < 30


async def test_a_broker_without_jetstream_is_named_not_waited_on_in_silence(tmp_path: Path) -> None:
    require_nats_server()
    assert NATS_SERVER is not None
    port = free_port()
    with (tmp_path / "nats.log").open("wb") as sink:
        server = await asyncio.create_subprocess_exec(  # no -js
            NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), stdout=sink, stderr=sink)
    try:
        url = f"nats://127.0.0.1:{port}"

        async def listening() -> bool:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return False
            writer.close()
            return True

        await eventually(listening, within=20, what="nats-server listening")
        # The scheduler refuses to start, naming the cause.
        prober = BrokerProber(BrokerSettings(url), AddressPolicy(allow_private_networks=True))
        with pytest.raises(NoJetStreamError, match=r"nats://127\.0\.0\.1:\d+ answers no JetStream "
                           r"request: start it with JetStream on \(nats-server -js"):
            await prober.__aenter__()
        await prober.aclose()
        # A worker keeps trying (the broker may be reconfigured) and is not ready meanwhile.
        worker = ProbeWorker(BrokerSettings(url), FetcherSettings(allow_private_networks=True))
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.sleep(1.5)
            assert not task.done() and not worker.connected
            assert worker.consumer is not None and not worker.consumer.ready
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await stop(server)  # SIGTERM, unless it has exited already


async def test_a_broker_connection_gone_silent_is_given_up_and_made_again(
    nats_server: NatsServer,
) -> None:
    # Behind a NAT or load balancer that forgot it, a connection closes nothing: it only goes
    # silent. The client's unanswered pings end it, and it reconnects.
    async with FaultProxy(("127.0.0.1", nats_server.port)) as hole:
        nc = await connect(f"nats://127.0.0.1:{hole.port}", "silent", ping_interval=1,
                           pings_unanswered=1)
        try:
            await nc.flush(timeout=5)
            hole.blackhole()

            async def reconnected() -> bool:
                return nc.stats["reconnects"] >= 1 and nc.is_connected

            await eventually(reconnected, within=20, what="the silent connection replaced")
            await nc.flush(timeout=5)  # answered, over the new connection
            assert hole.accepted == 2
        finally:
            await nc.close()


async def test_jobs_older_than_an_hour_are_dropped_by_the_broker_even_on_an_old_stream(
    nats_server: NatsServer,
) -> None:
    # With no worker running for days, jobs (each useless after its minute) would pile up on
    # the broker's disk for ever. A stream made by an earlier version, without the limit,
    # gets it from the next process that starts.
    nc = await connect(nats_server.url, "streams")
    try:
        js = nc.jetstream()
        await js.add_stream(name="PROXY_JOBS", subjects=["proxy.jobs"],
                            retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.FILE)
        assert (await js.stream_info("PROXY_JOBS")).config.max_age in (None, 0)
        await ensure_streams(js)
        ages = {name: (await js.stream_info(name)).config.max_age
                for name in ("PROXY_JOBS", "PROXY_RESULTS")}
        assert ages == {"PROXY_JOBS": 3600.0, "PROXY_RESULTS": 3600.0}
        await ensure_streams(js)  # nothing left to change
    finally:
        await nc.close()


def test_a_job_timeout_past_the_brokers_limit_is_refused() -> None:
    with pytest.raises(SettingsError, match="PROXY_BROKER_JOB_TIMEOUT_SECONDS"):
        load_settings(broker_job_timeout_seconds=7200)


async def test_a_probe_the_broker_never_took_is_not_held_against_the_feed(
    nats_server: NatsServer,
) -> None:
    settings = BrokerSettings(nats_server.url, job_timeout=1.5)
    async with BrokerProber(settings, AddressPolicy(allow_private_networks=True)) as prober:
        await nats_server.kill()
        result = await prober.probe(
            FeedState("http://127.0.0.1:1/f", None, None, 2), NothingKnown(), now=NOW)
    assert isinstance(result, NetworkError), result
    assert result.reason == "broker unreachable: the job was not queued"
    assert result.state.consecutive_errors == 2  # as it was: the feed did nothing wrong
    assert prober.published == 0
