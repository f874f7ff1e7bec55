"""What ``/healthz`` and ``/readyz`` say when something is unavailable: every such message here.

Liveness (``/healthz``): the process answers and, when it runs the chronon
loop, the loop ticked recently (a stuck loop needs a restart). Readiness
(``/readyz``): the database answers, the loop ticks, and the writer keeps up
(the oldest decision not yet written is younger than
``PROXY_WRITE_LAG_READY_SECONDS``). The messages say what is unavailable in
words an operator acts on; a driver's exception text goes to the log only.
"""

from __future__ import annotations

#: The 503 ``detail`` of an API call that needed the database while it did not answer.
DATABASE_UNAVAILABLE = "the database is unavailable; retry later"


def database_down() -> str:
    return "database: does not answer (see the log for the driver's error)"


def loop_stalled(seconds: float | None) -> str:
    if seconds is None:
        return "chronon loop: not started yet"
    return f"chronon loop: no tick for {seconds:.1f} s"


def writes_lagging(seconds: float, bound: float, backlog: int) -> str:
    return (f"writes: the oldest of {backlog} unwritten batches waits for {seconds:.1f} s "
            f"(bound {bound:g} s)")


def loop_not_live(seconds: float) -> str:
    return f"chronon loop: no tick for {seconds:.1f} s; the process needs a restart"
