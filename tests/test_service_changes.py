"""The leader's listening connection for API replicas' changes (``proxy.service.changes``).

On the machine's PostgreSQL, through a fault-injecting TCP proxy: the listener
applies NOTIFYs in order, resynchronises each time it starts listening, and a
connection that goes silent without closing (a NAT or load balancer that forgot
it) is noticed by its ``SELECT 1`` check, replaced, and resynchronised. Every
PostgreSQL connection asks the server for TCP keepalives after a minute idle.
"""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from proxy.errors import ValidationError
from proxy.service.changes import CHANNEL, Change, ChangeListener, decode_change
from proxy.store import make_engine
from tests.fault_proxy import FaultProxy
from tests.test_e2e_outage import _through
from tests.test_e2e_support import eventually

pytestmark = pytest.mark.postgres


def _plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def _notify(url: str, change: Change) -> None:
    conn = await asyncpg.connect(_plain(url))
    try:
        await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, change.encode())
    finally:
        await conn.close()


async def test_a_silent_listening_connection_is_replaced_and_what_it_missed_resynced(
    fresh_postgres_url: str,
) -> None:
    applied: list[Change] = []
    log: list[str] = []

    async def apply(change: Change) -> None:
        applied.append(change)
        log.append(f"change {change.id}")

    async def resync() -> None:
        log.append("resync")

    async with FaultProxy(("127.0.0.1", make_url(fresh_postgres_url).port or 5432)) as pg:
        listener = ChangeListener(_through(fresh_postgres_url, pg.port), apply, resync,
                                  check_every=0.5, check_timeout=0.5)
        listener.start()
        try:
            await eventually(lambda: _true(listener.resyncs == 1), within=20,
                             what="listening, resynchronised once")
            await _notify(fresh_postgres_url, Change("feed", 1))
            await eventually(lambda: _true(listener.applied == 1), within=20, what="change 1")

            pg.blackhole()  # the connection stays open and says nothing any more
            await _notify(fresh_postgres_url, Change("feed", 2))  # lost with the connection
            await eventually(lambda: _true(listener.resyncs == 2), within=20,
                             what="the silent connection replaced and resynchronised")
            await _notify(fresh_postgres_url, Change("profile", 3, user=7))
            await eventually(lambda: _true(listener.applied == 2), within=20, what="change 3")
        finally:
            await listener.stop()
    assert log == ["resync", "change 1", "resync", "change 3"]
    assert applied == [Change("feed", 1), Change("profile", 3, user=7)]


async def _true(value: bool) -> bool:
    return value


def test_a_malformed_change_is_refused_naming_what_is_wrong() -> None:
    with pytest.raises(ValidationError, match="unknown kind 'moved'"):
        decode_change('{"kind": "moved", "id": 1}')
    with pytest.raises(ValidationError, match="malformed payload"):
        decode_change('{"kind": "feed"}')
    assert decode_change(Change("ping", 4, users=(1, 2)).encode()) == Change("ping", 4, users=(1, 2))


async def test_every_postgresql_connection_asks_for_tcp_keepalives(fresh_postgres_url: str) -> None:
    # The server's default waits two hours before probing an idle connection; a NAT or load
    # balancer in between forgets it long before.
    engine = make_engine(fresh_postgres_url)
    try:
        async with engine.connect() as conn:
            got = [(await conn.exec_driver_sql(f"SHOW {name}")).scalar_one()
                   for name in ("tcp_keepalives_idle", "tcp_keepalives_interval",
                                "tcp_keepalives_count")]
    finally:
        await engine.dispose()
    assert got == ["60", "10", "6"]
