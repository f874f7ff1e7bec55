"""A real WebSub hub for ``proxy bench live --push-share``: flask-websub's ``Hub``, nobody here wrote it.

flask-websub runs its hub's work (verifying intent, fetching the topic, distributing
content) as Celery tasks; here Celery runs them eagerly, in the thread of the hub's
request, so no broker or worker is needed: a publish request is distributed to the
subscribers before the hub answers the publisher. Served by werkzeug's threaded server on
127.0.0.1, in a thread of the benchmark's process (as the farm is).

flask-websub and Celery are test dependencies (``pip install -e '.[test]'``): without them
:func:`serve_hub` raises :class:`~proxy.bench.live.BenchError` naming them.
(``tests/websub_hub.py`` is the same hub for the tests.)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proxy.ports import free_port


@contextmanager
def serve_hub(folder: Path, **config: Any) -> Iterator[str]:
    """Run the hub until the block ends; yields its URL. Its subscriptions live in
    ``folder/hub.sqlite3`` (deleted first)."""
    try:
        from celery import Celery
        from flask import Flask
        from flask_websub.hub import Hub, SQLite3HubStorage
        from werkzeug.serving import make_server
    except ImportError as exc:  # pragma: no cover - the test extra is installed where this runs
        from proxy.bench.live import BenchError

        raise BenchError(f"--push-share needs flask-websub and celery (the test extra): {exc}") from exc
    settings = {"PUBLISH_SUPPORTED": True, "HUB_MIN_LEASE_SECONDS": 60, "REQUEST_TIMEOUT": 5, **config}
    app = Flask("proxy_bench_hub")
    app.config.update(settings)
    celery = Celery("proxy_bench_hub", broker="memory://", backend="cache+memory://")
    celery.conf.task_always_eager = True
    db = folder / "hub.sqlite3"
    db.unlink(missing_ok=True)
    hub = Hub(SQLite3HubStorage(str(db)), celery, **settings)
    app.register_blueprint(hub.build_blueprint(url_prefix="/hub"))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    port = free_port()
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="bench-websub-hub", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/hub"
    finally:
        server.shutdown()
        thread.join(timeout=5)
