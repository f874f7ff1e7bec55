"""``proxy plan``: the budget plan of every registered profile under the saved update models (docs/plan.md).

An operator's command: it reads the database (``--database-url`` or
``PROXY_DATABASE_URL``), never the running service, and imports the store and
the simulator only when it runs. The budget, policy and chronon length come
from the settings (``PROXY_BUDGET``, ``PROXY_POLICY``, ``PROXY_CHRONON_SECONDS``)
unless given as options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from proxy.cli.store import DatabaseUrl, _fail

if TYPE_CHECKING:
    from proxy.service.planning import PlanInputs


def register(app: typer.Typer) -> None:
    """Add ``proxy plan`` to the main app."""

    @app.command()
    def plan(
        target: Annotated[float, typer.Option(min=0.0, max=1.0, help="Completeness the least budget must reach.")]
        = 0.9,
        horizon: Annotated[int, typer.Option(min=1, help="Chronons to plan, from the current one.")] = 1440,
        futures: Annotated[int, typer.Option(min=1, help="Sampled futures (the same for every budget).")] = 8,
        seed: Annotated[int, typer.Option(min=0, help="Seed of the sampled futures.")] = 0,
        policy: Annotated[str | None, typer.Option(help="Engine policy; default PROXY_POLICY.")] = None,
        budget: Annotated[int | None, typer.Option(min=1, help="Budget to evaluate; default PROXY_BUDGET.")] = None,
        max_budget: Annotated[
            int | None, typer.Option(min=1, help="Largest budget searched; default: the feeds the rules read.")
        ] = None,
        jobs: Annotated[
            int | None, typer.Option(min=1, help="Processes simulating the futures at once; default one per CPU.")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of lines.")] = False,
        database_url: DatabaseUrl = None,
    ) -> None:
        """Expected completeness of every profile at the budget, and the least budget reaching --target.

        Samples futures from the update models saved in the database (the population
        prior if none are saved yet), simulates the rules pull-only at each budget, and
        prints three lines (docs/plan.md):

        \b
        plan: P profiles, R rules, F feeds; horizon H chronons of L s, S futures, seed N, policy X
        budget C: expected completeness 0.731 ± 0.012 (probes/chronon 10.0)
        least budget for 0.90: 17 (expected 0.904 ± 0.010, probes/chronon 17.0)
        """
        import asyncio
        import json
        import os

        from proxy.errors import ProxyError, SettingsError
        from proxy.settings import load_settings

        try:
            settings = load_settings(database_url=database_url) if database_url is not None else load_settings()
        except SettingsError as exc:
            _fail(str(exc))
        chosen_policy = policy or settings.policy
        from proxy.core.policies import get_policy

        try:
            get_policy(chosen_policy)
        except (KeyError, ValueError) as exc:
            _fail(str(exc))
        try:
            inputs = asyncio.run(_load(settings.database_url, settings.chronon_seconds, horizon))
        except ProxyError as exc:
            _fail(str(exc))
        from proxy.service.planning import run_plan

        report = run_plan(inputs, budget=budget or settings.budget, target=target, policy=chosen_policy,
                          futures=futures, seed=seed, max_budget=max_budget, jobs=jobs or os.cpu_count() or 1)
        if as_json:
            typer.echo(json.dumps(report.to_json(), indent=2))
        else:
            for line in report.lines():
                typer.echo(line)


async def _load(url: str, chronon_seconds: float, horizon: int) -> PlanInputs:
    """Profiles, feeds, saved update models and the chronon clock, read from the database."""
    import datetime as dt

    from proxy.rules import FeedUpdateModels, UpdateModelStateError
    from proxy.rules.ports import ChrononGrid
    from proxy.service.planning import plan_inputs
    from proxy.service.service import ORIGIN_KEY, UPDATE_MODELS_KEY
    from proxy.store import Store

    async with Store.from_url(url) as store:
        profiles = await store.all_profiles()
        feeds = await store.list_feeds()
        saved = await store.get_state(UPDATE_MODELS_KEY)
        origin_state = await store.get_state(ORIGIN_KEY)
    models = FeedUpdateModels()
    if saved is not None:
        try:
            models.restore(saved)
        except UpdateModelStateError as exc:
            # Standard error: standard output stays the plan alone (--json is parsed by scripts).
            typer.echo(f"warning: saved update models not used ({exc}); planning with the prior", err=True)
    now = dt.datetime.now(dt.UTC)
    if origin_state is not None and float(origin_state["length"]) == chronon_seconds:
        clock = ChrononGrid(dt.datetime.fromisoformat(origin_state["origin"]), chronon_seconds)
    else:  # never served, or another chronon length: plan on a grid starting now
        clock = ChrononGrid(now, chronon_seconds)
    start = clock.chronon_at(now)
    return plan_inputs(profiles, {f.id: f.resource for f in feeds}, models, clock, start, horizon)
