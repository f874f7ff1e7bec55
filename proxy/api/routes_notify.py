"""``/api/v1/events`` (a live Server-Sent Events stream), ``/api/v1/deliveries`` (the outbox
as its owner sees it: dead letters, retries) and ``/api/v1/targets`` (notify targets,
their secrets). Every route sees only the caller's own objects; another user's is 404."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from proxy.api.deps import Service, UserId
from proxy.api.limits import MAX_BIG_ID, DeliveryId, TargetId
from proxy.api.paging import Cursor, Limit, Page, decode_cursor, page
from proxy.api.problems import problem_responses
from proxy.api.schemas import DeliveryOut, SecretRotationIn, TargetOut
from proxy.notify.payload import Notification
from proxy.store import NotificationEvent

router = APIRouter(prefix="/api/v1", tags=["notifications"])


_SSE_DOC = {
    200: {
        "description": (
            "`text/event-stream`: per event, `id:` (monotonic event id), `event:` "
            "(`captured` or `missed`) and `data:` (the Notification document, one line of "
            "JSON); `: keep-alive` comments while idle."
        ),
        "content": {
            "text/event-stream": {"schema": {"$ref": "#/components/schemas/Notification"}}
        },
    }
}


def _sse(event: NotificationEvent | None) -> str:
    if event is None:
        return ": keep-alive\n\n"
    # The payload is compact JSON: no newline in it, so one data: line (WHATWG SSE §9.2.6).
    return f"id: {event.id}\nevent: {event.type}\ndata: {event.payload}\n\n"


@router.get("/events", response_class=StreamingResponse, responses=_SSE_DOC)  # type: ignore[arg-type]
async def events(
    service: Service,
    user: UserId,
    last_event_id: Annotated[str | None, Header(description="Resume after this event id.")] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_BIG_ID, description="Resume after this event id (when "
                                       "the client cannot send Last-Event-ID); 0 replays all.")] = None,
) -> StreamingResponse:
    """Your profiles' events (CEIs captured or missed) as Server-Sent Events, live.

    Without ``Last-Event-ID`` (or ``after``) the stream starts with the next event; with
    it, every later event is sent first, none twice."""
    start = after
    if last_event_id is not None and last_event_id.strip().isdigit():
        start = int(last_event_id.strip())
    if start is None:
        start = await service.store.last_event_id(user)

    async def body() -> AsyncIterator[str]:
        yield ": connected\n\n"  # headers and a first byte now, not at the first event
        async for event in service.stream_events(user, start):
            yield _sse(event)

    return StreamingResponse(
        body(), media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/events/recent", response_model=Page[Notification])
async def recent_events(
    service: Service, user: UserId, request: Request, response: Response,
    limit: Limit = 50, cursor: Cursor = None,
) -> Page[Notification]:
    """Your newest notification documents, newest first (the same JSON the stream sends)."""
    before = decode_cursor(cursor, "cursor", (int,))
    rows = await service.store.list_events(user, limit=limit + 1,
                                           before_id=before[0] if before else None)
    return page(rows, lambda e: Notification.model_validate_json(e.payload), lambda e: [e.id],
                request=request, response=response, limit=limit)


@router.get("/deliveries", response_model=Page[DeliveryOut])
async def list_deliveries(
    service: Service,
    user: UserId,
    request: Request,
    response: Response,
    state: Literal["pending", "delivered", "failed"] | None = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> Page[DeliveryOut]:
    """Your deliveries, newest first; ``state=failed`` lists the dead letters."""
    before = decode_cursor(cursor, "cursor", (int,))
    rows = await service.store.list_deliveries(user, state, limit=limit + 1,
                                               before_id=before[0] if before else None)
    return page(rows, DeliveryOut.of, lambda d: [d.id], request=request, response=response,
                limit=limit)


@router.get("/deliveries/{delivery_id}", response_model=DeliveryOut)
async def get_delivery(delivery_id: DeliveryId, service: Service, user: UserId) -> DeliveryOut:
    """One delivery with the document it sends."""
    delivery = await service.store.get_delivery(user, delivery_id)
    event = await service.store.get_event(user, delivery.event_id)
    return DeliveryOut.of(delivery, Notification.model_validate_json(event.payload))


@router.post("/deliveries/{delivery_id}/retry", response_model=DeliveryOut,
             responses=problem_responses(409))
async def retry_delivery(delivery_id: DeliveryId, service: Service, user: UserId) -> DeliveryOut:
    """Send a failed (or pending) delivery again now, retried for a new window; 409 if it
    was delivered or its target is disabled."""
    return DeliveryOut.of(await service.retry_delivery(user, delivery_id))


@router.get("/targets", response_model=Page[TargetOut])
async def list_targets(
    service: Service, user: UserId, request: Request, response: Response,
    limit: Limit = 100, cursor: Cursor = None,
) -> Page[TargetOut]:
    """Your notify targets by id (created by the profiles that name them; secrets never listed)."""
    after = decode_cursor(cursor, "cursor", (int,))
    rows = await service.store.list_targets(user, limit=limit + 1,
                                            after_id=after[0] if after else None)
    return page(rows, TargetOut.of, lambda t: [t.id], request=request, response=response,
                limit=limit)


@router.post("/targets/{target_id}/secret", response_model=TargetOut,
             responses=problem_responses(409))
async def rotate_secret(
    target_id: TargetId, service: Service, user: UserId, body: SecretRotationIn | None = None
) -> TargetOut:
    """A new secret for a webhook target, shown once; the previous one keeps signing (a
    second signature) for the overlap."""
    overlap = body.overlap_seconds if body is not None else None
    return TargetOut.of(await service.rotate_target_secret(user, target_id, overlap))


@router.post("/targets/{target_id}/enable", response_model=TargetOut)
async def enable_target(target_id: TargetId, service: Service, user: UserId) -> TargetOut:
    """Enable a target disabled by a 410 Gone (then retry its dead letters)."""
    return TargetOut.of(await service.enable_target(user, target_id))
