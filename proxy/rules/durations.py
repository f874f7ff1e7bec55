"""Human durations (``90s``, ``3m``, ``2h``, ``1d``, ``1h30m``) and their conversion to chronons.

Durations stay strings in the rule language and in stored specs (so a profile
reads back as it was submitted); they become chronons only at the edge, with
the configured chronon length (``design.md``: chronons are integers in
``core``, durations are converted at the edge).

The window convention, shared with the simulator's ``window(W)`` (main paper
§4, generator: ``[u, u + W]``): a life of ``within D`` opened at chronon ``t``
is the EI ``[t, t + to_chronons(D)]``. ``within 0s`` is therefore the paper's
``window(0)``: the single chronon ``[t, t]``; no window is ever empty.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from proxy.errors import ValidationError

__all__ = ["DurationError", "parse_duration", "to_chronons"]

_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
# Units must appear largest first, each at most once: "1h30m" yes, "30m1h" no.
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
# A bound that keeps every arithmetic on chronons far from overflow and
# catches typos like "9999999d"; a rule that lives longer is re-submitted.
MAX_DURATION = timedelta(days=3_650)
# More digits than the maximum in seconds has: longer, whatever the unit.
_MAX_DIGITS = len(str(int(MAX_DURATION.total_seconds())))


class DurationError(ValidationError):
    """A duration string is malformed or out of range; the message quotes it."""


def parse_duration(text: str) -> timedelta:
    """Parse ``"90s"``, ``"3m"``, ``"2h"``, ``"1d"`` or a combination like ``"1h30m"``.

    Whitespace around the value is ignored, units are lower-case, and numbers are
    whole (no ``"1.5h"``: write ``"1h30m"``). Deliberately no ISO 8601 and no
    bare numbers: a bare ``"5"`` is ambiguous (seconds? chronons?).
    """
    if not isinstance(text, str):
        raise DurationError(f"invalid duration {text!r}: expected a string such as '90s', '3m', '2h', '1d'")
    value = text.strip()
    match = _DURATION.fullmatch(value)
    if not value or match is None or not any(match.groups()):
        raise DurationError(
            f"invalid duration {text!r}: expected whole numbers with units d, h, m, s, "
            "largest first, such as '90s', '3m', '2h', '1d' or '1h30m'"
        )
    # Compare whole seconds before building a timedelta: "99999999999d" overflows one, and a
    # number of thousands of digits is longer than int() parses (issue 24: no 500 from input).
    too_long = f"invalid duration {text!r}: longer than the maximum of {MAX_DURATION.days} days"
    if any(number is not None and len(number.lstrip("0")) > _MAX_DIGITS for number in match.groups()):
        raise DurationError(too_long)
    seconds = sum(
        int(number.lstrip("0") or "0") * _UNIT_SECONDS[unit]
        for number, unit in zip(match.groups(), "dhms", strict=True)
        if number is not None
    )
    if seconds > MAX_DURATION.total_seconds():
        raise DurationError(too_long)
    return timedelta(seconds=seconds)


def to_chronons(duration: timedelta | str, chronon_seconds: float, *, minimum: int = 0) -> int:
    """Convert a duration to whole chronons, rounding up, and at least ``minimum``.

    Rounding up never shortens what the user allowed: ``90s`` with 60 s chronons
    is 2 chronons. Use ``minimum=1`` for periods (``every``), which must advance
    time; windows may be 0 (see the module docstring: ``[t, t + 0]`` is one chronon).
    """
    if chronon_seconds <= 0 or not math.isfinite(chronon_seconds):
        raise ValueError(f"chronon_seconds must be a positive number, got {chronon_seconds!r}")
    if isinstance(duration, str):
        duration = parse_duration(duration)
    seconds = duration.total_seconds()
    if seconds < 0:
        raise DurationError(f"duration must not be negative, got {duration}")
    # Round before ceil so that float noise (e.g. 0.1 s chronons) does not add a chronon.
    chronons = math.ceil(round(seconds / chronon_seconds, 9))
    return max(minimum, chronons)
