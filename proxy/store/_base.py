"""Shared machinery of the store: transactions with error translation, row → record helpers."""

from __future__ import annotations

import contextvars
import datetime as dt
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Self, TypeVar

from sqlalchemy import any_, bindparam, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from proxy.errors import (
    ProxyError,
    StorageError,
    ValidationError,
)
from proxy.store._engine import make_engine
from proxy.store._fence import check_fence
from proxy.store._models import (
    EntryRow,
    FeedRegistrationRow,
    FeedRow,
)
from proxy.store._types import (
    CEI_STATES,
    CeiState,
    Ei,
    Entry,
    Feed,
    Probe,
    Registration,
    User,
)

__all__ = ["API_KEY_PREFIX_LENGTH", "SUMMARY_MAX_CHARS", "StoreBase", "hash_api_key"]

SUMMARY_MAX_CHARS = 2_000
API_KEY_PREFIX_LENGTH = 8
#: Probe outcomes that saw the feed's state: only these capture (a 304 confirms the copy held;
#: ``push``: a WebSub hub's copy of the feed, issue 44).
SUCCESS_PROBE_OUTCOMES = ("ok", "not_modified", "push")
_IDENTITY_MAX = 1024  # the column's length; longer identities are stored hashed
_CHUNK = 500  # rows per multi-row INSERT / IN (...) list: below SQLite's variable limit

_T = TypeVar("_T")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def hash_api_key(api_key: str) -> str:
    """sha256 hex of an API key: what ``api_keys.key_hash`` stores (keys themselves are never stored)."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def _identity_key(identity: str) -> str:
    """The stored form of an entry identity: itself, or ``sha256:<hex>`` when too long to index."""
    if len(identity) <= _IDENTITY_MAX:
        return identity
    return "sha256:" + hashlib.sha256(identity.encode("utf-8")).hexdigest()


def _chunks(items: Sequence[_T], size: int = _CHUNK) -> Iterable[Sequence[_T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _among(conn: AsyncConnection, column: Any, values: Iterable[Any]) -> Any:
    """``column IN (values)``; on PostgreSQL ``column = ANY(:array)``: one statement text
    whatever the number of values, so asyncpg prepares it once per connection instead of
    once per list length (a Parse round trip and a plan each time: with the writer's rounds
    of varying size, most of its statements were new to the server)."""
    values = list(values)
    if conn.dialect.name == "postgresql":
        return column == any_(bindparam(None, values, type_=postgresql.ARRAY(column.type)))
    return column.in_(values)


def describe_driver_error(exc: BaseException) -> str:
    """A one-line message for a driver error, without SQLAlchemy's ``[SQL: …]`` and
    ``[parameters: …]`` tail: parameters can hold secrets (key hashes, ping tokens)
    and the message may reach logs and API responses. The full error stays chained."""
    orig = getattr(exc, "orig", None)
    source = orig if orig is not None else exc
    first_line = str(source).strip().split("\n", 1)[0]
    return f"database error ({type(source).__name__}): {first_line}"


def is_unavailable(exc: BaseException) -> bool:
    """Whether a driver error says the database is away (connection lost or refused, server
    shutting down, SQLite locked, a deadlock or serialization failure to retry) rather than
    that it refused this statement (a constraint,
    a value it cannot store). The service retries the first kind until the database returns;
    retrying the second kind would stall it for ever."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, OperationalError | InterfaceError | OSError | TimeoutError):
        return True
    orig = getattr(exc, "orig", None)
    # asyncpg's own connection errors, and PostgreSQL's class 08 (connection exception) and
    # 57P (operator intervention: admin shutdown, cannot connect now).
    cause = getattr(orig, "__cause__", None)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(cause, "sqlstate", None)
    # Class 40 (transaction rollback: serialization failure, deadlock detected): the same
    # transaction succeeds when tried again.
    if isinstance(sqlstate, str) and sqlstate.startswith(("08", "57P", "40")):
        return True
    return isinstance(orig, OSError | TimeoutError) or isinstance(cause, OSError | TimeoutError)


def _check_state(state: str) -> CeiState:
    if state not in CEI_STATES:
        raise ValidationError(f"state {state!r} is not one of {', '.join(CEI_STATES)}")
    return state


# --- row → record -----------------------------------------------------------------------


def _user(row: Any) -> User:
    return User(id=row.id, name=row.name, created_at=row.created_at)


def _feed(row: Any) -> Feed:
    return Feed(
        id=row.id,
        url=row.url,
        url_normalised=row.url_normalised,
        resource=row.resource,
        etag=row.etag,
        last_modified=row.last_modified,
        last_probe_at=row.last_probe_at,
        last_outcome=row.last_outcome,
        consecutive_errors=row.consecutive_errors,
        next_allowed_at=row.next_allowed_at,
        disabled=bool(row.disabled),
        disabled_reason=row.disabled_reason,
        created_at=row.created_at,
    )


def _registration(row: Any, prefix: str = "") -> Registration:
    """``prefix``: the columns' label prefix when a query selected them beside the feed's
    (``r_``: the registration and feed rows share column names)."""
    return Registration(**{name: getattr(row, prefix + name) for name in (
        "id", "user_id", "feed_id", "url", "ping_token", "created_at")})


def _ei(row: Any) -> Ei:
    return Ei(
        id=row.id,
        cei_id=row.cei_id,
        ordinal=row.ordinal,
        feed_id=row.feed_id,
        start=row.start,
        finish=row.finish,
        reveal=row.reveal,
        state=row.state,
        captured_chronon=row.captured_chronon,
        captured_probe_id=row.captured_probe_id,
    )


def _entry(row: Any) -> Entry:
    return Entry(
        id=row.id,
        feed_id=row.feed_id,
        identity=row.identity,
        title=row.title,
        link=row.link,
        published=row.published,
        summary=row.summary,
        first_seen_probe_id=row.first_seen_probe_id,
        first_seen_at=row.first_seen_at,
    )


def _probe(row: Any) -> Probe:
    return Probe(
        id=row.id,
        feed_id=row.feed_id,
        chronon=row.chronon,
        started_at=row.started_at,
        finished_at=row.finished_at,
        duration_seconds=row.duration_seconds,
        outcome=row.outcome,
        http_status=row.http_status,
        error=row.error,
        new_entries=row.new_entries,
        bytes=row.bytes,
    )


_FEED_COLUMNS = FeedRow.__table__.c
_REGISTRATION_COLUMNS = FeedRegistrationRow.__table__.c
_ENTRY_COLUMNS = EntryRow.__table__.c


#: The transaction of :meth:`StoreBase.unit` in the task that opened it (the service's writer).
_AMBIENT: contextvars.ContextVar[AsyncConnection | None] = contextvars.ContextVar(
    "proxy_store_unit", default=None)


class StoreBase:
    """Engine ownership and the one transaction helper every repository method uses."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        owns_engine: bool = False,
        clock: Callable[[], dt.datetime] = _now,
    ) -> None:
        # ``clock`` stamps created_at/updated_at/revoked_at; tests pass a fixed one.
        self._engine = engine
        self._owns_engine = owns_engine
        self._clock = clock

    @classmethod
    def from_url(
        cls, url: str, *, clock: Callable[[], dt.datetime] = _now, **engine_kwargs: Any
    ) -> Self:
        return cls(make_engine(url, **engine_kwargs), owns_engine=True, clock=clock)

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    def sibling(self) -> Self:
        """Another store on the same database with its own connection pool (closed by its
        :meth:`close`): the service's chronon loop uses one so that API requests waiting
        for a connection never queue ahead of it."""
        url = self._engine.url.render_as_string(hide_password=False)
        return type(self)(make_engine(url), owns_engine=True, clock=self._clock)

    async def close(self) -> None:
        if self._owns_engine:
            await self._engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncConnection]:
        """One transaction; driver errors leave as :class:`StorageError`, ours pass through.

        Inside :meth:`unit` (same task) it is the unit's transaction: nothing commits
        until the unit does."""
        ambient = _AMBIENT.get()
        try:
            if ambient is not None:
                yield ambient
                return
            async with self._engine.begin() as conn:
                # Issue 21: a fenced context's writes commit only while its lease epoch is current.
                await check_fence(conn)
                yield conn
        except ProxyError:
            raise
        except (SQLAlchemyError, OSError) as exc:
            raise StorageError(describe_driver_error(exc), unavailable=is_unavailable(exc)) from exc

    @asynccontextmanager
    async def unit(self) -> AsyncIterator[None]:
        """ONE transaction for every store call made inside it by this task: all of them
        commit together when the block ends, or none (an exception rolls all back).

        The service's writer stores a round of decisions this way, so a crash keeps a
        prefix of whole rounds: a rule's state never runs ahead of (or behind) the CEIs
        it opened. A refused call inside leaves the transaction unusable (PostgreSQL
        aborts it): let the exception end the unit. Not reentrant.
        """
        if _AMBIENT.get() is not None:
            raise RuntimeError("store.unit() is not reentrant")
        try:
            async with self._engine.begin() as conn:
                await check_fence(conn)  # issue 21: the unit commits only while its lease is current
                token = _AMBIENT.set(conn)
                try:
                    yield
                finally:
                    _AMBIENT.reset(token)
        except ProxyError:
            raise
        except (SQLAlchemyError, OSError) as exc:
            raise StorageError(describe_driver_error(exc), unavailable=is_unavailable(exc)) from exc

    @staticmethod
    def _insert(conn: AsyncConnection, table: Any) -> Any:
        """The dialect's INSERT, which has ``on_conflict_do_nothing`` / ``_do_update``."""
        if conn.dialect.name == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    async def ping(self) -> None:
        """Raise :class:`StorageError` unless the database answers (for health checks)."""
        async with self._tx() as conn:
            await conn.execute(select(1))


def _profile_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 200:
        raise ValidationError("profile name must be 1 to 200 characters")
    return name


def _json_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
