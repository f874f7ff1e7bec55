"""The :class:`Store`: every query the service and the API need, and nothing else runs SQL.

Contract (both backends, checked by ``tests/test_store.py``):

* every method is a coroutine that opens its own short transaction and returns
  plain frozen records (:mod:`proxy.store._types`); no connection stays checked
  out between calls;
* any method can raise :class:`~proxy.errors.StorageError` (driver, network,
  lock timeout); integrity violations that mean a domain conflict (a user name
  taken, a feed still read by a rule) raise :class:`~proxy.errors.ConflictError`;
  missing objects raise :class:`~proxy.errors.NotFoundError` subclasses;
* user-scoped methods take ``user_id`` and report another user's object as not
  found, so identifiers never leak across users;
* datetimes in and out are timezone-aware UTC.

The store does not schedule, fetch, parse or evaluate rules; it does not
validate rule specs (the rules layer does), only stores them.
"""

from __future__ import annotations

from proxy.store._audit import Audit
from proxy.store._base import API_KEY_PREFIX_LENGTH, SUMMARY_MAX_CHARS, hash_api_key
from proxy.store._cluster import Cluster
from proxy.store._deliveries import Deliveries
from proxy.store._lease import Leases
from proxy.store._websub import WebSubStore

__all__ = ["API_KEY_PREFIX_LENGTH", "SUMMARY_MAX_CHARS", "Store", "hash_api_key"]


class Store(Deliveries, Leases, Cluster, Audit, WebSubStore):
    """Async repository over one database (SQLite via aiosqlite, or PostgreSQL via asyncpg).

    Create it with :meth:`from_url` (it then owns and disposes the engine) or
    inject an engine. Use as ``async with Store.from_url(url) as store: …`` or
    call :meth:`close`. The schema must exist (:func:`proxy.store.upgrade_database`).
    """
