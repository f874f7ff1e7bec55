"""Compile a user's regular expression on RE2, a linear-time engine.

Python's ``re`` backtracks: ``(a+)+$``, ``a*a*a*a*a*a*a*a*a*a*a*a*b`` or
``(.*a){25}`` take exponential (or high-polynomial) time on a short entry
such as ``aaaaaaaaaaaaaaaaaaaaaa!``, and rules run on every probe of a feed,
on the event loop the chronon loop ticks on (issue 24: one such entry froze
the API and the loop for 16 s). A heuristic that refuses "dangerous-looking"
patterns cannot be complete, so rule regexes run on RE2 (``google-re2``, the
engine Go's ``regexp`` and Miniflux's filters use): a search costs at most
the compiled program's size times the text's length, whatever the pattern.

RE2 has no backtracking features: backreferences (``\\1``), lookahead and
lookbehind (``(?=``, ``(?!``, ``(?<=``, ``(?<!``), atomic groups (``(?>``),
possessive quantifiers (``a++``) and conditionals are refused at validation
with a message naming the feature. Two bounds keep the cost per character
small: the pattern's length (:data:`MAX_PATTERN_LENGTH`) and its compiled
program's size (:data:`MAX_PROGRAM_SIZE`, ``(.*a){25}`` is 279 instructions);
each text is capped too (:data:`MAX_TEXT`).

Semantics that differ from Python's ``re`` (docs/rules.md): ``\\d``, ``\\w``
and ``\\b`` are ASCII-only, and ``$`` matches only at the very end of the text
(not before a final newline) unless ``(?m)`` is given.
"""

from __future__ import annotations

from typing import Protocol

import re2

__all__ = [
    "MAX_PATTERN_LENGTH",
    "MAX_PROGRAM_SIZE",
    "MAX_TEXT",
    "CompiledRegex",
    "UnsafeRegexError",
    "compile_safe_regex",
]

MAX_PATTERN_LENGTH = 500
#: Largest RE2 program (instructions) accepted: the cost of a search per character of text.
MAX_PROGRAM_SIZE = 2000
# Each of title/summary/content is matched on at most this many characters.
MAX_TEXT = 100_000

# RE2's parse errors for the backtracking-only features, and the feature's name for the user.
_UNSUPPORTED = (
    ("(?<=", "lookbehind '(?<=…)'"),
    ("(?<!", "negative lookbehind '(?<!…)'"),
    ("(?=", "lookahead '(?=…)'"),
    ("(?!", "negative lookahead '(?!…)'"),
    ("(?>", "atomic group '(?>…)'"),
    ("(?(", "conditional '(?(…)…)'"),
)


class CompiledRegex(Protocol):
    """What the evaluator needs of a compiled pattern (an RE2 ``_Regexp``)."""

    @property
    def pattern(self) -> str: ...

    @property
    def programsize(self) -> int: ...

    def search(self, text: str) -> object | None: ...


class UnsafeRegexError(ValueError):
    """The pattern is invalid, too long, too large, or uses a feature RE2 lacks; the message says which."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the error goes to the user in a 422, not to stderr
    return options


_OPTIONS = _options()


def compile_safe_regex(pattern: str) -> CompiledRegex:
    """Compile ``pattern`` on RE2 or raise :class:`UnsafeRegexError` with a message for the user."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise UnsafeRegexError(f"regular expression is longer than {MAX_PATTERN_LENGTH} characters")
    try:
        compiled: CompiledRegex = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        raise UnsafeRegexError(_explain(pattern, exc)) from None
    if compiled.programsize > MAX_PROGRAM_SIZE:
        raise UnsafeRegexError(
            f"regular expression is too large: {compiled.programsize} RE2 instructions, at most "
            f"{MAX_PROGRAM_SIZE} (large counted repetitions such as '(.*a){{1000}}' compile to one "
            "copy per repetition)"
        )
    return compiled


def _explain(pattern: str, exc: Exception) -> str:
    """RE2's parse error as a message naming the unsupported feature, when it is one."""
    reason = exc.args[0] if exc.args else exc
    text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
    hint = ("rule regexes use RE2 (linear time, as Go's regexp), which has no backreferences, "
            "lookaround, atomic groups or possessive quantifiers")
    for marker, feature in _UNSUPPORTED:
        if f"invalid perl operator: {marker}" in text:
            return f"{feature} is not supported: {hint}"
    if "invalid escape sequence: \\" in text and text.rstrip()[-1:].isdigit():
        return f"backreference '{text.rsplit(': ', 1)[-1]}' is not supported: {hint}"
    if "bad repetition operator: " in text and text.rstrip().endswith("+"):
        return f"possessive quantifier '{text.rsplit(': ', 1)[-1]}' is not supported: {hint}"
    return f"invalid regular expression {pattern!r}: {text}"
