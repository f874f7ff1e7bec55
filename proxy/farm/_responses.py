"""A feed's HTTP answers: its document or a 304, with validators (RFC 9110 §13)."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from proxy.farm._docs import Rendered
from proxy.farm._http import Response


def feed_response(rendered: Rendered, gz: bool, fresh: bool, link: str | None = None) -> Response:
    """The answer to a GET of ``rendered``: 304 when ``fresh``, else its body (gzipped if ``gz``).

    Either way it carries the validators (ETag per encoding, Last-Modified), ``Vary`` and
    ``Cache-Control: max-age=0``, and ``link`` (WebSub's hub and self) when given.
    """
    validators: tuple[tuple[str, str], ...] = (
        ("ETag", rendered.etag_gzip if gz else rendered.etag),
        ("Last-Modified", rendered.last_modified),
        ("Vary", "Accept-Encoding"),
        ("Cache-Control", "max-age=0"),
    )
    if link is not None:
        validators = (*validators, ("Link", link))
    if fresh:
        return Response(304, validators)
    if gz:
        return Response(
            200,
            (*validators, ("Content-Type", rendered.content_type), ("Content-Encoding", "gzip")),
            rendered.gzipped(),
        )
    return Response(200, (*validators, ("Content-Type", rendered.content_type)), rendered.body)


def not_modified_since(last_modified: datetime, ims: str) -> bool:
    """Whether a document last modified at ``last_modified`` is fresh for ``If-Modified-Since: ims``."""
    try:
        since = parsedate_to_datetime(ims)
    except (TypeError, ValueError):
        return False  # RFC 9110 §13.1.3: an invalid date is ignored
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return last_modified <= since
