"""Delivery of notifications (issue 19): the document, its signatures, its text, its senders.

* :mod:`proxy.notify.payload` — the versioned notification document (pydantic models);
* :mod:`proxy.notify.signing` — Standard Webhooks secrets and signatures;
* :mod:`proxy.notify.render` — the document as a title and text, for Apprise targets;
* :mod:`proxy.notify.targets` — checking notify targets (SSRF guard, Apprise's parser);
* :mod:`proxy.notify.senders` — one HTTP POST / one Apprise call per attempt.

The first three are pure (the store renders documents with them); the last two
do I/O. Retrying, back-off and the outbox are the service's
(:mod:`proxy.service.dispatch`). This ``__init__`` imports nothing, so importing
the document does not pull in aiohttp or Apprise.
"""
