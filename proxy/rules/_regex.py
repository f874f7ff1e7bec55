"""Compile a user's regular expression, refusing ones that look catastrophic.

Python's ``re`` backtracks, so a pattern such as ``(a+)+$`` takes exponential
time on a short non-matching input, and rules run on every probe of a feed.
The check is a heuristic on the parsed pattern, not a proof: it refuses an
unbounded repetition whose body itself contains an unbounded repetition
(``(a+)+``, ``(a*)*``, ``(.*x)+``) or an alternation under an unbounded
repetition whose branches can start with the same character (``(a|ab)+``).
It deliberately does not try to detect every super-linear pattern (``.*a.*b``
is quadratic and accepted); entry text is also capped before matching
(:data:`MAX_TEXT`).
"""

from __future__ import annotations

import re
from re import _constants as sre_c  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

__all__ = ["MAX_PATTERN_LENGTH", "MAX_TEXT", "UnsafeRegexError", "compile_safe_regex"]

MAX_PATTERN_LENGTH = 500
# Each of title/summary/content is matched on at most this many characters.
MAX_TEXT = 100_000


class UnsafeRegexError(ValueError):
    """The pattern is invalid, too long, or looks exponential; the message says which."""


def compile_safe_regex(pattern: str) -> re.Pattern[str]:
    """Compile ``pattern`` or raise :class:`UnsafeRegexError` with a message for the user."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise UnsafeRegexError(f"regular expression is longer than {MAX_PATTERN_LENGTH} characters")
    try:
        compiled = re.compile(pattern)
        parsed = sre_parse.parse(pattern)
    except re.error as exc:
        raise UnsafeRegexError(f"invalid regular expression: {exc}") from None
    problem = _nested_repeat(list(parsed), inside_unbounded=False)
    if problem is not None:
        raise UnsafeRegexError(
            f"regular expression {pattern!r} may take exponential time ({problem}); "
            "avoid nested repetition such as '(a+)+'"
        )
    return compiled


_REPEATS = {sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)}


def _nested_repeat(items: list[tuple[Any, Any]], *, inside_unbounded: bool) -> str | None:
    for op, arg in items:
        if op in _REPEATS:
            _low, high, body = arg
            unbounded = high == sre_c.MAXREPEAT or high > 100
            # Possessive repeats do not backtrack (Python >= 3.11), so they are safe.
            if op == getattr(sre_c, "POSSESSIVE_REPEAT", object()):
                continue
            if unbounded and inside_unbounded:
                return "a repetition inside a repetition"
            if unbounded and _has_ambiguous_branch(list(body)):
                return "an alternation with overlapping branches inside a repetition"
            found = _nested_repeat(list(body), inside_unbounded=inside_unbounded or unbounded)
            if found:
                return found
        elif op == sre_c.SUBPATTERN:
            found = _nested_repeat(list(arg[-1]), inside_unbounded=inside_unbounded)
            if found:
                return found
        elif op == sre_c.BRANCH:
            for branch in arg[1]:
                found = _nested_repeat(list(branch), inside_unbounded=inside_unbounded)
                if found:
                    return found
        elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
            found = _nested_repeat(list(arg[1]), inside_unbounded=inside_unbounded)
            if found:
                return found
    return None


def _has_ambiguous_branch(items: list[tuple[Any, Any]]) -> bool:
    """True when an alternation directly in ``items`` has two branches sharing a first literal."""
    for op, arg in items:
        if op == sre_c.SUBPATTERN:
            if _has_ambiguous_branch(list(arg[-1])):
                return True
        elif op == sre_c.BRANCH:
            firsts: list[object] = []
            for branch in arg[1]:
                if not branch:
                    return True  # an empty branch matches wherever any other one does
                first = _first_token(list(branch))
                if first is not None and first in firsts:
                    return True
                if first is not None:
                    firsts.append(first)
    return False


def _first_token(items: list[tuple[Any, Any]]) -> object | None:
    """The first literal character of a sequence, or None when it is not a plain literal."""
    op, arg = items[0]
    if op == sre_c.LITERAL:
        return int(arg)
    if op == sre_c.SUBPATTERN:
        return _first_token(list(arg[-1]))
    return None
