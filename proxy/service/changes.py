"""Changes made by API replicas, carried to the leading scheduler by PostgreSQL LISTEN/NOTIFY (issue 21).

An API replica (``proxy serve --role api``) holds no engine: it validates a
change, stores it (the database is the truth), then sends a :class:`Change`
on channel ``proxy_changes``. The process that runs the chronon loop listens
and applies the change to its engine and evaluator as if its own API had
received it (for profiles and feeds: reloaded from the database; for pings:
the users whose token pinged).

Why NOTIFY and not the broker: the change and its notification commit in the
same database, and PostgreSQL delivers a NOTIFY only when its transaction
commits, so the scheduler never hears of a change it cannot read yet.

Delivery is at most once: a notification sent while nobody listens is lost.
That happens in every gap of the listening connection: between a leader's
restore and its first LISTEN (the restore of 100,000 profiles takes tens of
seconds), and while the connection is down (a database restart, a network
cut). So each time the listener is (re)connected, before the notifications
that follow, it asks for a *resync*: the leader compares the feeds and the
profiles' ``updated_at`` in the database with what it runs, and installs,
re-installs or removes what differs (``Replication.resync`` in
:mod:`proxy.service._replication`). Only a ping sent in a gap is lost (the
feed is still probed by the policy). Bad payloads are logged and dropped.

A listening connection can also go silent without closing (a NAT or a load
balancer that dropped an idle connection): nothing tells the listener, and
every NOTIFY is lost while it lasts. So the listener asks it ``SELECT 1``
every :data:`CHECK_SECONDS` and replaces it (then resynchronises) when no
answer comes within :data:`CHECK_TIMEOUT_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from proxy.errors import ValidationError
from proxy.store import PG_KEEPALIVES_SQL

__all__ = ["CHANNEL", "Change", "ChangeListener", "decode_change"]

log = structlog.get_logger("proxy.service")

CHANNEL = "proxy_changes"
RESYNC_RETRY_SECONDS = 5.0
#: The listening connection is asked ``SELECT 1`` this often, and dropped if no answer comes
#: within the timeout: a connection a NAT or load balancer forgot closes nothing, it only
#: goes silent, and NOTIFYs sent to it are lost for as long as it lasts.
CHECK_SECONDS = 30.0
CHECK_TIMEOUT_SECONDS = 10.0
Kind = Literal["feed", "feed_deleted", "profile", "profile_deleted", "ping"]
_KINDS = ("feed", "feed_deleted", "profile", "profile_deleted", "ping")


@dataclass(frozen=True, slots=True)
class Change:
    """What changed: feed ``id``, or profile ``id`` of ``user``; a ping of feed ``id`` by ``users``."""

    kind: Kind
    id: int
    user: int | None = None
    users: tuple[int, ...] = ()

    def encode(self) -> str:
        return json.dumps({"kind": self.kind, "id": self.id, "user": self.user,
                           "users": list(self.users)}, separators=(",", ":"))


def decode_change(payload: str) -> Change:
    """The change; :class:`ValidationError` naming what is wrong otherwise."""
    try:
        obj = json.loads(payload)
        kind = obj["kind"]
        if kind not in _KINDS:
            raise ValidationError(f"change: unknown kind {kind!r}")
        user = obj.get("user")
        return Change(kind, int(obj["id"]), None if user is None else int(user),
                      tuple(int(u) for u in obj.get("users", ())))
    except ValidationError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise ValidationError(f"change: malformed payload {payload[:200]!r} ({exc!r})") from None


class ChangeListener:
    """Listens on :data:`CHANNEL` (reconnecting) and applies each change in order with ``apply``;
    ``resync`` runs each time the listening starts, before the changes heard after it."""

    def __init__(self, dsn: str, apply: Callable[[Change], Awaitable[None]],
                 resync: Callable[[], Awaitable[None]] | None = None, *,
                 check_every: float = CHECK_SECONDS, check_timeout: float = CHECK_TIMEOUT_SECONDS,
                 ) -> None:
        self.dsn = dsn.replace("postgresql+asyncpg://", "postgresql://", 1)
        self._apply = apply
        self._resync = resync
        self.check_every = check_every
        self.check_timeout = check_timeout
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()  # None: resync here
        self._tasks: list[asyncio.Task[None]] = []
        self.listening = asyncio.Event()
        self.applied = 0
        self.resyncs = 0

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._listen(), name="proxy-changes-listen"),
                       asyncio.create_task(self._work(), name="proxy-changes-apply")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self._queue.put_nowait(payload)

    async def _listen(self) -> None:
        import asyncpg

        while True:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=10)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("changes_listen_failed", error=repr(exc))
                await asyncio.sleep(1.0)
                continue
            lost = asyncio.Event()
            try:
                with contextlib.suppress(asyncpg.PostgresError):  # a pooler may refuse: defaults
                    await conn.execute(PG_KEEPALIVES_SQL)
                conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                await conn.add_listener(CHANNEL, self._on_notify)
                if self._resync is not None:  # what was missed before this LISTEN, first
                    self._queue.put_nowait(None)
                self.listening.set()
                reason = await self._until_lost(conn, lost)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                reason = repr(exc)  # lost while setting up: connect again after a pause
                await asyncio.sleep(1.0)
            finally:
                self.listening.clear()
                conn.terminate()  # at once: a silent connection would not answer a close
            log.warning("changes_connection_lost", reason=reason)

    async def _until_lost(self, conn: Any, lost: asyncio.Event) -> str:
        """Wait until the connection ends, or stops answering ``SELECT 1``; says which."""
        import asyncpg

        while True:
            try:
                await asyncio.wait_for(lost.wait(), self.check_every)
                return "closed"
            except TimeoutError:
                pass
            try:
                await asyncio.wait_for(conn.fetchval("SELECT 1"), self.check_timeout)
            except TimeoutError:
                return f"no answer to SELECT 1 within {self.check_timeout:g} s"
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                return repr(exc)

    async def _work(self) -> None:
        while True:
            payload = await self._queue.get()
            if payload is None:
                assert self._resync is not None
                try:
                    await self._resync()
                    self.resyncs += 1
                except Exception:  # the database away again, say: try again in a while
                    log.exception("changes_resync_failed", retry_in=RESYNC_RETRY_SECONDS)
                    asyncio.get_running_loop().call_later(
                        RESYNC_RETRY_SECONDS, self._queue.put_nowait, None)
                continue
            try:
                change = decode_change(payload)
            except ValidationError as exc:
                log.error("bad_change", error=str(exc))
                continue
            try:
                await self._apply(change)
                self.applied += 1
            except Exception:  # one bad change must not stop the others
                log.exception("change_failed", kind=change.kind, id=change.id)
