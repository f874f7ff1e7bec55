"""``/api/v1/profiles``: profiles with their rules, their CEIs and captured entries; the metrics summary."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, status

from proxy.api.deps import READ_TTL_SECONDS, Cache, Pages, Service, UserId
from proxy.api.limits import ProfileId
from proxy.api.paging import (
    Cursor,
    Limit,
    Page,
    Since,
    decode_cursor,
    page,
    page_params,
    parse_since,
)
from proxy.api.problems import problem_responses
from proxy.api.schemas import (
    CapturedEntryOut,
    CeiOut,
    MetricsSummaryOut,
    ProfileOut,
    ProfileStatusOut,
    cei_out,
)
from proxy.rules import ProfileSpec
from proxy.store import Profile

router = APIRouter(prefix="/api/v1", tags=["profiles"])

After = Annotated[str | None, Query(
    max_length=200, description="Opaque: a `cursor` handed out with `since` or `after`; "
                                "only what came after it, oldest first.")]


@router.post("/profiles", status_code=status.HTTP_201_CREATED, response_model=ProfileOut,
             responses=problem_responses(409))
async def create_profile(body: ProfileSpec, service: Service, user: UserId) -> ProfileOut:
    """Create a profile; rules name feeds by their ids (as strings or numbers in JSON strings)."""
    return ProfileOut.of(await service.create_profile(user, body))


@router.get("/profiles", response_model=Page[ProfileOut])
async def list_profiles(
    service: Service, user: UserId, pages: Pages, request: Request,
    limit: Limit = 100, cursor: Cursor = None,
) -> Response:
    """Your profiles by id, one page (docs/api.md, "Lists"); a page is read at most once a
    second however many clients poll it, and shows your own changes at once."""
    after = decode_cursor(cursor, "cursor", (int,))
    after_id = after[0] if after else None

    async def load() -> tuple[list[Profile], int]:
        rows = await service.store.list_profiles(user, limit=limit + 1, after_id=after_id)
        return rows, await service.store.count_profiles(user)

    # The query string is the key: the page and its `next` link depend on all of it.
    body, link = await pages.get(user, request.url.query, after=after_id, limit=limit,
                                 path=request.url.path, params=page_params(request),
                                 ttl=READ_TTL_SECONDS, load=load)
    return Response(body, media_type="application/json",
                    headers={"Link": link} if link is not None else None)


@router.get("/profiles/{profile_id}", response_model=ProfileOut)
async def get_profile(profile_id: ProfileId, service: Service, user: UserId) -> ProfileOut:
    return ProfileOut.of(await service.store.get_profile(user, profile_id))


@router.get("/profiles/{profile_id}/status", response_model=ProfileStatusOut)
async def profile_status(profile_id: ProfileId, service: Service, user: UserId) -> ProfileStatusOut:
    """Where each rule stands and what it waits for: the feeds whose next update it needs, a
    watch rule's CEI being built, a trigger rule's next check and its fired CEIs not yet
    decided; with the feeds' health and when each is expected to change next (docs/api.md,
    "Rule status")."""
    return ProfileStatusOut.of(await service.profile_status(user, profile_id))


@router.put("/profiles/{profile_id}", response_model=ProfileOut, responses=problem_responses(409))
async def replace_profile(
    profile_id: ProfileId, body: ProfileSpec, service: Service, user: UserId
) -> ProfileOut:
    return ProfileOut.of(await service.replace_profile(user, profile_id, body))


@router.delete("/profiles/{profile_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_profile(profile_id: ProfileId, service: Service, user: UserId) -> Response:
    await service.delete_profile(user, profile_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/profiles/{profile_id}/ceis", response_model=Page[CeiOut])
async def list_ceis(
    profile_id: ProfileId,
    service: Service,
    user: UserId,
    request: Request,
    response: Response,
    state: Literal["pending", "captured", "missed"] | None = None,
    limit: Limit = 100,
    cursor: Cursor = None,
    since: Since = None,
    after: After = None,
) -> Page[CeiOut]:
    """The profile's CEIs with their EIs' windows and capture times, newest first.

    With ``since`` (resolved at or after) or ``after`` (a ``cursor`` this list handed out
    in that mode): the resolved CEIs only, in the order they were resolved, oldest first;
    ``cursor`` is then always set: pass it as ``after`` next time to read each once."""
    start_of = service.clock.start_of
    when = parse_since(since)
    if when is not None or after is not None:
        position = decode_cursor(after, "after", (int,))
        start = position[0] if position else 0
        resolved = await service.store.resolved_ceis(
            user, profile_id, after_event=start, since=when, state=state, limit=limit + 1)
        return page(resolved, lambda r: cei_out(r[1], start_of), lambda r: [r[0]],
                    request=request, response=response, limit=limit, param="after",
                    start=[start])
    before = decode_cursor(cursor, "cursor", (int, str))
    ceis = await service.store.list_ceis(
        user, profile_id, state, limit=limit + 1,
        before=(before[0], before[1]) if before else None)
    return page(ceis, lambda c: cei_out(c, start_of), lambda c: [c.release, c.id],
                request=request, response=response, limit=limit,
                total=await service.store.count_ceis(user, profile_id, state))


@router.get("/profiles/{profile_id}/entries", response_model=Page[CapturedEntryOut])
async def captured_entries(
    profile_id: ProfileId,
    service: Service,
    user: UserId,
    request: Request,
    response: Response,
    limit: Limit = 50,
    cursor: Cursor = None,
    since: Since = None,
    after: After = None,
) -> Page[CapturedEntryOut]:
    """Entries first seen by probes that captured EIs of the profile's CEIs, newest first.

    With ``since`` (first seen at or after) or ``after``: oldest first, and ``cursor`` is
    always set: pass it as ``after`` next time to read each entry once."""
    when = parse_since(since)
    store = service.store
    if when is not None or after is not None:
        position = decode_cursor(after, "after", (int, int))
        start = (position[0], position[1]) if position else (0, 0)
        rows = await store.captured_entries(user, profile_id, limit=limit + 1, after=start,
                                            since=when)
        return page(rows, CapturedEntryOut.of, lambda e: [e.entry.id, e.ei_id],
                    request=request, response=response, limit=limit, param="after",
                    start=list(start))
    before = decode_cursor(cursor, "cursor", (int, int))
    rows = await store.captured_entries(user, profile_id, limit=limit + 1,
                                        before=(before[0], before[1]) if before else None)
    return page(rows, CapturedEntryOut.of, lambda e: [e.entry.id, e.ei_id],
                request=request, response=response, limit=limit)


@router.get("/metrics/summary", response_model=MetricsSummaryOut, tags=["metrics"])
async def metrics_summary(
    service: Service, user: UserId, cache: Cache,
    chronons: Annotated[int, Query(ge=1, le=100_000)] = 60,
) -> Response:
    """Completeness overall and per profile (your profiles), budget use over recent chronons;
    computed at most once a second per user and ``chronons`` however many clients poll it."""
    async def build() -> bytes:
        summary = await service.store.metrics_summary(user, recent_chronons=chronons)
        return MetricsSummaryOut.of(summary).model_dump_json().encode()

    body = await cache.get(("summary", user, chronons), service.profiles_version(user),
                           READ_TTL_SECONDS, build)
    return Response(body, media_type="application/json")
