"""``/api/v1/profiles``: profiles with their rules, their CEIs and captured entries; the metrics summary."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status

from proxy.api.deps import Service, UserId
from proxy.api.limits import ProfileId
from proxy.api.problems import problem_responses
from proxy.api.schemas import (
    CapturedEntryOut,
    CeiOut,
    MetricsSummaryOut,
    ProfileOut,
    cei_out,
)
from proxy.rules import ProfileSpec

router = APIRouter(prefix="/api/v1", tags=["profiles"])

Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0)]


@router.post("/profiles", status_code=status.HTTP_201_CREATED, response_model=ProfileOut,
             responses=problem_responses(409))
async def create_profile(body: ProfileSpec, service: Service, user: UserId) -> ProfileOut:
    """Create a profile; rules name feeds by their ids (as strings or numbers in JSON strings)."""
    return ProfileOut.of(await service.create_profile(user, body))


@router.get("/profiles", response_model=list[ProfileOut])
async def list_profiles(service: Service, user: UserId) -> list[ProfileOut]:
    return [ProfileOut.of(p) for p in await service.store.list_profiles(user)]


@router.get("/profiles/{profile_id}", response_model=ProfileOut)
async def get_profile(profile_id: ProfileId, service: Service, user: UserId) -> ProfileOut:
    return ProfileOut.of(await service.store.get_profile(user, profile_id))


@router.put("/profiles/{profile_id}", response_model=ProfileOut, responses=problem_responses(409))
async def replace_profile(
    profile_id: ProfileId, body: ProfileSpec, service: Service, user: UserId
) -> ProfileOut:
    return ProfileOut.of(await service.replace_profile(user, profile_id, body))


@router.delete("/profiles/{profile_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_profile(profile_id: ProfileId, service: Service, user: UserId) -> Response:
    await service.delete_profile(user, profile_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/profiles/{profile_id}/ceis", response_model=list[CeiOut])
async def list_ceis(
    profile_id: ProfileId,
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
    profile_id: ProfileId, service: Service, user: UserId, limit: Limit = 50, offset: Offset = 0
) -> list[CapturedEntryOut]:
    """Entries first seen by probes that captured EIs of the profile's CEIs, newest first."""
    entries = await service.store.captured_entries(user, profile_id, limit=limit, offset=offset)
    return [CapturedEntryOut.of(e) for e in entries]


@router.get("/metrics/summary", response_model=MetricsSummaryOut, tags=["metrics"])
async def metrics_summary(
    service: Service, user: UserId, chronons: Annotated[int, Query(ge=1, le=100_000)] = 60
) -> MetricsSummaryOut:
    """Completeness overall and per profile (your profiles), budget use over recent chronons."""
    return MetricsSummaryOut.of(await service.store.metrics_summary(user, recent_chronons=chronons))
