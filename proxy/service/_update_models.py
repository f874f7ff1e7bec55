"""The feeds' update models across restarts and across processes: saved, restored, read.

The leader learns every feed's update model on the loop's thread (each probe, each
trusted ping). :class:`UpdateModels` saves them to ``service_state['update_models']``
(every five minutes and at shutdown), restores them when a process starts to lead,
and answers "what does the model of this feed say now" in any process: the leader
from the live models, a process without the loop (an API replica, a standby) from
the copy the leader saved last.

What it does not do: learn (the loop and :mod:`~proxy.service._arrivals` teach the
models), or decide what to probe.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from proxy.errors import StorageError
from proxy.rules import FeedModelEstimate, FeedUpdateModels, UpdateModelStateError
from proxy.service._feeds import update_model_settings
from proxy.service._shared import Shared, live_estimate
from proxy.service.runtime import Runtime
from proxy.store import Feed, Store

log = structlog.get_logger("proxy.service")

UPDATE_MODELS_KEY = "update_models"
#: How long a process that does not run the loop (an API replica, a standby) reuses the update
#: models it read from the database (:meth:`UpdateModels.update_model`, ``ProxyService.plan``).
#: The leader saves them every five minutes, so a minute adds little staleness.
SAVED_MODELS_TTL_SECONDS = 60.0


class UpdateModels:
    """Save, restore and read the feeds' update models (see the module's docstring)."""

    def __init__(self, shared: Shared) -> None:
        self._s = shared
        #: Without a loop: the update models last read from the database, and when (monotonic).
        self._saved_models: tuple[float, FeedUpdateModels] | None = None
        self._saved_models_lock = asyncio.Lock()

    async def save(self) -> None:
        """Persist every feed's update model (``service_state['update_models']``) and count kinds.

        Every five minutes and at shutdown: a restart resumes the learning where it
        stopped. The gauge ``proxy_update_models{kind}`` is refreshed at the same time.
        """
        s = self._s
        rt = s.running

        def read() -> tuple[dict[str, int], Any]:  # on the loop's thread: it learns meanwhile
            kinds = rt.models.kind_counts(slot.resource for slot in rt.feeds.by_id.values())
            return {str(kind): n for kind, n in kinds.items()}, rt.models.snapshot()

        kinds, snapshot = await s.host.call(read)
        for name, n in kinds.items():
            s.metrics.update_models.labels(kind=name).set(n)
        try:
            await s.store.set_state(UPDATE_MODELS_KEY, snapshot)
        except StorageError as exc:
            s.metrics.db_errors.inc()
            log.error("update_models_not_saved", error=str(exc))
            raise

    async def restore(self, store: Store, runtime: Runtime) -> None:
        """The models as saved last into ``runtime`` (a process starting to lead)."""
        data = await store.get_state(UPDATE_MODELS_KEY)
        if data is None:
            return
        try:
            runtime.models.restore(data)
        except UpdateModelStateError as exc:
            # Learnt state only: start learning afresh rather than refuse to start.
            log.warning("update_models_not_restored", reason=str(exc))
            return
        # The background ranking reads each feed's evidence from its slot: without this, every
        # feed would look unseen until its next probe, and the spare budget would go by the
        # rules' weights alone for the first hundreds of chronons after a restart.
        clock = self._s.clock
        at = clock.now().timestamp()
        for slot in runtime.feeds.by_id.values():
            slot.learn_rate(runtime.models, at, clock)
        log.info("update_models_restored", feeds=len(runtime.models.feeds()))

    async def update_model(self, feed: Feed) -> FeedModelEstimate | None:
        """The feed's update model now (``None``: the leader does not probe this feed).

        The leader reads it on the loop's thread, where probes change it. A process that does
        not run the loop (an API replica, a standby) reads the models the leader saved last
        (every five minutes and at shutdown: :meth:`saved`), so its answer may be
        that much older; it never fails for want of a loop.
        """
        after = self._s.clock.now().timestamp()
        rt = self._s.runtime
        if rt is None:
            return (await self.saved()).estimate(feed.resource, after=after)

        return await self._s.host.call(lambda: live_estimate(rt, feed.id, after))

    async def saved(self) -> FeedUpdateModels:
        """The update models as the leader last saved them (``service_state['update_models']``),
        read at most once every :data:`SAVED_MODELS_TTL_SECONDS`; the population prior alone if
        none are saved or they do not read (logged). For processes without a loop: read them,
        never change them (the copy is shared by the requests of the next minute)."""

        def fresh() -> FeedUpdateModels | None:
            cached = self._saved_models
            return cached[1] if cached is not None and time.monotonic() - cached[0] < SAVED_MODELS_TTL_SECONDS else None

        if (models := fresh()) is not None:
            return models
        async with self._saved_models_lock:  # one read at a time; the others take its result
            if (models := fresh()) is not None:
                return models
            s = self._s
            data = await s.store.get_state(UPDATE_MODELS_KEY)
            models = FeedUpdateModels(s.update_model_settings
                                      or update_model_settings(s.settings.chronon_seconds))
            if data is not None:
                try:  # 10,000 feeds' records take a while to read: not on the API's event loop
                    await asyncio.to_thread(models.restore, data)
                except UpdateModelStateError as exc:
                    log.warning("saved_update_models_not_read", reason=str(exc))
            self._saved_models = (time.monotonic(), models)
            return models
