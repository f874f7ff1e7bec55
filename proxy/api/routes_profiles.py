"""``/api/v1/profiles``: profiles with their rules, their CEIs and captured entries; the metrics summary."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status

from proxy.api.deps import READ_TTL_SECONDS, Cache, Lists, Service, UserId
from proxy.api.schemas import (
    CapturedEntryOut,
    CeiOut,
    MetricsSummaryOut,
    ProfileOut,
    cei_out,
)
from proxy.rules import ProfileSpec
from proxy.store import Profile

router = APIRouter(prefix="/api/v1", tags=["profiles"])

Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0)]


def _listed(profile: Profile) -> bytes:
    """The profile as ``GET /profiles`` lists it (no secrets: those are shown once, on creation)."""
    return ProfileOut.of(profile).model_copy(update={"new_targets": []}).model_dump_json().encode()


@router.post("/profiles", status_code=status.HTTP_201_CREATED, response_model=ProfileOut)
async def create_profile(body: ProfileSpec, service: Service, user: UserId, lists: Lists) -> ProfileOut:
    """Create a profile; rules name feeds by their ids (as strings or numbers in JSON strings)."""
    profile = await service.create_profile(user, body)
    lists.put(("profiles", user), profile.id, _listed(profile))
    return ProfileOut.of(profile)


@router.get("/profiles", response_model=list[ProfileOut])
async def list_profiles(service: Service, user: UserId, lists: Lists) -> Response:
    """Your profiles. The body is kept up to date by your writes and reloaded every second
    (issue 24.4: clients polling it must not take CPU or connections from the chronon loop)."""
    async def load() -> list[tuple[int, bytes]]:
        items = []
        for i, p in enumerate(await service.store.list_profiles(user), 1):
            items.append((p.id, _listed(p)))
            if i % 200 == 0:  # a long listing must not hold the chronon loop's tick back
                await asyncio.sleep(0)
        return items

    return Response(await lists.get(("profiles", user), READ_TTL_SECONDS, load),
                    media_type="application/json")


@router.get("/profiles/{profile_id}", response_model=ProfileOut)
async def get_profile(profile_id: int, service: Service, user: UserId) -> ProfileOut:
    return ProfileOut.of(await service.store.get_profile(user, profile_id))


@router.put("/profiles/{profile_id}", response_model=ProfileOut)
async def replace_profile(
    profile_id: int, body: ProfileSpec, service: Service, user: UserId, lists: Lists
) -> ProfileOut:
    profile = await service.replace_profile(user, profile_id, body)
    lists.put(("profiles", user), profile.id, _listed(profile))
    return ProfileOut.of(profile)


@router.delete("/profiles/{profile_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_profile(profile_id: int, service: Service, user: UserId, lists: Lists) -> Response:
    await service.delete_profile(user, profile_id)
    lists.drop(("profiles", user), profile_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/profiles/{profile_id}/ceis", response_model=list[CeiOut])
async def list_ceis(
    profile_id: int,
    service: Service,
    user: UserId,
    state: Literal["pending", "captured", "missed"] | None = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> list[CeiOut]:
    """The profile's CEIs (newest first) with their EIs' windows and capture times."""
    ceis = await service.store.list_ceis(user, profile_id, state, limit=limit, offset=offset)
    start_of = service.clock.start_of
    return [cei_out(c, start_of) for c in ceis]


@router.get("/profiles/{profile_id}/entries", response_model=list[CapturedEntryOut])
async def captured_entries(
    profile_id: int, service: Service, user: UserId, limit: Limit = 50, offset: Offset = 0
) -> list[CapturedEntryOut]:
    """Entries first seen by probes that captured EIs of the profile's CEIs, newest first."""
    entries = await service.store.captured_entries(user, profile_id, limit=limit, offset=offset)
    return [CapturedEntryOut.of(e) for e in entries]


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
