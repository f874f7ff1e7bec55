"""Fault injection for the crash tests: kill this process at named points of the writer.

``PROXY_TEST_FAULTS="writer.before_commit=0.05,writer.after_commit=0.02"`` makes
the service SIGKILL itself with that probability each time it passes the point:
a crash exactly between a round's statements, before its commit, or after it
(docs/operations.md, tests/test_e2e_crash.py). Off (empty) in production; the
points cost one dictionary lookup when it is off.

What it does not do: raise exceptions or delay (a kill -9 is the fault we test).
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable

import structlog

log = structlog.get_logger("proxy.service")

#: Where :class:`~proxy.service._persist.Writer` calls its fault hook.
FAULT_POINTS = ("writer.between_units", "writer.before_commit", "writer.after_commit")


def parse_faults(text: str) -> dict[str, float]:
    """``point=probability`` pairs, comma-separated; ValueError naming what is wrong."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        point, sep, value = part.partition("=")
        point = point.strip()
        if not sep or point not in FAULT_POINTS:
            raise ValueError(
                f"{part!r}: want point=probability with point one of {', '.join(FAULT_POINTS)}")
        try:
            p = float(value)
        except ValueError:
            raise ValueError(f"{part!r}: probability {value.strip()!r} is not a number") from None
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{part!r}: probability must be within 0 and 1")
        out[point] = p
    return out


def fault_hook(text: str, *, seed: int | None = None) -> Callable[[str], None] | None:
    """The writer's hook for ``PROXY_TEST_FAULTS`` (None when it is empty)."""
    faults = parse_faults(text)
    if not faults:
        return None
    rng = random.Random(seed)

    def hit(point: str) -> None:
        p = faults.get(point)
        if p and rng.random() < p:
            log.warning("test_fault_kill", point=point)
            os.kill(os.getpid(), signal.SIGKILL)

    return hit
