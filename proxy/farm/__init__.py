"""The feed farm: a local HTTP server of fake RSS/Atom feeds that tests, benchmarks and the demo poll.

It serves thousands of feeds with conditional GET, gzip, faults (errors,
timeouts, slow drips, huge bodies, redirects, malformed documents), plays
Poisson schedules or real publication traces on an accelerated clock, pings
subscribers, and logs every publication.  Run it in-process (``FeedFarm``),
as a child process (``FarmProcess``), or from the shell (``proxy farm serve``
or ``python -m proxy.farm serve``).  See ``docs/feedfarm.md``.

The farm knows trace files and HTTP, nothing of the proxy: it imports no other
package of the project (only ``proxy.aio``, to run its own process on the same
event loop), so the proxy polls it exactly as it would poll a real feed host.
"""

from proxy.farm._docs import Entry, FeedFormat
from proxy.farm._faults import FAULT_PARAMS, Fault, FaultMode, parse_fault_spec
from proxy.farm._ping import PingRecord, PingRequest, PingResolver
from proxy.farm._process import FarmProcess, FarmProcessError
from proxy.farm._requests import (
    RequestKind,
    RequestLog,
    RequestRecord,
    load_requests,
    peak_concurrency,
)
from proxy.farm._stats import FeedNotFoundError, FeedStats
from proxy.farm._trace import (
    Clock,
    CsvTrace,
    ManualClock,
    MonotonicClock,
    Publication,
    TraceEvent,
    load_csv_trace,
    load_publications,
    poisson_schedule,
    trace_intervals,
)
from proxy.farm.farm import DEFAULT_EPOCH, EntryText, FeedFarm

__all__ = [
    "DEFAULT_EPOCH",
    "FAULT_PARAMS",
    "Clock",
    "CsvTrace",
    "Entry",
    "EntryText",
    "FarmProcess",
    "FarmProcessError",
    "Fault",
    "FaultMode",
    "FeedFarm",
    "FeedFormat",
    "FeedNotFoundError",
    "FeedStats",
    "ManualClock",
    "MonotonicClock",
    "PingRecord",
    "PingRequest",
    "PingResolver",
    "Publication",
    "RequestKind",
    "RequestLog",
    "RequestRecord",
    "TraceEvent",
    "load_csv_trace",
    "load_publications",
    "load_requests",
    "parse_fault_spec",
    "peak_concurrency",
    "poisson_schedule",
    "trace_intervals",
]
