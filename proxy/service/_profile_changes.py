"""This process's changes to users' profiles, announced once stored; readers can wait for none in flight.

Issue 24.4: the API keeps profile listing pages in memory and amends them with
this process's own creates instead of rebuilding them from the database after
each one (a client that creates and then lists must see its profile at once;
the rebuilds were most of the mixed phase's CPU). A page can be amended only
if it is exact: it must hold every change announced before it was read, and
none announced after. A change is announced after its transaction committed,
so a page read while a change is between its commit and its announcement may
or may not hold it, and its total could not be amended right. Hence the gate:

- :meth:`ProfileChanges.changing` wraps a change from its first statement to its
  announcement; changes of the same user go through it side by side;
- :meth:`ProfileChanges.quiet` waits until no change of that user is in flight
  and holds new ones back while a page is read (it goes first: changes that
  arrive while it waits wait for it, so a stream of creates cannot starve it);
- :meth:`ProfileChanges.announce` bumps the user's version (the metrics summary
  cache keys on it) and tells every watcher, in the order of announcement.

What it does not do: see other processes' changes (the API's caches expire for
those), or order changes against each other (the database does).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

from proxy.store import Profile

__all__ = ["ProfileChanged", "ProfileChanges"]


@dataclass(frozen=True, slots=True)
class ProfileChanged:
    """A profile of ``user_id`` was stored (``created``, ``replaced``: as stored) or deleted."""

    user_id: int
    kind: Literal["created", "replaced", "deleted"]
    profile_id: int
    profile: Profile | None = None


@dataclass
class _Gate:
    """One user's changes in flight and the readers waiting for (or holding) a quiet spell."""

    changing: int = 0
    quiet: int = 0
    users: int = 0  # tasks inside or waiting: the gate is dropped when none is left
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # set while changing == 0
    open: asyncio.Event = field(default_factory=asyncio.Event)  # set while quiet == 0

    def __post_init__(self) -> None:
        self.idle.set()
        self.open.set()


class ProfileChanges:
    """Announcements of this process's profile changes, and the gate between them and readers.

    Used on the API's event loop only (the service stores and announces there)."""

    def __init__(self) -> None:
        self._versions: dict[int, int] = {}
        self._gates: dict[int, _Gate] = {}
        self._watchers: list[Callable[[ProfileChanged], None]] = []

    def version(self, user_id: int) -> int:
        """A number that changes whenever this process changes the user's profiles."""
        return self._versions.get(user_id, 0)

    def watch(self, watcher: Callable[[ProfileChanged], None]) -> None:
        """Call ``watcher`` with every change announced from now on (synchronously: it must
        not block, and an exception it raises reaches the announcing request)."""
        self._watchers.append(watcher)

    def announce(self, change: ProfileChanged) -> None:
        self._versions[change.user_id] = self._versions.get(change.user_id, 0) + 1
        for watcher in self._watchers:
            watcher(change)

    @asynccontextmanager
    async def changing(self, user_id: int) -> AsyncIterator[None]:
        """Around a change of ``user_id``'s profiles, from before it is stored until it is
        announced (or has failed): readers in :meth:`quiet` wait for it."""
        gate = self._enter(user_id)
        try:
            while gate.quiet:
                await gate.open.wait()
            gate.changing += 1
            gate.idle.clear()
            try:
                yield
            finally:
                gate.changing -= 1
                if not gate.changing:
                    gate.idle.set()
        finally:
            self._leave(user_id, gate)

    @asynccontextmanager
    async def quiet(self, user_id: int) -> AsyncIterator[None]:
        """While inside, no change of ``user_id``'s profiles by this process is between its
        first statement and its announcement: what is read now holds exactly the changes
        announced so far."""
        gate = self._enter(user_id)
        gate.quiet += 1
        gate.open.clear()
        try:
            while gate.changing:
                await gate.idle.wait()
            yield
        finally:
            gate.quiet -= 1
            if not gate.quiet:
                gate.open.set()
            self._leave(user_id, gate)

    def _enter(self, user_id: int) -> _Gate:
        gate = self._gates.get(user_id)
        if gate is None:
            gate = self._gates[user_id] = _Gate()
        gate.users += 1
        return gate

    def _leave(self, user_id: int, gate: _Gate) -> None:
        gate.users -= 1
        if not gate.users:
            del self._gates[user_id]
