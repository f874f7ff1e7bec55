"""A real WebSub hub for the farm's publishers: flask-websub's ``Hub``, nobody here wrote it.

``proxy farm hub`` serves it, for the README's walk-through and by hand;
``proxy bench live --push-share`` runs it in the bench's process. flask-websub runs its
hub's work (verifying intent, fetching the topic, distributing content) as Celery tasks;
here Celery runs them eagerly, in the thread of the hub's request, so no broker or worker
is needed: a publish request is distributed to the subscribers before the hub answers
the publisher. Served by werkzeug's threaded server, in a thread.

flask-websub and Celery are test dependencies (``pip install -e '.[test]'``): without them
:func:`serve_hub` raises :class:`HubUnavailableError` naming them. (``tests/websub_hub.py``
is the same hub, with its storage at hand, for the tests.)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class HubUnavailableError(RuntimeError):
    """flask-websub or Celery is not installed."""


@contextmanager
def serve_hub(folder: Path, *, host: str = "127.0.0.1", port: int = 0, **config: Any) -> Iterator[str]:
    """Run the hub until the block ends; yields its URL (``http://host:port/hub``). Its
    subscriptions live in ``folder/hub.sqlite3`` (deleted first); ``port`` 0: a free one;
    ``config``: flask-websub's settings (``HUB_MIN_LEASE_SECONDS`` …)."""
    try:
        from celery import Celery
        from flask import Flask
        from flask_websub.hub import Hub, SQLite3HubStorage
        from werkzeug.serving import make_server
    except ImportError as exc:  # pragma: no cover - the test extra is installed where this runs
        raise HubUnavailableError(f"the WebSub hub needs flask-websub and celery (the test extra): {exc}") from exc
    settings = {"PUBLISH_SUPPORTED": True, "HUB_MIN_LEASE_SECONDS": 60, "REQUEST_TIMEOUT": 5, **config}
    app = Flask("proxy_farm_hub")
    app.config.update(settings)
    celery = Celery("proxy_farm_hub", broker="memory://", backend="cache+memory://")
    celery.conf.task_always_eager = True
    db = folder / "hub.sqlite3"
    db.unlink(missing_ok=True)
    hub = Hub(SQLite3HubStorage(str(db)), celery, **settings)
    app.register_blueprint(hub.build_blueprint(url_prefix="/hub"))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = make_server(host, port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="websub-hub", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_port}/hub"
    finally:
        server.shutdown()
        thread.join(timeout=5)
