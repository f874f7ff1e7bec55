"""Scale-out (issue 21): probe jobs over NATS JetStream, probe workers, process roles, heartbeats.

Public::

    BrokerSettings, BrokerProber      # the scheduler's Prober: each probe is a job on the broker
    ProbeWorker, WorkerMetrics        # `proxy serve --role worker`
    Job, JobResult, encode_*/decode_* # the messages (JSON)

The scheduling decision stays in one process (the lease holder, see
``proxy.service.leader``); this package moves only fetching and parsing out of it.
"""

from proxy.cluster.broker import BrokerProber, BrokerSettings, check_broker_url
from proxy.cluster.codec import (
    Job,
    JobResult,
    MessageError,
    decode_job,
    decode_result,
    encode_job,
    encode_result,
)
from proxy.cluster.worker import ProbeWorker, WorkerMetrics

__all__ = [
    "BrokerProber",
    "BrokerSettings",
    "Job",
    "JobResult",
    "MessageError",
    "ProbeWorker",
    "WorkerMetrics",
    "check_broker_url",
    "decode_job",
    "decode_result",
    "encode_job",
    "encode_result",
]
