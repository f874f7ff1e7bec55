"""Profile creates under load (issue 24.4): stored before they are answered, all or nothing.

On SQLite the creates that queue for the writer's lock are stored together in one
transaction; one refused among them must not refuse the others, and each create is
answered with its own profile or its own error. A create that is stored but then
refused by the evaluator is deleted before it is answered, on both databases.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text

from proxy.errors import ConflictError, ValidationError
from proxy.rules import ProfileSpec
from proxy.store import Profile
from tests.test_e2e_support import motivating, users_app


async def _counts(service: Any) -> tuple[int, int, int]:
    async with service.store.engine.connect() as conn:
        return tuple([(await conn.execute(text(f"SELECT count(*) FROM {t}"))).scalar_one()  # type: ignore[return-value]
                      for t in ("profiles", "rules", "rule_feeds")])


async def test_creates_queued_together_each_get_their_own_answer(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with users_app(database_url) as (service, client, keys):
        h = {"Authorization": f"Bearer {keys['alice']}"}
        feeds = [(await client.post("/api/v1/feeds", json={"url": f"http://127.0.0.1:9/{i}.xml"},
                                    headers=h)).json()["id"] for i in range(3)]
        user = await service.store.authenticate(keys["alice"])
        assert user is not None
        taken = await service.create_profile(
            user, ProfileSpec.model_validate(motivating(*feeds) | {"name": "taken"}))
        before = await _counts(service)
        batches: list[int] = []
        if database_url.startswith("sqlite"):  # there, creates queued together are stored together
            together = service.loop_store.create_profiles

            async def counted(new: Any) -> Any:
                batches.append(len(new))
                return await together(new)

            monkeypatch.setattr(service.loop_store, "create_profiles", counted)
        names = ["a", "b", "taken", "c", "d"]
        async with service._lock:  # a write round in progress: the five creates queue behind it
            creates = asyncio.gather(
                *(service.create_profile(user, ProfileSpec.model_validate(motivating(*feeds) | {"name": n}))
                  for n in names), return_exceptions=True)
            queued = len(names) if database_url.startswith("sqlite") else 0
            while len(service._queued_creates) < queued:  # noqa: ASYNC110 -- a count, no event
                await asyncio.sleep(0.01)
        answers = await creates
        assert isinstance(answers[2], ConflictError)
        if batches:  # the five together, refused for one, then each on its own
            assert batches == [5, 1, 1, 1, 1, 1]
        created = [a for a in answers if isinstance(a, Profile)]
        assert sorted(p.name for p in created) == ["a", "b", "c", "d"]
        for profile in created:
            stored = await service.store.get_profile(user, profile.id)  # its rule states aside
            assert replace(stored, rules=profile.rules) == profile
            assert [replace(r, state=None) for r in stored.rules] == list(profile.rules)
            assert str(profile.id) in service.runtime.evaluator.profile_ids()
        assert await _counts(service) == (before[0] + 4, before[1] + 4, before[2] + 4 * 3)
        page = (await client.get("/api/v1/profiles", headers=h)).json()
        assert [p["id"] for p in page["items"]] == sorted([taken.id, *(p.id for p in created)])
        assert page["total"] == 5


async def test_a_create_refused_before_it_is_stored_stores_nothing(database_url: str) -> None:
    async with users_app(database_url) as (service, _, keys):
        user = await service.store.authenticate(keys["bob"])
        assert user is not None
        before = await _counts(service)
        with pytest.raises(ValidationError, match=r"rules\.0\.trigger\.feed"):
            await service.create_profile(user, ProfileSpec.model_validate(motivating(7, 8, 9)))
        assert await _counts(service) == before


async def test_a_create_that_fails_once_stored_leaves_nothing_and_the_page_exact(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stored, then refused by the evaluator: the create deletes what it stored before it
    answers, and the cached page (read before, again after) never counted it. SQLite
    creates on the loop's thread under the writer's lock, PostgreSQL on the API's store."""
    async with users_app(database_url) as (service, client, keys):
        h = {"Authorization": f"Bearer {keys['alice']}"}
        feeds = [(await client.post("/api/v1/feeds", json={"url": f"http://127.0.0.1:9/{i}.xml"},
                                    headers=h)).json()["id"] for i in range(3)]
        assert (await client.get("/api/v1/profiles", headers=h)).json()["total"] == 0
        user = await service.store.authenticate(keys["alice"])
        assert user is not None

        def refuse(profile: Profile) -> None:
            raise RuntimeError("evaluator refused")

        monkeypatch.setattr(service, "_install", refuse)
        with pytest.raises(RuntimeError, match="evaluator refused"):
            await service.create_profile(user, ProfileSpec.model_validate(motivating(*feeds)))
        assert await service.store.list_profiles(user) == []
        page = (await client.get("/api/v1/profiles", headers=h)).json()
        assert (page["items"], page["total"]) == ([], 0)
        monkeypatch.undo()
        created = (await client.post("/api/v1/profiles", json=motivating(*feeds), headers=h)).json()
        page = (await client.get("/api/v1/profiles", headers=h)).json()
        assert ([p["id"] for p in page["items"]], page["total"]) == ([created["id"]], 1)
