"""Probe jobs over NATS JetStream (issue 21): the streams, and the scheduler's side of them.

Why JetStream: the NATS server already runs on this machine and in the compose
file, and nats-py is its maintained asyncio client. A work-queue stream gives
exactly what probe jobs need with no queue code of ours: a message stays until
a consumer acknowledges it, a job a worker took and did not acknowledge within
``ack_wait`` (the worker died mid-probe) is delivered again, the server keeps
messages on disk across its own restart, and ``Nats-Msg-Id`` de-duplicates
publishes within a window (a result published twice is stored once).

Streams and subjects:

* ``PROXY_JOBS`` (work queue) on ``proxy.jobs``; the workers share one durable
  pull consumer, ``proxy-workers``, so each job goes to one worker at a time.
* ``PROXY_RESULTS`` on ``proxy.results.<prober id>``: each scheduler process
  reads only its own subject through its own durable consumer, so a standby or
  a deposed leader never takes the current leader's results.

:class:`BrokerProber` is the scheduler's :class:`~proxy.feeds.Prober`: the
chronon loop calls ``probe()`` as it would call the in-process fetcher, and
gets the result a worker published. It applies the per-host limits
(concurrency, least delay between starts) before publishing: the leader is the
only process that dispatches, so they hold across all workers. A result is
applied once: the first for a job id resolves its probe, any later copy (a
redelivered job probed twice) is counted in :attr:`BrokerProber.duplicates`
and dropped. A job nobody answered within ``job_timeout`` ends as a
``NetworkError``, and workers drop it unprobed once it expired.

What it does not do: decide (the loop does), or store anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import nats
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, ConsumerInfo, RetentionPolicy, StorageType

from proxy.cluster.codec import Job, MessageError, decode_result, encode_job
from proxy.errors import SettingsError
from proxy.feeds import FeedState, KnownEntries, NetworkError, ProbeResult
from proxy.feeds.fetch import check_feed_url
from proxy.feeds.politeness import HostLimiter
from proxy.feeds.ssrf import AddressPolicy, SystemResolver, redact_url
from proxy.settings import BROKER_JOB_MAX_SECONDS

__all__ = ["JOBS_STREAM", "RESULTS_STREAM", "BrokerProber", "BrokerSettings", "NoJetStreamError",
           "PullConsumer", "connect", "ensure_streams"]

log = structlog.get_logger("proxy.cluster")

JOBS_STREAM = "PROXY_JOBS"
JOBS_SUBJECT = "proxy.jobs"
RESULTS_STREAM = "PROXY_RESULTS"
RESULTS_PREFIX = "proxy.results"
WORKERS_CONSUMER = "proxy-workers"
#: Publishes with the same Nats-Msg-Id within this window are stored once.
DUPLICATE_WINDOW_SECONDS = 600.0
#: Results nobody read (a scheduler that died) are dropped after this.
RESULTS_MAX_AGE_SECONDS = 3600.0
#: Jobs older than this are dropped by the broker itself: a job lives ``job_timeout`` (a
#: minute by default, at most this), so with no worker running for days the stream stays
#: bounded.
JOBS_MAX_AGE_SECONDS = BROKER_JOB_MAX_SECONDS


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """How jobs travel: ``job_timeout`` bounds a job's life (queueing, probe, result);
    ``ack_wait`` is how long a worker may hold a job before it is delivered again."""

    url: str
    job_timeout: float = 60.0
    ack_wait: float = 30.0
    per_host_concurrency: int = 2
    per_host_min_delay: float = 1.0


def check_broker_url(url: str) -> str:
    """The URL if it is a NATS one; :class:`SettingsError` naming ``PROXY_BROKER_URL`` otherwise."""
    scheme = urlsplit(url).scheme
    if scheme not in ("nats", "tls"):
        raise SettingsError(
            f"PROXY_BROKER_URL: {url!r}: this proxy speaks NATS JetStream (nats://host:4222); "
            f"scheme {scheme!r} is not supported")
    return url


#: A connection error of one kind is logged once per this many seconds while it repeats.
ERROR_LOG_SECONDS = 60.0


class _ConnectionLog:
    """What the client says about its connection, as a line per change of state.

    nats-py's own default logs a traceback at every attempt (about four a second
    while the broker is down, since it retries every 0.25 s); an operator needs
    "disconnected", the error once a minute while it lasts, and "reconnected after
    N s". URLs are logged without credentials.
    """

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = redact_url(url)
        self._logged: dict[str, float] = {}
        self._down_since: float | None = None
        self.client: NATS | None = None  # set once connected

    async def error(self, exc: Exception) -> None:
        kind = type(exc).__name__
        now = time.monotonic()
        if now - self._logged.get(kind, -ERROR_LOG_SECONDS) >= ERROR_LOG_SECONDS:
            self._logged[kind] = now
            log.warning("broker_error", client=self.name, url=self.url,
                        error=str(exc) or kind, repeats_logged_every=ERROR_LOG_SECONDS)
        else:
            log.debug("broker_error", client=self.name, error=str(exc) or kind)

    async def disconnected(self) -> None:
        if self.client is not None and self.client.is_closed:
            return  # closed by this process, not lost
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning("broker_disconnected", client=self.name, url=self.url)

    async def reconnected(self) -> None:
        down = time.monotonic() - self._down_since if self._down_since is not None else 0.0
        self._down_since = None
        self._logged.clear()
        log.info("broker_reconnected", client=self.name, url=self.url,
                 after_seconds=round(down, 2))


#: The client pings the broker this often and reconnects after :data:`PINGS_UNANSWERED`
#: pings without a pong: a connection a NAT or load balancer forgot closes nothing, and
#: nats-py's defaults (120 s, 2) would leave it silent for up to six minutes.
PING_SECONDS = 10
PINGS_UNANSWERED = 3


async def connect(url: str, name: str, *, ping_interval: int = PING_SECONDS,
                  pings_unanswered: int = PINGS_UNANSWERED) -> NATS:
    """A client that reconnects for ever (the broker restarting must not end a process),
    waits for ever for a broker that is not up yet, and gives a silent connection up after
    ``ping_interval × (pings_unanswered + 1)`` seconds; it logs as :class:`_ConnectionLog`
    says."""
    events = _ConnectionLog(name, url)
    events.client = await nats.connect(
        check_broker_url(url), name=name, max_reconnect_attempts=-1, reconnect_time_wait=0.25,
        connect_timeout=5, allow_reconnect=True, error_cb=events.error,
        disconnected_cb=events.disconnected, reconnected_cb=events.reconnected,
        ping_interval=ping_interval, max_outstanding_pings=pings_unanswered)
    return events.client


async def ensure_streams(js: JetStreamContext) -> None:
    """Create the two streams if missing (every role calls it: whoever starts first), and give
    one made by an earlier version the message age limit it lacks."""
    for name, subjects, retention, max_age in (
        (JOBS_STREAM, [JOBS_SUBJECT], RetentionPolicy.WORK_QUEUE, JOBS_MAX_AGE_SECONDS),
        (RESULTS_STREAM, [f"{RESULTS_PREFIX}.>"], RetentionPolicy.LIMITS, RESULTS_MAX_AGE_SECONDS),
    ):
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            with contextlib.suppress(nats.js.errors.BadRequestError):  # created meanwhile
                await js.add_stream(name=name, subjects=subjects, retention=retention,
                                    storage=StorageType.FILE, max_age=max_age,
                                    duplicate_window=DUPLICATE_WINDOW_SECONDS)
            continue
        if info.config.max_age != max_age:
            await js.update_stream(info.config, max_age=max_age)
            log.info("stream_updated", stream=name, max_age_seconds=max_age)


class NoJetStreamError(nats.errors.Error):
    """The broker answers, but not to JetStream requests: started without ``-js``."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def __str__(self) -> str:
        return (f"the NATS server at {self.url} answers no JetStream request: start it with "
                "JetStream on (nats-server -js, or 'jetstream {}' in its configuration file)")


#: An idle pull consumer asks the broker about itself this often (and at once after a reconnect).
CONSUMER_CHECK_SECONDS = 10.0


class PullConsumer:
    """A durable pull consumer that outlives what the broker forgets.

    ``await consumer.fetch(n)`` gives up to ``n`` messages, or none after about a
    second; it never raises for the broker's sake. nats-py re-sends a subscription's
    interest after a reconnect but nothing more, and a durable pull consumer can
    still go silent: a broker that came back without its store (no volume, a wiped
    directory) has neither the streams nor the consumer, an operator may delete the
    consumer, and a pull subscription can stop receiving after a restart
    (nats-io/nats.py#504). So, after a reconnect, after an error answer, and every
    :data:`CONSUMER_CHECK_SECONDS` of fetching nothing, the consumer asks the broker
    for its own state: missing, it re-creates the streams and itself; if messages
    wait (``num_pending``), the next fetch does not get one either and nothing was
    delivered to anyone meanwhile, it subscribes afresh. Unacknowledged messages held by the old subscription are
    delivered again after ``ack_wait``, as for any lost worker.
    """

    def __init__(self, nc: NATS, subject: str, durable: str, stream: str,
                 config: Callable[[], ConsumerConfig], *,
                 check_every: float = CONSUMER_CHECK_SECONDS,
                 on_repair: Callable[[str], None] | None = None) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self.subject = subject
        self.durable = durable
        self.stream = stream
        self._config = config
        self.check_every = check_every
        self._on_repair = on_repair
        self._sub: JetStreamContext.PullSubscription | None = None
        self._reconnects = 0
        self._check_due = time.monotonic() + check_every
        # The stream sequence delivered when messages were seen waiting after an empty fetch:
        # if the next fetch is empty too and nothing was delivered to anyone since, this
        # subscription is the one not receiving (None: no suspicion).
        self._stalled: int | None = None
        self._warn_due = 0.0
        #: Times the consumer was re-created (the broker had lost it) or re-subscribed (stalled).
        self.recreated = 0
        self.resubscribed = 0

    @property
    def ready(self) -> bool:
        """Subscribed (a broker that is away shows in the connection, not here)."""
        return self._sub is not None

    async def open(self) -> None:
        """Create the streams and the consumer if missing, and subscribe (raises if the broker
        does not answer; :class:`NoJetStreamError` if it answers without JetStream)."""
        try:
            await ensure_streams(self._js)
        except nats.js.errors.ServiceUnavailableError as exc:
            where = self._nc.connected_url
            raise NoJetStreamError(redact_url(where.geturl()) if where else "?") from exc
        await self._subscribe()

    async def _subscribe(self) -> None:
        old, self._sub = self._sub, None
        if old is not None:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await old.unsubscribe()
        self._sub = await self._js.pull_subscribe(self.subject, durable=self.durable,
                                                  stream=self.stream, config=self._config())
        self._reconnects = self._nc.stats["reconnects"]
        self._stalled = None
        self._check_due = time.monotonic() + self.check_every

    async def fetch(self, n: int) -> list[Msg]:
        """Up to ``n`` messages; none if there are none within about a second or the broker
        is away (the client reconnects by itself; this method repairs the rest)."""
        try:
            if self._sub is None:
                await self.open()
            assert self._sub is not None
            if self._nc.stats["reconnects"] != self._reconnects:
                self._reconnects = self._nc.stats["reconnects"]
                self._check_due = 0.0  # at the first empty fetch after it
            try:
                msgs = await self._sub.fetch(batch=n, timeout=1.0)
            except (nats.errors.TimeoutError, TimeoutError):
                msgs = []
            except nats.js.errors.APIError as exc:  # an error answer: no consumer, no stream…
                log.info("consumer_error", consumer=self.durable, error=repr(exc))
                self._check_due = 0.0
                await asyncio.sleep(0.25)
                msgs = []
            if msgs:
                self._stalled = None
                return msgs
            if self._stalled is not None:  # messages waited, and this fetch got none either
                before, self._stalled = self._stalled, None
                info = await self._check()
                # Nothing delivered to anyone since, and messages still wait: it is us.
                if info is not None and info.num_pending and _delivered(info) == before:
                    log.warning("consumer_resubscribed", consumer=self.durable,
                                waiting=info.num_pending,
                                reason="messages wait on the broker but none came")
                    await self._subscribe()
                    self._repaired("resubscribed")
            elif time.monotonic() >= self._check_due:
                info = await self._check()
                if info is not None and info.num_pending:
                    self._stalled = _delivered(info)
        except (nats.errors.Error, TimeoutError) as exc:  # reconnecting: try again shortly
            now = time.monotonic()
            if self._sub is None and now >= self._warn_due:  # e.g. a broker without JetStream
                self._warn_due = now + 30.0
                log.warning("consumer_unavailable", consumer=self.durable, stream=self.stream,
                            error=str(exc) or repr(exc))
            else:
                log.debug("consumer_fetch_failed", consumer=self.durable, error=repr(exc))
            await asyncio.sleep(0.25)
        return []

    async def _check(self) -> ConsumerInfo | None:
        """Ask the broker about this consumer; re-create it (and say ``None``) if it is gone."""
        try:
            info: ConsumerInfo = await self._js.consumer_info(self.stream, self.durable, timeout=2.0)
        except nats.js.errors.NotFoundError:
            log.warning("consumer_recreated", consumer=self.durable, stream=self.stream,
                        reason="the broker has no such consumer (or stream) any more")
            await self.open()
            self._repaired("recreated")
            return None
        self._check_due = time.monotonic() + self.check_every
        return info

    def _repaired(self, kind: str) -> None:
        if kind == "recreated":
            self.recreated += 1
        else:
            self.resubscribed += 1
        if self._on_repair is not None:
            self._on_repair(kind)


def _delivered(info: ConsumerInfo) -> int:
    return info.delivered.stream_seq if info.delivered is not None else 0


@dataclass
class _Pending:
    future: asyncio.Future[ProbeResult]
    known: KnownEntries


class BrokerProber:
    """The scheduler's :class:`~proxy.feeds.Prober` that sends each probe to a worker.

    ``async with BrokerProber(settings, policy) as prober: await prober.probe(…)``.
    """

    def __init__(self, settings: BrokerSettings, policy: AddressPolicy) -> None:
        self.settings = settings
        self.id = f"s{secrets.token_hex(6)}"
        self._policy = policy
        self._resolver = SystemResolver()
        self._limiter = HostLimiter(settings.per_host_concurrency, settings.per_host_min_delay)
        self._seq = itertools.count(1)
        self._pending: dict[str, _Pending] = {}
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self.results_consumer: PullConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        #: Jobs stored by the broker, results applied, results for jobs already answered
        #: (dropped), jobs nobody answered in time.
        self.published = 0
        self.results = 0
        self.duplicates = 0
        self.timeouts = 0

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    async def __aenter__(self) -> BrokerProber:
        nc = self._nc = await connect(self.settings.url, f"proxy-scheduler-{self.id}")
        self._js = nc.jetstream()
        results = self.results_consumer = PullConsumer(
            nc, f"{RESULTS_PREFIX}.{self.id}", f"results-{self.id}", RESULTS_STREAM,
            lambda: ConsumerConfig(ack_wait=30, inactive_threshold=RESULTS_MAX_AGE_SECONDS))
        await results.open()
        self._task = asyncio.create_task(self._receive(results), name="proxy-broker-results")
        log.info("broker_connected", role="scheduler", prober=self.id)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for pending in self._pending.values():
            pending.future.cancel()
        self._pending.clear()
        if self._nc is not None:
            with contextlib.suppress(Exception):  # closing a connection to a broker that is away
                await self._nc.close()
            self._nc = None

    async def check_url(self, url: str) -> None:
        """As :meth:`Fetcher.check_url`, in this process (no request is sent)."""
        await check_feed_url(url, self._policy, self._resolver)

    async def probe(self, state: FeedState, known: KnownEntries, *, now: dt.datetime) -> ProbeResult:
        """Publish a job, wait for its result; every outcome is a result (as the fetcher's)."""
        if self._js is None:
            raise RuntimeError("BrokerProber.probe() called outside 'async with BrokerProber(...)'")
        started = time.perf_counter()
        deadline = time.time() + self.settings.job_timeout
        job = Job(f"{self.id}.{next(self._seq)}", state, now, deadline,
                  f"{RESULTS_PREFIX}.{self.id}")
        host = urlsplit(state.url).hostname or ""
        future: asyncio.Future[ProbeResult] = asyncio.get_running_loop().create_future()
        self._pending[job.id] = _Pending(future, known)
        try:
            async with self._limiter.slot(host):
                if not await self._publish(job, deadline):
                    return self._failed(state, started, "broker unreachable: the job was not queued",
                                        feed_error=False)
                try:
                    return await asyncio.wait_for(asyncio.shield(future),
                                                  max(deadline - time.time(), 0.0))
                except TimeoutError:
                    self.timeouts += 1
                    return self._failed(state, started, f"no probe worker answered within "
                                        f"{self.settings.job_timeout:g} s")
        finally:
            self._pending.pop(job.id, None)

    async def _publish(self, job: Job, deadline: float) -> bool:
        """Publish until the broker stores the job (it may be restarting) or the job expires."""
        assert self._js is not None
        data = encode_job(job)
        while True:
            try:
                await self._js.publish(JOBS_SUBJECT, data, timeout=2.0, stream=JOBS_STREAM,
                                       headers={"Nats-Msg-Id": job.id})
                self.published += 1
                return True
            except (nats.errors.Error, TimeoutError) as exc:
                if time.time() + 0.25 >= deadline:
                    log.error("job_not_published", job=job.id, error=repr(exc))
                    return False
                if isinstance(exc, nats.js.errors.NoStreamResponseError):
                    # Connected, but no stream takes the subject: a broker that lost its store.
                    with contextlib.suppress(nats.errors.Error, TimeoutError):
                        await ensure_streams(self._js)
                await asyncio.sleep(0.25)

    def _failed(self, state: FeedState, started: float, reason: str, *,
                feed_error: bool = True) -> NetworkError:
        """A probe that did not happen. ``feed_error`` False: not the feed's doing (the job
        never reached the broker), so its error count stays as it was."""
        errors = state.consecutive_errors + (1 if feed_error else 0)
        return NetworkError(state=FeedState(state.url, state.etag, state.last_modified, errors),
                            elapsed=time.perf_counter() - started, reason=reason)

    async def _receive(self, results: PullConsumer) -> None:
        while True:
            for msg in await results.fetch(256):
                self._apply(msg.data)
                with contextlib.suppress(nats.errors.Error, TimeoutError):
                    # Not acked (broker away): redelivered later, then dropped as a duplicate.
                    await msg.ack()

    def _apply(self, data: bytes) -> None:
        try:
            job_id = _job_id(data)
        except MessageError as exc:
            log.error("bad_result", error=str(exc))
            return
        pending = self._pending.get(job_id)
        if pending is None or pending.future.done():
            # Answered already (a redelivered job probed twice), or given up on: once only.
            self.duplicates += 1
            log.info("result_dropped", job=job_id, reason="already applied or expired")
            return
        try:
            result = decode_result(data, pending.known)
        except MessageError as exc:
            log.error("bad_result", job=job_id, error=str(exc))
            return
        self.results += 1
        pending.future.set_result(result.result)


def _job_id(data: bytes) -> str:
    """The job id alone (cheap: results for unknown jobs are not decoded further)."""
    try:
        obj = json.loads(data)
        return str(obj["id"])
    except (ValueError, TypeError, KeyError) as exc:
        raise MessageError(f"result: no job id ({exc!r})") from None
