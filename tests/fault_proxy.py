"""A small TCP proxy that can cut a service off from its database, for outage tests.

It forwards every connection to ``target`` until :meth:`FaultProxy.cut`: then it
closes every open connection and closes new ones as soon as they are accepted
(the client sees a reset, as when a server goes away) until :meth:`restore`.
:meth:`blackhole` makes the open connections silent instead, closing nothing.
The PostgreSQL server itself keeps running for everyone else on the machine.
"""

from __future__ import annotations

import asyncio
import contextlib


class FaultProxy:
    """``async with FaultProxy(("127.0.0.1", 5432)) as proxy:`` listens on ``proxy.port``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.down = False
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._open: set[int] = set()  # connection numbers
        self._silenced: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        self._drop_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def cut(self) -> None:
        """The database is away: every connection drops, new ones are refused."""
        self.down = True
        self._drop_all()

    def restore(self) -> None:
        self.down = False

    def blackhole(self) -> None:
        """The open connections go silent, as behind a NAT or load balancer that forgot them:
        nothing is closed, bytes are swallowed both ways. New connections work."""
        self._silenced |= self._open


    def _drop_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.accepted += 1
        number = self.accepted
        self._open.add(number)
        self._writers |= {writer, up_writer}
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst, number))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, number: int) -> None:
        try:
            while data := await src.read(65536):
                if number in self._silenced:
                    continue
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open.discard(number)
            self._writers.discard(dst)
            with contextlib.suppress(OSError, RuntimeError):
                dst.transport.abort()
