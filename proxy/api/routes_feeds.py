"""``/api/v1/feeds``: register, list with health, get, delete, ping, rotate the ping token.

Every route with an API key sees only the caller's own registrations: another user's
feed answers 404 exactly like a missing one (issue 22). ``{feed_id}`` is the shared
feed's id, so rule specs and EIs name feeds the same way for everyone; the URL and the
ping token in a response are the caller's own.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status

from proxy.api.deps import Service, UserId
from proxy.api.limits import FeedId
from proxy.api.paging import Cursor, Limit, Page, decode_cursor, page
from proxy.api.problems import problem_responses
from proxy.api.schemas import FeedIn, FeedOut, PingOut, PingTokenOut, PushOut, UpdateModelOut

router = APIRouter(prefix="/api/v1/feeds", tags=["feeds"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=FeedOut,
             responses={200: {"model": FeedOut, "description": "A URL you already registered: your registration."}})
async def register_feed(body: FeedIn, service: Service, user: UserId, response: Response) -> FeedOut:
    """Register a feed URL; a URL you already registered answers 200 with your registration."""
    registered, created = await service.register_feed(user, body.url)
    if not created:
        response.status_code = status.HTTP_200_OK
    return FeedOut.of(registered)


@router.get("", response_model=Page[FeedOut])
async def list_feeds(
    service: Service, user: UserId, request: Request, response: Response,
    limit: Limit = 100, cursor: Cursor = None,
) -> Page[FeedOut]:
    """Your feeds by id, with their health: last probe, outcome, consecutive errors, next
    allowed time. One page (docs/api.md, "Lists")."""
    after = decode_cursor(cursor, "cursor", (int,))
    rows = await service.store.list_registered_feeds(
        user, limit=limit + 1, after_id=after[0] if after else None)
    return page(rows, FeedOut.of, lambda r: [r.feed.id], request=request, response=response,
                limit=limit, total=await service.store.count_registered_feeds(user))


@router.get("/{feed_id}", response_model=FeedOut)
async def get_feed(feed_id: FeedId, service: Service, user: UserId) -> FeedOut:
    """One of your feeds with its health and why: the last HTTP status, the error in words, the
    last success, why it may not be probed before ``next_allowed_at``, its recent probes, and
    its learnt update model (kind, rate, next update), and its WebSub subscription (``push``,
    null when none: docs/websub.md). An API replica or a standby shows the
    model the leader saved last (at most five minutes old)."""
    # The probes first, then the feed: the loop writes a probe and the feed's health in one
    # transaction, so a feed read after its recent probes is never older than they are (read
    # the other way round, a probe landing in between showed a probe with no outcome). The
    # feed's read is also the ownership check: nothing is returned before it passes.
    activity = await service.store.feed_activity(feed_id)
    registered = await service.store.get_registered_feed(user, feed_id)
    out = FeedOut.of(registered).with_activity(activity, service.clock.now())
    model = await service.update_model(registered.feed)
    if model is not None:
        out.update_model = UpdateModelOut.of(model)
    push = await service.push_status(feed_id)
    if push is not None:
        out.push = PushOut(hub=push.hub, state=push.state, lease_expires_at=push.lease_expires_at,
                           last_notification_at=push.last_notification_at)
    return out


@router.delete("/{feed_id}", status_code=status.HTTP_204_NO_CONTENT, responses=problem_responses(409))
async def delete_feed(feed_id: FeedId, service: Service, user: UserId) -> Response:
    """Delete your registration; 409 while your profiles' rules read the feed."""
    await service.delete_feed(user, feed_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{feed_id}/ping-token", response_model=PingTokenOut)
async def rotate_ping_token(feed_id: FeedId, service: Service, user: UserId) -> PingTokenOut:
    """A new ping token for your registration; the old one stops working at once."""
    return PingTokenOut(ping_token=(await service.rotate_ping_token(user, feed_id)).ping_token)


@router.post("/{feed_id}/ping", status_code=status.HTTP_202_ACCEPTED, response_model=PingOut,
             responses=problem_responses(401, 429))
async def ping_feed(
    feed_id: FeedId,
    service: Service,
    x_ping_token: Annotated[str | None, Header()] = None,
    token: Annotated[str | None, Query(description="Your ping token for the feed (or header X-Ping-Token).")] = None,
) -> PingOut:
    """An update notification, authenticated by a registration's ping token (no API key needed).

    Only the rules of the user whose token it is hear it. The proxy still fetches the
    feed: the ping only opens or grows CEIs. Pings of one feed are rate-limited (a token
    bucket per feed, whoever sends them): over it, 429 with ``Retry-After``.
    """
    ops = await service.ping(feed_id, x_ping_token or token or "")
    return PingOut(operations=ops)
