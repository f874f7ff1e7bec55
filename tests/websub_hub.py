"""A real WebSub hub nobody here wrote, for the end-to-end tests: flask-websub's ``Hub``.

flask-websub runs its hub's work (verifying intent, fetching the topic, distributing
content) as Celery tasks. Here Celery runs them eagerly (``task_always_eager``), in the
thread of the hub's request, so no broker or worker is needed: a subscription request
is verified before the hub answers it, a publish is distributed before the hub answers
the publisher. The hub is served by werkzeug's threaded server on 127.0.0.1.

(No tests here.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import Celery
from flask import Flask
from flask_websub.hub import Hub, SQLite3HubStorage
from werkzeug.serving import make_server

from proxy.ports import free_port


@dataclass
class RunningHub:
    url: str
    hub: Any
    storage: Any

    def callbacks(self, topic: str) -> list[tuple[str, str]]:
        """The hub's live subscriptions of ``topic``: (callback URL, secret)."""
        return list(self.storage.get_callbacks(topic))


@contextmanager
def websub_hub(tmp_path: Path, **config: Any) -> Iterator[RunningHub]:
    settings = {"PUBLISH_SUPPORTED": True, "HUB_MIN_LEASE_SECONDS": 60, "REQUEST_TIMEOUT": 5,
                **config}
    app = Flask("websub_hub_for_tests")
    app.config.update(settings)
    celery = Celery("websub_hub_for_tests", broker="memory://", backend="cache+memory://")
    celery.conf.task_always_eager = True
    storage = SQLite3HubStorage(str(tmp_path / "hub.sqlite3"))
    hub = Hub(storage, celery, **settings)
    app.register_blueprint(hub.build_blueprint(url_prefix="/hub"))
    port = free_port()
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="websub-hub", daemon=True)
    thread.start()
    try:
        yield RunningHub(f"http://127.0.0.1:{port}/hub", hub, storage)
    finally:
        server.shutdown()
        thread.join(timeout=5)
