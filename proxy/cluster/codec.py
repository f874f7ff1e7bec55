"""Probe jobs and their results as JSON messages on the broker (issue 21).

A job carries what a worker needs to probe a feed exactly as the scheduler
would: the URL and the feed's validators (``ETag``, ``Last-Modified``), its
error count (for the back-off), the decision time, when the job stops being
worth doing, and where to publish the result. A result carries the job id
(the idempotency key) and the probe outcome, every field of the
:mod:`proxy.feeds.results` dataclass, datetimes as ISO strings.

JSON, not pickle: anyone who can publish on the broker must not be able to run
code in the scheduler. An ``Ok``'s ``new`` entries are not sent: the
scheduler decides what is new against its own store, as
:class:`~proxy.feeds.pool.ProbePool` does.

Bad messages raise :class:`MessageError` naming what is wrong; they never
become a probe result.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from proxy.errors import ValidationError
from proxy.feeds import (
    Entry,
    FeedState,
    Gone,
    HttpError,
    KnownEntries,
    NetworkError,
    NotModified,
    Ok,
    ParseError,
    ProbeResult,
    RateLimited,
    Redirected,
    Refused,
    Timeout,
    TooLarge,
)
from proxy.feeds.identity import split_new

__all__ = ["Job", "JobResult", "MessageError", "decode_job", "decode_result", "encode_job",
           "encode_result"]

_RESULT_TYPES: dict[str, type[Any]] = {
    cls.outcome: cls
    for cls in (Ok, NotModified, Redirected, Gone, RateLimited, Timeout, TooLarge, HttpError,
                NetworkError, ParseError, Refused)
}
_BASE_FIELDS = frozenset({"state", "elapsed", "not_before", "moved_to"})


class MessageError(ValidationError):
    """A broker message that is not a valid job or result (the message says which field)."""


@dataclass(frozen=True, slots=True)
class Job:
    """One probe to run: ``id`` is unique per decision (epoch, chronon, feed, attempt)."""

    id: str
    state: FeedState
    now: dt.datetime
    expires: float  # POSIX seconds: a worker drops the job unprobed after this
    reply: str  # the subject the result goes to


@dataclass(frozen=True, slots=True)
class JobResult:
    """A worker's answer to job ``id``."""

    id: str
    worker: str
    result: ProbeResult


def _iso(when: dt.datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _when(value: Any, name: str) -> dt.datetime | None:
    if value is None:
        return None
    try:
        when = dt.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise MessageError(f"{name}: not an ISO 8601 time: {value!r}") from None
    if when.tzinfo is None:
        raise MessageError(f"{name}: needs a UTC offset: {value!r}")
    return when


def _state(value: Any) -> FeedState:
    try:
        url, etag, last_modified, errors = value
        return FeedState(str(url), etag, last_modified, int(errors))
    except (TypeError, ValueError) as exc:
        raise MessageError(f"state: expected [url, etag, last_modified, errors]: {exc}") from None


def _load(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MessageError(f"{what}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise MessageError(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj


def encode_job(job: Job) -> bytes:
    s = job.state
    return json.dumps({
        "id": job.id, "state": [s.url, s.etag, s.last_modified, s.consecutive_errors],
        "now": job.now.isoformat(), "expires": job.expires, "reply": job.reply,
    }, separators=(",", ":")).encode()


def decode_job(data: bytes) -> Job:
    obj = _load(data, "job")
    try:
        job_id, reply, expires = str(obj["id"]), str(obj["reply"]), float(obj["expires"])
        now = _when(obj["now"], "now")
    except KeyError as exc:
        raise MessageError(f"job: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise MessageError(f"job: {exc}") from None
    if now is None:
        raise MessageError("now: must not be null")
    return Job(job_id, _state(obj.get("state")), now, expires, reply)


def _field(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, tuple) and all(isinstance(e, Entry) for e in value):
        # author and categories last: rules match them; a scheduler also reads the older
        # six-field form of workers not yet upgraded (below).
        return {"$entries": [[e.identity, e.title, e.link, e.summary, e.content,
                              _iso(e.published), e.author, list(e.categories)] for e in value]}
    return value


def _entry(row: Any, name: str) -> Entry:
    i, t, link, summary, content, p, *extra = row
    if len(extra) not in (0, 2):
        raise ValueError(f"an entry has 6 or 8 fields, not {len(row)}")
    author, categories = extra if extra else (None, ())
    if not isinstance(categories, list | tuple) or not all(isinstance(c, str) for c in categories):
        raise TypeError("categories must be a list of strings")
    return Entry(i, t, link, summary, content, _when(p, f"{name}.published"),
                 author=author, categories=tuple(categories))


def _unfield(value: Any, name: str) -> Any:
    if isinstance(value, dict):
        if "$dt" in value:
            return _when(value["$dt"], name)
        if "$entries" in value:
            try:
                return tuple(_entry(row, name) for row in value["$entries"])
            except (TypeError, ValueError) as exc:
                raise MessageError(f"{name}: bad entry ({exc})") from None
        raise MessageError(f"{name}: unexpected object")
    return value


def encode_result(result: JobResult) -> bytes:
    r = result.result
    s = r.state
    extra = {f.name: _field(getattr(r, f.name)) for f in dataclasses.fields(r)
             if f.name not in _BASE_FIELDS and f.name != "new"}
    return json.dumps({
        "id": result.id, "worker": result.worker, "outcome": r.outcome,
        "state": [s.url, s.etag, s.last_modified, s.consecutive_errors], "elapsed": r.elapsed,
        "not_before": _iso(r.not_before), "moved_to": r.moved_to, "fields": extra,
    }, separators=(",", ":")).encode()


def decode_result(data: bytes, known: KnownEntries) -> JobResult:
    """The result; an ``Ok``'s ``new`` is decided with ``known`` (as the fetcher would)."""
    obj = _load(data, "result")
    try:
        job_id, worker, outcome = str(obj["id"]), str(obj["worker"]), obj["outcome"]
        fields = obj["fields"]
        elapsed = float(obj["elapsed"])
    except KeyError as exc:
        raise MessageError(f"result: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise MessageError(f"result: {exc}") from None
    cls = _RESULT_TYPES.get(outcome)
    if cls is None:
        raise MessageError(f"outcome: unknown probe outcome {outcome!r}")
    if not isinstance(fields, dict):
        raise MessageError("fields: expected a JSON object")
    kwargs = {name: _unfield(value, f"fields.{name}") for name, value in fields.items()}
    if cls is Ok:
        entries, new = split_new(kwargs.get("entries", ()), known)
        kwargs["entries"], kwargs["new"] = entries, new
    try:
        result = cls(state=_state(obj.get("state")), elapsed=elapsed,
                     not_before=_when(obj.get("not_before"), "not_before"),
                     moved_to=obj.get("moved_to"), **kwargs)
    except TypeError as exc:
        raise MessageError(f"fields: do not fit outcome {outcome!r} ({exc})") from None
    return JobResult(job_id, worker, result)
