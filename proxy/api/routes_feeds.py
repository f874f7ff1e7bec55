"""``/api/v1/feeds``: register, list with health, get, delete, ping."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status

from proxy.api.deps import Service, UserId
from proxy.api.schemas import FeedIn, FeedOut, PingOut

router = APIRouter(prefix="/api/v1/feeds", tags=["feeds"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=FeedOut)
async def register_feed(body: FeedIn, service: Service, _user: UserId, response: Response) -> FeedOut:
    """Register a feed URL; a URL already known answers 200 with the existing feed."""
    feed, created = await service.register_feed(body.url)
    if not created:
        response.status_code = status.HTTP_200_OK
    return FeedOut.of(feed)


@router.get("", response_model=list[FeedOut])
async def list_feeds(service: Service, _user: UserId) -> list[FeedOut]:
    """Every feed with its health: last probe, outcome, consecutive errors, next allowed time."""
    return [FeedOut.of(h.feed, h) for h in await service.store.list_feeds_with_health()]


@router.get("/{feed_id}", response_model=FeedOut)
async def get_feed(feed_id: int, service: Service, _user: UserId) -> FeedOut:
    return FeedOut.of(await service.store.get_feed(feed_id))


@router.delete("/{feed_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_feed(feed_id: int, service: Service, _user: UserId) -> Response:
    """Delete a feed; 409 while a profile's rules read it."""
    await service.delete_feed(feed_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{feed_id}/ping", status_code=status.HTTP_202_ACCEPTED, response_model=PingOut)
async def ping_feed(
    feed_id: int,
    service: Service,
    x_ping_token: Annotated[str | None, Header()] = None,
    token: Annotated[str | None, Query(description="The feed's ping token (or header X-Ping-Token).")] = None,
) -> PingOut:
    """An update notification, authenticated by the feed's own token (no API key needed).

    The proxy still fetches the feed: the ping only opens or grows CEIs.
    """
    ops = await service.ping(feed_id, x_ping_token or token or "")
    return PingOut(operations=ops)
