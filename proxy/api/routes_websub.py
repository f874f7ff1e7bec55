"""``/websub/{callback_id}``: the WebSub callbacks hubs call (issue 44; docs/websub.md).

No API key: a hub knows only the callback URL. The callback id is random and
unguessable (not the feed id), a verification is echoed only for a request the proxy
made, and a content distribution counts only with a valid ``X-Hub-Signature``
(WebSub §5.3, §8). Left out of the OpenAPI document: these routes speak the WebSub
protocol to hubs, not the proxy's API to its clients (plain text, not problem details).
"""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response

from proxy.api.deps import Service

router = APIRouter(prefix="/websub", tags=["websub"], include_in_schema=False)


@router.get("/{callback_id}")
async def verify_intent(callback_id: str, request: Request, service: Service) -> Response:
    """§5.3: echo ``hub.challenge`` for a pending request of this exact topic, else 404;
    §5.2: a denial is recorded."""
    answer = await service.websub_verify(callback_id, dict(request.query_params))
    return Response(answer.body, status_code=answer.status, media_type="text/plain")


@router.post("/{callback_id}")
async def content_distribution(
    callback_id: str, request: Request, service: Service,
    x_hub_signature: Annotated[str | None, Header()] = None,
) -> Response:
    """§7: a signed copy of the updated topic; heard as an update of the feed when the
    signature is valid, else answered 2xx and ignored (§8); a 429 with ``Retry-After`` over
    the subscription's rate limit (the hub retries later)."""
    body = await request.body()
    answer = await service.websub_notify(callback_id, body, x_hub_signature)
    headers = ({"Retry-After": str(max(1, math.ceil(answer.retry_after)))}
               if answer.retry_after is not None else None)
    return Response(answer.body, status_code=answer.status, media_type="text/plain", headers=headers)
