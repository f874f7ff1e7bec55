"""``/api/v1/feeds/opml``: import your subscriptions from OPML, export your feeds as OPML 2.0.

The import takes the document as the request body (``Content-Type: text/x-opml``,
``application/xml`` or ``text/xml``) or as the multipart field ``file`` (what a browser
form sends); it answers 200 with one line per outline, so a file with some bad URLs
still registers the good ones. Included before the feeds router: ``opml`` is not a
``{feed_id}``.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from proxy.api.deps import Service, UserId
from proxy.errors import ValidationError
from proxy.feeds.opml import MAX_OPML_BYTES, OpmlError
from proxy.service.opml import OpmlOutcome, export_opml, import_opml

router = APIRouter(prefix="/api/v1/feeds", tags=["feeds"])

OPML_TYPES = ("text/x-opml", "application/xml", "text/xml", "application/octet-stream")


class OpmlOutlineOut(BaseModel):
    """One outline of the imported document and what became of it."""

    url: str
    title: str
    status: Literal["added", "known", "refused"]
    feed_id: int | None = Field(None, description="The feed's id (as in `GET /api/v1/feeds`) unless refused.")
    reason: str | None = Field(None, description="Why the URL was refused (scheme, private address, malformed).")


class OpmlImportOut(BaseModel):
    """Counts, then one line per feed outline in document order (nested folders flattened)."""

    added: int
    known: int
    refused: int
    outlines: list[OpmlOutlineOut]

    @classmethod
    def of(cls, outcomes: list[OpmlOutcome]) -> OpmlImportOut:
        lines = [OpmlOutlineOut(url=o.url, title=o.title, status=o.status, feed_id=o.feed_id,
                                reason=o.reason) for o in outcomes]
        return cls(added=sum(o.status == "added" for o in outcomes),
                   known=sum(o.status == "known" for o in outcomes),
                   refused=sum(o.status == "refused" for o in outcomes), outlines=lines)


_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "text/x-opml": {"schema": {"type": "string"}},
            "application/xml": {"schema": {"type": "string"}},
            "multipart/form-data": {
                "schema": {"type": "object", "required": ["file"],
                           "properties": {"file": {"type": "string", "format": "binary"}}}
            },
        },
    }
}


async def opml_document(request: Request) -> bytes:
    """The OPML bytes of a request: the body, or its multipart field ``file``."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media == "multipart/form-data":
        # ``async with`` closes the spooled upload files whatever happens.
        async with request.form(max_files=2, max_fields=10, max_part_size=MAX_OPML_BYTES) as form:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise OpmlError("the multipart body has no file field 'file'")
            return await upload.read()
    if media not in OPML_TYPES:
        raise ValidationError(
            f"Content-Type {media or '(none)'!r} is not OPML: send text/x-opml, application/xml, "
            "or multipart/form-data with a field 'file'")
    return await request.body()


@router.post("/opml", response_model=OpmlImportOut, openapi_extra=_BODY_DOC)
async def import_feeds(request: Request, service: Service, user: UserId) -> OpmlImportOut:
    """Register every feed of an OPML subscription list; per outline ``added``, ``known``
    (already yours) or ``refused`` with the reason. 422 if the document cannot be read."""
    return OpmlImportOut.of(await import_opml(service, user, await opml_document(request)))


@router.get("/opml", response_class=Response,
            responses={200: {"content": {"text/x-opml": {}}, "description": "OPML 2.0"}})
async def export_feeds(service: Service, user: UserId) -> Response:
    """Your feeds as OPML 2.0: one ``xmlUrl`` outline per registration (the URL as you gave it)."""
    name = (await service.store.get_user(user)).name
    body = await export_opml(service, user, user_name=name)
    return Response(body, media_type="text/x-opml; charset=utf-8",
                    headers={"Content-Disposition": 'attachment; filename="feeds.opml"'})
