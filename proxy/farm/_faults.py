"""Per-feed fault modes of the feed farm and their validated parameters.

The table ``FAULT_PARAMS`` is the whole contract: each mode, the parameters it
accepts and their defaults.  Serving a fault lives in ``feedfarm``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class FaultMode(enum.StrEnum):
    """What a faulty feed URL does instead of serving its feed."""

    ERROR500 = "error500"
    """An HTTP 500 (``status`` may pick another 5xx)."""
    TIMEOUT = "timeout"
    """Answers nothing for ``seconds`` (then 504); at shutdown drops the connection unanswered."""
    SLOW_DRIP = "slow_drip"
    """The real feed body, ``chunk_size`` bytes every ``delay`` seconds."""
    HUGE = "huge"
    """A ``size``-byte RSS body streamed from one reused chunk, never held in memory."""
    MALFORMED = "malformed"
    """A truncated feed with an undefined entity and unclosed tags."""
    XML_BOMB = "xml_bomb"
    """The billion-laughs entity-expansion document."""
    REDIRECT_LOOP = "redirect_loop"
    """feed URL -> /loop/{id}/1 -> /loop/{id}/2 -> feed URL -> …"""
    REDIRECT = "redirect"
    """``status`` (301/302/307/308) to feed ``to`` (same format) or to ``location``."""
    RATE_LIMITED = "rate_limited"
    """429 with Retry-After: ``retry_after`` seconds, or an HTTP-date if ``http_date``."""
    UNAVAILABLE = "unavailable"
    """503 with Retry-After, as ``rate_limited``."""
    GONE = "gone"
    """410 Gone."""
    HTML = "html"
    """200 with an HTML page instead of a feed."""


FAULT_PARAMS: Mapping[FaultMode, Mapping[str, Any]] = {
    FaultMode.ERROR500: {"status": 500},
    FaultMode.TIMEOUT: {"seconds": 3600.0},
    FaultMode.SLOW_DRIP: {"chunk_size": 64, "delay": 0.5},
    FaultMode.HUGE: {"size": 50_000_000, "content_length": True, "chunk_size": 65536},
    FaultMode.MALFORMED: {},
    FaultMode.XML_BOMB: {},
    FaultMode.REDIRECT_LOOP: {"status": 302},
    FaultMode.REDIRECT: {"status": 301, "to": None, "location": None},
    FaultMode.RATE_LIMITED: {"retry_after": 60, "http_date": False},
    FaultMode.UNAVAILABLE: {"retry_after": 120, "http_date": False},
    FaultMode.GONE: {},
    FaultMode.HTML: {},
}


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault mode with its full, validated parameters."""

    mode: FaultMode
    params: Mapping[str, Any]

    @classmethod
    def build(cls, mode: FaultMode | str, params: Mapping[str, Any]) -> Fault:
        """Validate ``params`` against ``FAULT_PARAMS`` and fill in the defaults."""
        try:
            mode = FaultMode(mode)
        except ValueError:
            known = ", ".join(m.value for m in FaultMode)
            raise ValueError(f"unknown fault mode {mode!r}; known modes: {known}") from None
        defaults = FAULT_PARAMS[mode]
        unknown = set(params) - set(defaults)
        if unknown:
            raise ValueError(
                f"fault {mode.value!r} takes no parameter(s) {sorted(unknown)}; "
                f"it takes {sorted(defaults) or 'none'}"
            )
        full = {**defaults, **params}
        if mode is FaultMode.REDIRECT:
            if full["status"] not in (301, 302, 303, 307, 308):
                raise ValueError(
                    f"redirect status must be 301/302/303/307/308, got {full['status']}"
                )
            if (full["to"] is None) == (full["location"] is None):
                raise ValueError(
                    "fault 'redirect' needs exactly one of to=<feed id> or location=<path or URL>"
                )
        if mode is FaultMode.REDIRECT_LOOP and full["status"] not in (301, 302, 303, 307, 308):
            raise ValueError(f"redirect_loop status must be a redirect, got {full['status']}")
        if mode is FaultMode.ERROR500 and not 500 <= int(full["status"]) <= 599:
            raise ValueError(f"error500 status must be 5xx, got {full['status']}")
        for key in ("seconds", "delay", "retry_after"):
            if key in full and float(full[key]) < 0:
                raise ValueError(f"fault {mode.value!r}: {key} must be >= 0, got {full[key]}")
        for key in ("chunk_size", "size"):
            if key in full and int(full[key]) <= 0:
                raise ValueError(f"fault {mode.value!r}: {key} must be > 0, got {full[key]}")
        return cls(mode, full)


def parse_fault_spec(spec: str) -> tuple[str, Fault, int | None]:
    """Parse the CLI form ``FEED:MODE[:key=value,...]`` (``times=N`` limits it to N requests).

    Values are read as int, then float, then true/false, else kept as strings.
    """
    parts = spec.split(":", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ValueError(f"fault spec {spec!r} is not FEED:MODE[:key=value,...]")
    feed_id, mode = parts[0], parts[1]
    params: dict[str, Any] = {}
    times: int | None = None
    if len(parts) == 3 and parts[2]:
        for item in parts[2].split(","):
            key, eq, raw = item.partition("=")
            if not eq:
                raise ValueError(f"fault spec {spec!r}: {item!r} is not key=value")
            value = _parse_value(raw)
            if key == "times":
                times = int(value)
            else:
                params[key.strip()] = value
    return feed_id, Fault.build(mode, params), times


def _parse_value(raw: str) -> Any:
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    return raw
