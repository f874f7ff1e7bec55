"""A probe worker (``proxy serve --role worker``): takes jobs from the broker, probes, answers.

Per job, in this order: decode it (a malformed job is terminated, never
retried), drop it unprobed if it expired (the scheduler gave up on it), probe
the feed with the job's validators, publish the result to the job's reply
subject with ``Nats-Msg-Id`` = job id, and only then acknowledge the job. A
worker killed at any point before the acknowledgement leaves the job to be
delivered again to another worker after ``ack_wait``; a result published
twice is stored once by the broker and applied once by the scheduler.

The worker runs the ordinary :class:`~proxy.feeds.Fetcher` (SSRF guard, size
and time limits, parsing). Per-host politeness is the scheduler's (it is the
only dispatcher, so its limits are global); the worker adds none of its own.

What it does not do: touch the database (only its heartbeat does), decide what
is new (the scheduler does, against its store) or retry a probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import time

import nats.errors
import structlog
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from prometheus_client import CollectorRegistry, Counter, Gauge

from proxy.cluster.broker import (
    JOBS_STREAM,
    JOBS_SUBJECT,
    WORKERS_CONSUMER,
    BrokerSettings,
    PullConsumer,
    connect,
)
from proxy.cluster.codec import JobResult, MessageError, decode_job, encode_result
from proxy.feeds import Fetcher, FetcherSettings, NothingKnown

__all__ = ["ProbeWorker", "WorkerMetrics"]

log = structlog.get_logger("proxy.cluster")

_NOTHING = NothingKnown()


class WorkerMetrics:
    """What a worker exports at ``/metrics``."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.jobs = Counter("proxy_worker_jobs", "Jobs taken from the broker, by what became of "
                            "them (probed, expired, malformed).", ["result"], registry=r)
        self.redelivered = Counter(
            "proxy_worker_jobs_redelivered",
            "Jobs this worker got after another delivery was not acknowledged in time.",
            registry=r)
        self.inflight = Gauge("proxy_worker_inflight", "Jobs being probed now.", registry=r)
        self.connected = Gauge("proxy_worker_broker_connected", "1 while connected to the broker.",
                               registry=r)
        self.repairs = Counter(
            "proxy_worker_consumer_repairs",
            "Times the jobs consumer was made again because the broker had lost it (recreated) "
            "or subscribed afresh because jobs waited but none came (resubscribed).",
            ["kind"], registry=r)
        for result in ("probed", "expired", "malformed"):
            self.jobs.labels(result=result)
        for kind in ("recreated", "resubscribed"):
            self.repairs.labels(kind=kind)


class ProbeWorker:
    """Probes jobs ``concurrency`` at a time until cancelled (:meth:`run`)."""

    def __init__(self, broker: BrokerSettings, fetcher: FetcherSettings, *, concurrency: int = 64,
                 metrics: WorkerMetrics | None = None) -> None:
        self.broker = broker
        # The scheduler holds the per-host limits for all workers; a second, per-worker copy
        # would only slow a host down by the number of workers.
        self.fetcher_settings = dataclasses.replace(
            fetcher, per_host_concurrency=max(concurrency, 1), per_host_min_delay=0.0)
        self.concurrency = concurrency
        self.metrics = metrics or WorkerMetrics()
        self.id = f"{socket.gethostname()}:{os.getpid()}"
        self.probed = 0
        self._nc: NATS | None = None
        self.consumer: PullConsumer | None = None
        self._free = asyncio.Semaphore(concurrency)

    @property
    def connected(self) -> bool:
        """Connected to the broker and subscribed to the jobs (what /readyz reports)."""
        return (self._nc is not None and self._nc.is_connected and self.consumer is not None
                and self.consumer.ready)

    async def run(self) -> None:
        """Take and probe jobs until cancelled. A broker that is not up yet is waited for
        (the client retries for ever); once connected, the client reconnects by itself and
        :class:`~proxy.cluster.broker.PullConsumer` repairs what the broker forgot."""
        nc = self._nc = await connect(self.broker.url, f"proxy-worker-{self.id}")
        tasks: set[asyncio.Task[None]] = set()
        try:
            js = nc.jetstream()
            self.consumer = PullConsumer(
                nc, JOBS_SUBJECT, WORKERS_CONSUMER, JOBS_STREAM,
                lambda: ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                       ack_wait=self.broker.ack_wait, max_ack_pending=-1),
                on_repair=lambda kind: self.metrics.repairs.labels(kind=kind).inc())
            log.info("worker_started", worker=self.id, concurrency=self.concurrency)
            async with Fetcher(self.fetcher_settings) as fetcher:
                while True:
                    self.metrics.connected.set(1 if nc.is_connected else 0)
                    await self._free.acquire()
                    free = 1
                    while free < self.concurrency and not self._free.locked():
                        await self._free.acquire()
                        free += 1
                    msgs = await self.consumer.fetch(free)
                    for _ in range(free - len(msgs)):
                        self._free.release()
                    for msg in msgs:
                        task = asyncio.create_task(self._handle(js, fetcher, msg))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
        finally:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await nc.close()

    async def _handle(self, js: JetStreamContext, fetcher: Fetcher, msg: Msg) -> None:
        m = self.metrics
        m.inflight.inc()
        try:
            try:
                job = decode_job(msg.data)
            except MessageError as exc:
                m.jobs.labels(result="malformed").inc()
                log.error("bad_job", error=str(exc))
                with contextlib.suppress(nats.errors.Error, TimeoutError):
                    await msg.term()
                return
            if msg.metadata.num_delivered > 1:
                m.redelivered.inc()
            if time.time() >= job.expires:
                m.jobs.labels(result="expired").inc()
                log.info("job_expired", job=job.id)
                await self._ack(msg)
                return
            result = await fetcher.probe(job.state, _NOTHING, now=job.now)
            data = encode_result(JobResult(job.id, self.id, result))
            # The result first, the acknowledgement after: dying in between means a
            # redelivery and a second result with the same Nats-Msg-Id (stored once).
            while True:
                try:
                    await js.publish(job.reply, data, timeout=2.0,
                                     headers={"Nats-Msg-Id": job.id})
                    break
                except (nats.errors.Error, TimeoutError) as exc:
                    if time.time() >= job.expires:
                        log.error("result_not_published", job=job.id, error=repr(exc))
                        return  # not acked: the broker redelivers it, then it is dropped expired
                    await asyncio.sleep(0.25)
            self.probed += 1
            m.jobs.labels(result="probed").inc()
            log.debug("job_done", job=job.id, outcome=result.outcome)
            await self._ack(msg)
        finally:
            m.inflight.dec()
            self._free.release()

    @staticmethod
    async def _ack(msg: Msg) -> None:
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            # An ack lost to a broker restart: the job comes again, its result is a duplicate.
            await msg.ack()
