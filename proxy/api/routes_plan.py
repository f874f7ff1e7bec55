"""``/api/v1/plan``: the budget plan of the caller's own profiles (docs/plan.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from proxy.api.deps import Service, UserId
from proxy.api.schemas import PlanOut

router = APIRouter(prefix="/api/v1", tags=["plan"])

#: Caps on one request's cost: the simulation's work grows with horizon × futures.
MAX_HORIZON = 2880
MAX_FUTURES = 16


@router.get("/plan", response_model=PlanOut)
async def plan(
    service: Service,
    user: UserId,
    target: Annotated[float, Query(gt=0, le=1, description="Completeness to reach.")] = 0.9,
    horizon: Annotated[int, Query(ge=1, le=MAX_HORIZON, description="Chronons to plan, from now.")] = 360,
    futures: Annotated[int, Query(ge=1, le=MAX_FUTURES, description="Sampled futures.")] = 4,
    seed: Annotated[int, Query(ge=0, le=2**32 - 1)] = 0,
) -> PlanOut:
    """Expected completeness of your profiles at the configured budget and the least budget that
    reaches ``target`` (paper 002's dual problem), from the update models the proxy has learnt.

    Plans your own profiles only, as if the budget served them alone: the budget is shared by
    every user, and the operator plans all profiles with ``proxy plan``. An API replica or a
    standby plans with the models the leader saved last (at most five minutes old).
    """
    report = await service.plan(user, target=target, horizon=horizon, futures=futures, seed=seed)
    return PlanOut.model_validate(report.to_json())
