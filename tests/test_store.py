"""Contract suite of the Store: every test runs on SQLite and on PostgreSQL (``database_url``)."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import replace

import pytest

from proxy.errors import (
    ConflictError,
    FeedNotFoundError,
    NotFoundError,
    ProfileNotFoundError,
    StorageError,
    ValidationError,
)
from proxy.store import (
    CaptureInput,
    CeiStateChange,
    Feed,
    FeedUpdate,
    NewEi,
    NewEntry,
    NewProfile,
    ProbeInput,
    RuleInput,
    Store,
    TargetInput,
)

T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


async def _registered(store: Store, user_id: int, url: str) -> Feed:
    """The shared feed of ``url``, registered for ``user_id`` (profiles may read only those)."""
    return (await store.register_feed_for(user_id, url))[0].feed


# --- users and keys ------------------------------------------------------------------


async def test_create_user_returns_a_key_that_authenticates(store: Store) -> None:
    user_id, key = await store.create_user("alice")
    assert len(key) >= 40
    assert await store.authenticate(key) == user_id
    assert await store.authenticate(key + "x") is None
    assert await store.authenticate("") is None
    assert (await store.get_user(user_id)).name == "alice"


async def test_duplicate_user_name_is_a_conflict(store: Store) -> None:
    await store.create_user("alice")
    with pytest.raises(ConflictError, match="alice"):
        await store.create_user("alice")


async def test_keys_are_distinct_and_revocable(store: Store) -> None:
    user_id, first = await store.create_user("alice")
    second = await store.create_api_key(user_id)
    assert first != second
    assert await store.revoke_api_key(first) is True
    assert await store.revoke_api_key(first) is False
    assert await store.authenticate(first) is None
    assert await store.authenticate(second) == user_id


async def test_only_a_hash_of_the_key_is_stored(store: Store) -> None:
    from sqlalchemy import text

    from proxy.store import hash_api_key

    _, key = await store.create_user("alice")
    async with store.engine.connect() as conn:
        rows = (await conn.execute(text("SELECT key_hash, prefix FROM api_keys"))).all()
    assert [tuple(r) for r in rows] == [(hash_api_key(key), key[:8])]
    assert key not in rows[0][0]


async def test_injected_clock_stamps_rows(database_url: str) -> None:
    fixed = dt.datetime(2030, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
    async with Store.from_url(database_url, clock=lambda: fixed) as store:
        user_id, _ = await store.create_user("alice")
        assert (await store.get_user(user_id)).created_at == fixed
        feed, _ = await store.register_feed("http://example.com/f")
        assert feed.created_at == fixed


async def test_blank_user_name_is_refused(store: Store) -> None:
    with pytest.raises(ValidationError, match="user name"):
        await store.create_user("   ")


# --- feeds -------------------------------------------------------------------------


async def test_register_feed_dedupes_by_normalised_url_and_allocates_dense_resources(
    store: Store,
) -> None:
    a, created_a = await store.register_feed("HTTP://Example.COM:80/feed.xml#top")
    b, created_b = await store.register_feed("http://example.com/feed.xml")
    c, created_c = await store.register_feed("https://example.com/other")
    assert (created_a, created_b, created_c) == (True, False, True)
    assert a.id == b.id
    assert a.url == "HTTP://Example.COM:80/feed.xml#top"
    assert a.url_normalised == "http://example.com/feed.xml"
    assert [a.resource, c.resource] == [0, 1]
    assert await store.resource_count() == 2
    assert (await store.feed_by_resource(1)).id == c.id


async def test_concurrent_registrations_of_one_url_yield_one_feed(store: Store) -> None:
    results = await asyncio.gather(
        *(store.register_feed("http://example.com/same") for _ in range(5))
    )
    assert len({feed.id for feed, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert len(await store.list_feeds()) == 1


async def test_concurrent_registrations_of_different_urls_get_distinct_resources(
    store: Store,
) -> None:
    results = await asyncio.gather(
        *(store.register_feed(f"http://example.com/{i % 10}") for i in range(20))
    )
    assert sorted({feed.resource for feed, _ in results}) == list(range(10))
    assert sum(created for _, created in results) == 10


async def test_register_feed_refuses_a_url_without_host(store: Store) -> None:
    with pytest.raises(ValidationError):
        await store.register_feed("not a url")


async def test_unknown_feed_and_resource_are_not_found(store: Store) -> None:
    with pytest.raises(FeedNotFoundError):
        await store.get_feed(999)
    with pytest.raises(NotFoundError):
        await store.feed_by_resource(7)
    with pytest.raises(FeedNotFoundError):
        await store.delete_feed(999)


async def test_registrations_are_per_user_over_one_shared_feed(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    bob, _ = await store.create_user("bob")
    ra, created_a = await store.register_feed_for(alice, "http://example.com/f?secret=a")
    rb, created_b = await store.register_feed_for(bob, "HTTP://Example.com/f?secret=a")
    again, created_again = await store.register_feed_for(alice, "http://example.com/f?secret=a")
    # Same normalised URL: one shared feed, two registrations, each "created" for its user.
    assert (created_a, created_b, created_again) == (True, True, False)
    assert ra.feed.id == rb.feed.id and again.registration == ra.registration
    assert ra.registration.id != rb.registration.id
    assert (ra.registration.url, rb.registration.url) == (
        "http://example.com/f?secret=a", "HTTP://Example.com/f?secret=a")
    assert ra.registration.ping_token != rb.registration.ping_token
    # A URL differing only in its secret is another fetch, so another feed.
    other, _ = await store.register_feed_for(bob, "http://example.com/f?secret=b")
    assert other.feed.id != ra.feed.id and other.feed.resource != ra.feed.resource
    assert [f.id for f in await store.list_feeds()] == [ra.feed.id, other.feed.id]

    assert [r.registration.url for r in await store.list_registered_feeds(alice)] == [
        "http://example.com/f?secret=a"]
    assert [r.feed.id for r in await store.list_registered_feeds(bob)] == [ra.feed.id, other.feed.id]
    assert (await store.get_registered_feed(bob, other.feed.id)).registration.user_id == bob
    with pytest.raises(FeedNotFoundError):
        await store.get_registered_feed(alice, other.feed.id)
    assert await store.registered_feed_ids(alice) == {ra.feed.id}
    with pytest.raises(NotFoundError):
        await store.register_feed_for(4242, "http://example.com/f")


async def test_ping_tokens_belong_to_registrations_and_rotate(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    bob, _ = await store.create_user("bob")
    ra, _ = await store.register_feed_for(alice, "http://example.com/f")
    rb, _ = await store.register_feed_for(bob, "http://example.com/f")
    feed_id, old = ra.feed.id, ra.registration.ping_token
    assert await store.ping_users(feed_id, old) == [alice]
    assert await store.ping_users(feed_id, rb.registration.ping_token) == [bob]
    assert await store.ping_users(feed_id, "wrong") == []
    assert await store.ping_users(feed_id, "") == []
    assert await store.ping_users(feed_id + 1, old) == []
    rotated = await store.rotate_ping_token(alice, feed_id)
    assert rotated.ping_token not in (old, rb.registration.ping_token)
    assert await store.ping_users(feed_id, old) == []
    assert await store.ping_users(feed_id, rotated.ping_token) == [alice]
    assert (await store.get_registered_feed(alice, feed_id)).registration.ping_token == rotated.ping_token
    assert await store.ping_users(feed_id, rb.registration.ping_token) == [bob]
    with pytest.raises(FeedNotFoundError):
        await store.rotate_ping_token(alice, feed_id + 1)


async def test_deleting_registrations_keeps_the_feed_until_the_last_one(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    bob, _ = await store.create_user("bob")
    ra, _ = await store.register_feed_for(alice, "http://example.com/f")
    await store.register_feed_for(bob, "http://example.com/f")
    feed_id = ra.feed.id
    await store.record_probe(ProbeInput(feed_id, at(0), "ok"), [NewEntry("a")])
    assert await store.delete_registration(alice, feed_id) is False
    with pytest.raises(FeedNotFoundError):
        await store.delete_registration(alice, feed_id)
    with pytest.raises(FeedNotFoundError):
        await store.get_registered_feed(alice, feed_id)
    (bobs,) = await store.list_registered_feeds(bob)
    assert (bobs.probes, bobs.entries) == (1, 1), "the shared history stays with Bob"
    assert await store.delete_registration(bob, feed_id) is True
    with pytest.raises(FeedNotFoundError):
        await store.get_feed(feed_id)
    assert await store.list_probes(feed_id) == []


async def test_deleting_a_registration_names_only_your_own_profiles(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    bob, _ = await store.create_user("bob")
    feed = await _registered(store, alice, "http://example.com/f")
    await _registered(store, bob, "http://example.com/f")
    mine = await store.create_profile(alice, "alice news", [RuleInput("r", {}, (feed.id,))])
    await store.create_profile(bob, "bob secrets", [RuleInput("r", {}, (feed.id,))])
    with pytest.raises(ConflictError) as conflict:
        await store.delete_registration(alice, feed.id)
    assert "alice news" in str(conflict.value) and "bob" not in str(conflict.value)
    assert (await store.get_registered_feed(alice, feed.id)).feed.id == feed.id, "rolled back"
    (health,) = await store.list_registered_feeds(alice)
    assert health.profiles == 1, "only Alice's profiles are counted for Alice"
    await store.delete_profile(alice, mine.id)
    assert await store.delete_registration(alice, feed.id) is False  # Bob still reads it
    assert (await store.get_feed(feed.id)).id == feed.id


async def test_profiles_may_read_only_their_owners_feeds(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    bob, _ = await store.create_user("bob")
    feed = await _registered(store, alice, "http://example.com/f?secret=a")
    with pytest.raises(FeedNotFoundError, match=str(feed.id)):
        await store.create_profile(bob, "p", [RuleInput("r", {}, (feed.id,))])
    profile = await store.create_profile(bob, "p", [])
    with pytest.raises(FeedNotFoundError, match=str(feed.id)):
        await store.replace_profile(bob, profile.id, "p", [RuleInput("r", {}, (feed.id,))])
    assert (await store.get_profile(bob, profile.id)).rules == ()


async def test_collect_unregistered_feeds_deletes_only_feeds_nobody_needs(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    orphan, _ = await store.register_feed("http://example.com/orphan")
    kept = await _registered(store, alice, "http://example.com/kept")
    await store.record_probe(ProbeInput(orphan.id, at(0), "ok"), [NewEntry("a")])
    assert await store.collect_unregistered_feeds() == [orphan.id]
    assert [f.id for f in await store.list_feeds()] == [kept.id]
    assert await store.collect_unregistered_feeds() == []


async def test_update_feed_after_probe_tracks_validators_errors_redirects_and_gone(
    store: Store,
) -> None:
    feed, _ = await store.register_feed("http://example.com/f")
    ok = await store.update_feed_after_probe(
        feed.id,
        FeedUpdate(
            probed_at=at(0), outcome="ok", update_validators=True, etag='"v1"', last_modified="Mon"
        ),
    )
    assert (ok.etag, ok.last_modified, ok.consecutive_errors, ok.last_outcome) == (
        '"v1"',
        "Mon",
        0,
        "ok",
    )
    assert ok.last_probe_at == at(0)
    err1 = await store.update_feed_after_probe(
        feed.id, FeedUpdate(probed_at=at(60), outcome="timeout", error=True)
    )
    err2 = await store.update_feed_after_probe(
        feed.id,
        FeedUpdate(probed_at=at(120), outcome="http_error", error=True, next_allowed_at=at(600)),
    )
    assert (err1.consecutive_errors, err2.consecutive_errors) == (1, 2)
    assert err2.etag == '"v1"', "an error keeps the validators"
    assert err2.next_allowed_at == at(600)
    moved = await store.update_feed_after_probe(
        feed.id,
        FeedUpdate(probed_at=at(180), outcome="not_modified", new_url="https://example.org/f"),
    )
    assert moved.consecutive_errors == 0
    assert (moved.url, moved.url_normalised) == ("https://example.org/f", "https://example.org/f")
    assert (await store.register_feed("https://EXAMPLE.org/f"))[0].id == feed.id
    gone = await store.update_feed_after_probe(
        feed.id,
        FeedUpdate(probed_at=at(240), outcome="gone", error=True, disabled_reason="410 Gone"),
    )
    assert gone.disabled and gone.disabled_reason == "410 Gone"
    with pytest.raises(FeedNotFoundError):
        await store.update_feed_after_probe(999, FeedUpdate(probed_at=at(0), outcome="ok"))


async def test_naive_datetimes_are_refused(store: Store) -> None:
    feed, _ = await store.register_feed("http://example.com/f")
    with pytest.raises((ValueError, StorageError)):
        await store.update_feed_after_probe(
            feed.id, FeedUpdate(probed_at=dt.datetime(2026, 1, 1), outcome="ok")
        )


async def test_delete_feed_refuses_while_rules_read_it_and_names_the_profiles(store: Store) -> None:
    user_id, _ = await store.create_user("alice")
    feed = await _registered(store, user_id, "http://example.com/f")
    profile = await store.create_profile(
        user_id, "oil news", [RuleInput("r", {"k": 1}, (feed.id,))]
    )
    with pytest.raises(ConflictError, match="oil news"):
        await store.delete_feed(feed.id)
    await store.delete_profile(user_id, profile.id)
    await store.delete_feed(feed.id)
    with pytest.raises(FeedNotFoundError):
        await store.get_feed(feed.id)


async def test_list_feeds_with_health_counts(store: Store) -> None:
    user_id, _ = await store.create_user("alice")
    f1 = await _registered(store, user_id, "http://example.com/1")
    f2 = await _registered(store, user_id, "http://example.com/2")
    await store.create_profile(user_id, "p1", [RuleInput("r", {}, (f1.id,))])
    await store.create_profile(user_id, "p2", [RuleInput("r", {}, (f1.id, f2.id))])
    await store.record_probe(ProbeInput(f1.id, at(0), "ok"), [NewEntry("a"), NewEntry("b")])
    await store.record_probe(ProbeInput(f1.id, at(60), "not_modified"))
    health = {h.feed.id: h for h in await store.list_feeds_with_health()}
    assert (health[f1.id].probes, health[f1.id].entries, health[f1.id].profiles) == (2, 2, 2)
    assert (health[f2.id].probes, health[f2.id].entries, health[f2.id].profiles) == (0, 0, 1)


# --- profiles and rules -------------------------------------------------------------


async def test_profiles_are_scoped_to_their_user(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    bob, _ = await store.create_user("bob")
    feed = await _registered(store, alice, "http://example.com/f")
    profile = await store.create_profile(
        alice,
        "p",
        [RuleInput("first", {"a": [1, 2]}, (feed.id,)), RuleInput("second", {"b": None})],
    )
    assert [r.name for r in profile.rules] == ["first", "second"]
    assert [r.position for r in profile.rules] == [0, 1]
    assert profile.rules[0].spec == {"a": [1, 2]}
    assert profile.rules[0].feed_ids == (feed.id,)
    assert (await store.get_profile(alice, profile.id)) == profile
    assert [p.id for p in await store.list_profiles(alice)] == [profile.id]
    assert await store.list_profiles(bob) == []
    with pytest.raises(ProfileNotFoundError):
        await store.get_profile(bob, profile.id)
    with pytest.raises(ProfileNotFoundError):
        await store.replace_profile(bob, profile.id, "stolen", [])
    with pytest.raises(ProfileNotFoundError):
        await store.delete_profile(bob, profile.id)
    with pytest.raises(ProfileNotFoundError):
        await store.list_ceis(bob, profile.id)
    assert [p.id for p in await store.all_profiles()] == [profile.id]


async def test_profile_names_are_unique_per_user(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    bob, _ = await store.create_user("bob")
    await store.create_profile(alice, "p", [])
    await store.create_profile(bob, "p", [])
    with pytest.raises(ConflictError, match="'p'"):
        await store.create_profile(alice, "p", [])


async def test_profile_of_an_unknown_user_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError, match="user"):
        await store.create_profile(4242, "p", [])


async def test_rule_reading_unknown_feed_is_refused(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    with pytest.raises(FeedNotFoundError):
        await store.create_profile(alice, "p", [RuleInput("r", {}, (12345,))])
    assert await store.list_profiles(alice) == []


async def test_a_created_profile_is_what_a_read_gives_back(store: Store) -> None:
    # The create builds its answer from what it wrote (no reload): it must be what a read
    # gives, to the JSON of the specs, the feeds' order and the time zone of the stamps.
    alice, _ = await store.create_user("alice")
    f1 = await _registered(store, alice, "http://example.com/1")
    f2 = await _registered(store, alice, "http://example.com/2")
    hook = TargetInput("webhook", "https://hooks.example.com/a")
    profile = await store.create_profile(
        alice, "  p  ",
        [RuleInput("first", {"b": [1, 2.5, "é"], "a": {"z": None}}, (f2.id, f1.id, f2.id), (hook,)),
         RuleInput("second", {"w": True}, (f1.id,))],
        notify=(hook,), notify_spec=[{"kind": "webhook", "url": hook.url}],
    )
    assert len(profile.new_targets) == 1
    assert replace(profile, new_targets=()) == await store.get_profile(alice, profile.id)
    assert [p.id for p in await store.list_profiles(alice)] == [profile.id]
    assert profile.rules[0].feed_ids == tuple(sorted((f1.id, f2.id)))
    assert profile.created_at.utcoffset() == dt.timedelta(0)


async def _row_counts(store: Store) -> dict[str, int]:
    from sqlalchemy import text

    tables = ("profiles", "rules", "rule_feeds", "notify_targets", "notify_subscriptions")
    async with store.engine.connect() as conn:
        return {t: (await conn.execute(text(f"SELECT count(*) FROM {t}"))).scalar_one() for t in tables}


async def test_a_refused_create_leaves_nothing_stored(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    feed = await _registered(store, alice, "http://example.com/f")
    hook = (TargetInput("webhook", "https://hooks.example.com/a"),)
    await store.create_profile(alice, "taken", [RuleInput("r", {}, (feed.id,))])
    before = await _row_counts(store)
    ok = RuleInput("r", {}, (feed.id,))
    refusals: list[tuple[type[Exception], str, list[RuleInput]]] = [
        (ConflictError, "taken", [ok]),
        (FeedNotFoundError, "n", [RuleInput("r", {}, (feed.id, 999_999))]),
        # Refused after the profile row is written: the rules' check comes second.
        (ValidationError, "n", [ok, RuleInput(" ", {})]),
    ]
    for error, name, rules in refusals:
        with pytest.raises(error):
            await store.create_profile(alice, name, rules, notify=hook)
        assert await _row_counts(store) == before, error
    with pytest.raises(NotFoundError, match="user"):
        await store.create_profile(4242, "taken", [])
    assert await _row_counts(store) == before


async def test_profiles_created_together_are_all_stored_or_none(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    bob, _ = await store.create_user("bob")
    fa = await _registered(store, alice, "http://example.com/a")
    fb = await _registered(store, bob, "http://example.com/b")
    batch = [NewProfile(alice, f"a{i}", (RuleInput("r", {"i": i}, (fa.id,)), RuleInput("s", {}))) for i in range(3)]
    batch.insert(1, NewProfile(bob, "b", (RuleInput("r", {}, (fb.id,)),)))
    created = await store.create_profiles(batch)
    assert [(p.user_id, p.name) for p in created] == [(p.user_id, p.name) for p in batch]
    for profile in created:
        assert await store.get_profile(profile.user_id, profile.id) == profile
    before = await _row_counts(store)
    refused = [
        [NewProfile(alice, "new"), NewProfile(bob, "b")],  # bob's name is taken
        # Alice may not read bob's feed, whatever else the batch holds.
        [NewProfile(bob, "b2", (RuleInput("r", {}, (fb.id,)),)),
         NewProfile(alice, "a9", (RuleInput("r", {}, (fa.id, fb.id)),))],
    ]
    for new in refused:
        with pytest.raises((ConflictError, FeedNotFoundError)):
            await store.create_profiles(new)
        assert await _row_counts(store) == before


async def test_replace_profile_keeps_state_of_unchanged_rules_only(store: Store) -> None:
    alice, _ = await store.create_user("alice")
    profile = await store.create_profile(
        alice, "p", [RuleInput("same", {"x": 1}), RuleInput("changed", {"y": 1})]
    )
    same_id, changed_id = (r.id for r in profile.rules)
    await store.save_rule_state(same_id, {"seen": 3})
    await store.save_rule_state(changed_id, {"seen": 4})
    assert (await store.load_rule_states())[same_id] == {"seen": 3}
    replaced = await store.replace_profile(
        alice, profile.id, "renamed", [RuleInput("changed", {"y": 2}), RuleInput("same", {"x": 1})]
    )
    assert replaced.name == "renamed"
    assert [(r.name, r.state) for r in replaced.rules] == [("changed", None), ("same", {"seen": 3})]
    assert replaced.updated_at >= profile.updated_at
    with pytest.raises(NotFoundError):
        await store.save_rule_state(same_id, {})


# --- CEIs and EIs -------------------------------------------------------------------


async def _profile_with_feeds(store: Store, n_feeds: int = 2) -> tuple[int, int, list[int]]:
    user_id, _ = await store.create_user("alice")
    feeds = [(await _registered(store, user_id, f"http://example.com/{i}")).id for i in range(n_feeds)]
    profile = await store.create_profile(user_id, "p", [RuleInput("r", {}, tuple(feeds))])
    return user_id, profile.id, feeds


async def test_ceis_round_trip_with_their_eis(store: Store) -> None:
    user_id, profile_id, (f0, f1) = await _profile_with_feeds(store)
    cei = await store.add_cei(
        "c1", profile_id, 5, [NewEi(0, f0, 5, 10), NewEi(1, f1, 6, 12, reveal=6)], sealed=False
    )
    assert (cei.id, cei.release, cei.state, cei.sealed) == ("c1", 5, "pending", False)
    assert [(e.ordinal, e.feed_id, e.start, e.finish, e.reveal) for e in cei.eis] == [
        (0, f0, 5, 10, None),
        (1, f1, 6, 12, 6),
    ]
    extra = await store.add_ei("c1", NewEi(2, f0, 11, 13))
    await store.seal_cei("c1")
    with pytest.raises(ConflictError):
        await store.add_ei("c1", NewEi(2, f1, 11, 13))
    with pytest.raises(ConflictError):
        await store.add_cei("c1", profile_id, 5)
    with pytest.raises(NotFoundError, match="rule"):
        await store.add_cei("c2", profile_id, 5, rule_id=98765)
    with pytest.raises(ProfileNotFoundError):
        await store.add_cei("c3", 98765, 5)
    (pending,) = await store.pending_ceis_with_eis()
    assert pending.sealed and [e.id for e in pending.eis][-1] == extra.id
    assert await store.get_cei(user_id, "c1") == pending


async def test_ei_capture_happens_once_and_missed_cei_marks_pending_eis(store: Store) -> None:
    user_id, profile_id, (f0, f1) = await _profile_with_feeds(store)
    cei = await store.add_cei("c1", profile_id, 0, [NewEi(0, f0, 0, 5), NewEi(1, f1, 0, 5)])
    first = cei.eis[0]
    assert await store.set_ei_captured(first.id, 3) is True
    assert await store.set_ei_captured(first.id, 4) is False
    with pytest.raises(NotFoundError):
        await store.set_ei_captured(99999, 4)
    await store.set_cei_state("c1", "missed", 6)
    assert await store.pending_ceis_with_eis() == []
    (stored,) = await store.list_ceis(user_id, profile_id)
    assert (stored.state, stored.resolved_chronon) == ("missed", 6)
    assert [(e.state, e.captured_chronon) for e in stored.eis] == [
        ("captured", 3),
        ("missed", None),
    ]
    with pytest.raises(ValidationError):
        await store.set_cei_state("c1", "bogus", 1)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        await store.set_cei_state("nope", "captured", 1)


async def test_list_ceis_filters_and_pages(store: Store) -> None:
    user_id, profile_id, (f0, _) = await _profile_with_feeds(store)
    for i in range(5):
        await store.add_cei(f"c{i}", profile_id, i, [NewEi(0, f0, i, i + 2)])
    await store.set_cei_state("c1", "captured", 2)
    await store.set_cei_state("c3", "captured", 4)
    assert [c.id for c in await store.list_ceis(user_id, profile_id)] == [
        "c4",
        "c3",
        "c2",
        "c1",
        "c0",
    ]
    assert [c.id for c in await store.list_ceis(user_id, profile_id, "captured")] == ["c3", "c1"]
    assert [c.id for c in await store.list_ceis(user_id, profile_id, limit=2, offset=1)] == [
        "c3",
        "c2",
    ]
    with pytest.raises(ValidationError):
        await store.list_ceis(user_id, profile_id, limit=0)


# --- probes and entries -------------------------------------------------------------


async def test_record_probe_stores_new_entries_only_and_captures_in_one_go(store: Store) -> None:
    user_id, profile_id, (f0, f1) = await _profile_with_feeds(store)
    cei = await store.add_cei("c1", profile_id, 0, [NewEi(0, f0, 0, 5), NewEi(1, f1, 0, 5)])
    long_identity = "x" * 3000
    first = await store.record_probe(
        ProbeInput(f0, at(0), "ok", finished_at=at(1.5), chronon=1, http_status=200, bytes=1234),
        [
            NewEntry("a", title="A", summary="s" * 5000),
            NewEntry("b"),
            NewEntry("a"),
            NewEntry(long_identity),
        ],
        captures=[CaptureInput(cei.eis[0].id, 1)],
        feed_update=FeedUpdate(probed_at=at(1.5), outcome="ok", update_validators=True, etag='"e"'),
    )
    assert first.new_identities == ("a", "b", long_identity)
    assert first.captured_ei_ids == (cei.eis[0].id,)
    second = await store.record_probe(
        ProbeInput(f0, at(60), "ok", chronon=2),
        [NewEntry("b"), NewEntry("c"), NewEntry(long_identity)],
        captures=[CaptureInput(cei.eis[0].id, 2)],
    )
    assert second.new_identities == ("c",)
    assert second.captured_ei_ids == (), "an EI is captured once"
    assert await store.known_identities(f0, ["a", "c", "z", long_identity]) == {
        "a",
        "c",
        long_identity,
    }
    assert await store.known_identities(f1, ["a"]) == set()
    probes = await store.list_probes(f0)
    assert [(p.id, p.new_entries) for p in probes] == [(second.probe_id, 1), (first.probe_id, 3)]
    assert probes[1].duration_seconds == pytest.approx(1.5)
    assert (probes[1].http_status, probes[1].bytes, probes[1].chronon) == (200, 1234, 1)
    entries = {e.identity: e for e in await store.list_entries(f0)}
    assert len(entries["a"].summary or "") == 2000
    assert entries["a"].title == "A"
    assert (await store.get_feed(f0)).etag == '"e"'
    (stored,) = await store.list_ceis(user_id, profile_id)
    assert stored.eis[0].captured_probe_id == first.probe_id


async def test_concurrent_probes_of_one_feed_store_each_entry_once(store: Store) -> None:
    feed, _ = await store.register_feed("http://example.com/f")
    records = await asyncio.gather(
        *(
            store.record_probe(
                ProbeInput(feed.id, at(i), "ok"), [NewEntry(f"e{j}") for j in range(i, i + 5)]
            )
            for i in range(8)
        )
    )
    new = [identity for record in records for identity in record.new_identities]
    assert sorted(new) == sorted(f"e{j}" for j in range(12)), "each entry is new exactly once"
    assert len(await store.list_entries(feed.id, limit=100)) == 12


async def test_record_probe_is_all_or_nothing(store: Store) -> None:
    user_id, profile_id, (f0, f1) = await _profile_with_feeds(store)
    cei = await store.add_cei("c1", profile_id, 0, [NewEi(0, f0, 0, 5), NewEi(1, f1, 0, 5)])
    on_other_feed = cei.eis[1].id
    with pytest.raises(ValidationError, match="cannot capture"):
        await store.record_probe(
            ProbeInput(f0, at(0), "ok"),
            [NewEntry("a")],
            captures=[CaptureInput(cei.eis[0].id, 1), CaptureInput(on_other_feed, 1)],
            feed_update=FeedUpdate(probed_at=at(0), outcome="ok", error=True),
        )
    assert await store.list_probes(f0) == []
    assert await store.known_identities(f0, ["a"]) == set()
    assert (await store.get_feed(f0)).consecutive_errors == 0
    (stored,) = await store.list_ceis(user_id, profile_id)
    assert [e.state for e in stored.eis] == ["pending", "pending"]
    with pytest.raises(FeedNotFoundError):
        await store.record_probe(ProbeInput(4242, at(0), "ok"))


async def _batch_scenario(store: Store, tag: str, *, batched: bool) -> dict[str, object]:
    """Eight probes of three feeds that interact: recorded in one ``record_probes`` call or
    one ``record_probe`` at a time, they must leave the same database and the same records."""
    user_id, _ = await store.create_user(f"user-{tag}")
    f0, f1, f2 = [
        (await _registered(store, user_id, f"http://example.com/{tag}/{i}")).id for i in range(3)
    ]
    profile = await store.create_profile(user_id, "p", [RuleInput("r", {}, (f0, f1, f2))])
    c1 = await store.add_cei("c1" + tag, profile.id, 0, [NewEi(0, f0, 0, 9), NewEi(1, f1, 0, 9)])
    c2 = await store.add_cei("c2" + tag, profile.id, 0, [NewEi(0, f0, 0, 9), NewEi(1, f2, 0, 9)])
    gone = await store.add_cei("c3" + tag, profile.id, 0, [NewEi(0, f2, 0, 9)])
    await store.record_probe(ProbeInput(f0, at(0), "ok"), [NewEntry("old")])
    # An EI whose CEI is deleted while its probe is in flight is skipped, not an error.
    deleted = await store.create_profile(user_id, "d", [RuleInput("r", {}, (f2,))])
    doomed = await store.add_cei("c4" + tag, deleted.id, 0, [NewEi(0, f2, 0, 9)])
    await store.delete_profile(user_id, deleted.id)
    ok = FeedUpdate(probed_at=at(1), outcome="ok", update_validators=True, etag='"v1"')
    error = FeedUpdate(probed_at=at(2), outcome="http_error", error=True)
    items = [
        # An entry known from before, a repeated one, and the same entry in a later probe.
        (ProbeInput(f0, at(1), "ok", chronon=1), [NewEntry("old"), NewEntry("a"), NewEntry("a")],
         [CaptureInput(c1.eis[0].id, 1)], [], ok),
        (ProbeInput(f0, at(2), "ok", chronon=2), [NewEntry("a"), NewEntry("b")],
         [CaptureInput(c1.eis[0].id, 2), CaptureInput(c2.eis[0].id, 2)], [], ok),
        # c3 resolves missed; a later probe that names its EI captures nothing.
        (ProbeInput(f2, at(2), "http_error", chronon=2), [], [], [CeiStateChange("c3" + tag, "missed", 2)], error),
        (ProbeInput(f2, at(3), "http_error", chronon=3), [], [], [], error),
        (ProbeInput(f2, at(4), "ok", chronon=4), [NewEntry("z")],
         [CaptureInput(gone.eis[0].id, 4), CaptureInput(doomed.eis[0].id, 4), CaptureInput(c2.eis[1].id, 4)],
         [CeiStateChange("c2" + tag, "captured", 4), CeiStateChange("c4" + tag, "captured", 4)], None),
        (ProbeInput(f1, at(5), "not_modified", chronon=5), [], [], [],
         FeedUpdate(probed_at=at(5), outcome="not_modified")),
        (ProbeInput(f1, at(6), "ok", chronon=6), [NewEntry("a")], [CaptureInput(c1.eis[1].id, 6)],
         [CeiStateChange("c1" + tag, "captured", 6)], ok),
        (ProbeInput(f1, at(7), "http_error", chronon=7), [], [], [], error),
    ]
    if batched:
        records = await store.record_probes(items)
    else:
        records = [await store.record_probe(*item) for item in items]
    ordinal = {ei.id: (cei.id[:2], ei.ordinal) for cei in (c1, c2, gone, doomed) for ei in cei.eis}
    feeds = [await store.get_feed(f) for f in (f0, f1, f2)]
    probes = [p for f in (f0, f1, f2) for p in await store.list_probes(f)]
    return {
        "records": [(r.new_identities, [ordinal[e] for e in r.captured_ei_ids]) for r in records],
        "feeds": [(f.etag, f.last_outcome, f.consecutive_errors, f.last_probe_at) for f in feeds],
        "ceis": sorted(
            (c.id[:2], c.state, c.resolved_chronon, [(e.state, e.captured_chronon) for e in c.eis])
            for c in await store.list_ceis(user_id, profile.id)
        ),
        "probes": sorted((p.started_at, p.outcome, p.new_entries) for p in probes),
        "entries": [sorted(e.identity for e in await store.list_entries(f)) for f in (f0, f1, f2)],
    }


async def test_record_probes_in_one_batch_equals_one_by_one(store: Store) -> None:
    one_by_one = await _batch_scenario(store, "x", batched=False)
    batched = await _batch_scenario(store, "y", batched=True)
    assert batched == one_by_one
    # And what that is, so that both paths cannot be wrong together.
    assert one_by_one["records"] == [
        (("a",), [("c1", 0)]),
        (("b",), [("c2", 0)]),
        ((), []),
        ((), []),
        (("z",), [("c2", 1)]),
        ((), []),
        (("a",), [("c1", 1)]),
        ((), []),
    ]
    assert one_by_one["feeds"] == [
        ('"v1"', "ok", 0, at(1)),
        ('"v1"', "http_error", 1, at(2)),
        (None, "http_error", 2, at(2)),
    ]
    assert one_by_one["ceis"] == [
        ("c1", "captured", 6, [("captured", 1), ("captured", 6)]),
        ("c2", "captured", 4, [("captured", 2), ("captured", 4)]),
        ("c3", "missed", 2, [("missed", None)]),
    ]
    assert [n for _, _, n in one_by_one["probes"]] == [1, 1, 0, 1, 0, 1, 0, 1, 0]  # type: ignore[attr-defined]


async def test_record_probes_applies_redirects_and_410_as_one_by_one(store: Store) -> None:
    async def scenario(tag: str, batched: bool) -> list[tuple[object, ...]]:
        moved = (await store.register_feed(f"http://example.com/{tag}/moved"))[0].id
        gone = (await store.register_feed(f"http://example.com/{tag}/gone"))[0].id
        items = [
            (ProbeInput(moved, at(1), "ok"), [], [], [], FeedUpdate(
                probed_at=at(1), outcome="ok", update_validators=True, etag='"m"',
                new_url=f"https://example.org/{tag}/moved")),
            (ProbeInput(gone, at(1), "http_error"), [], [], [],
             FeedUpdate(probed_at=at(1), outcome="http_error", error=True)),
            (ProbeInput(gone, at(2), "gone"), [], [], [], FeedUpdate(
                probed_at=at(2), outcome="gone", error=True, disabled_reason="410 Gone")),
        ]
        if batched:
            await store.record_probes(items)
        else:
            for item in items:
                await store.record_probe(*item)
        feeds = [await store.get_feed(f) for f in (moved, gone)]
        return [
            (f.url.replace(tag, "T"), f.etag, f.last_outcome, f.consecutive_errors, f.disabled,
             f.disabled_reason, f.last_probe_at)
            for f in feeds
        ]

    one_by_one = await scenario("s1", batched=False)
    assert await scenario("s2", batched=True) == one_by_one
    assert one_by_one == [
        ("https://example.org/T/moved", '"m"', "ok", 0, False, None, at(1)),
        ("http://example.com/T/gone", None, "gone", 2, True, "410 Gone", at(2)),
    ]


async def test_record_probes_names_the_missing_feed_and_stores_nothing(store: Store) -> None:
    f0 = (await store.register_feed("http://example.com/a"))[0].id
    f1 = (await store.register_feed("http://example.com/b"))[0].id
    with pytest.raises(FeedNotFoundError, match="4242"):
        await store.record_probes([
            (ProbeInput(f0, at(0), "ok"), [NewEntry("a")], [], [], None),
            (ProbeInput(4242, at(0), "ok"), [], [], [], None),
            (ProbeInput(f1, at(0), "ok"), [NewEntry("b")], [], [], None),
        ])
    assert await store.list_probes(f0) == [] and await store.list_probes(f1) == []
    assert await store.known_identities(f0, ["a"]) == set()
    assert await store.record_probes([]) == []


async def test_record_probe_skips_eis_and_ceis_deleted_meanwhile(store: Store) -> None:
    user_id, profile_id, (f0, _) = await _profile_with_feeds(store)
    cei = await store.add_cei("c1", profile_id, 0, [NewEi(0, f0, 0, 5)])
    await store.delete_profile(user_id, profile_id)
    record = await store.record_probe(
        ProbeInput(f0, at(0), "ok"),
        [NewEntry("a")],
        captures=[CaptureInput(cei.eis[0].id, 1)],
        cei_changes=[CeiStateChange("c1", "captured", 1)],
    )
    assert record.captured_ei_ids == ()
    assert record.new_identities == ("a",)
    assert len(await store.list_probes(f0)) == 1


async def test_set_ei_captured_with_a_probe_records_the_capture(store: Store) -> None:
    user_id, profile_id, (f0, f1) = await _profile_with_feeds(store)
    cei = await store.add_cei("c1", profile_id, 0, [NewEi(0, f0, 0, 5), NewEi(1, f1, 0, 5)])
    probe = await store.record_probe(ProbeInput(f0, at(0), "ok"), [NewEntry("e")])
    with pytest.raises(ValidationError):
        await store.set_ei_captured(cei.eis[1].id, 1, probe.probe_id)
    with pytest.raises(NotFoundError):
        await store.set_ei_captured(cei.eis[0].id, 1, probe.probe_id + 100)
    assert await store.set_ei_captured(cei.eis[0].id, 1, probe.probe_id) is True
    captured = await store.captured_entries(user_id, profile_id)
    assert [(c.entry.identity, c.ei_id) for c in captured] == [("e", cei.eis[0].id)]


async def test_captured_entries_of_a_profile(store: Store) -> None:
    user_id, profile_id, (f0, f1) = await _profile_with_feeds(store)
    other, _ = await store.create_user("bob")
    cei = await store.add_cei("c1", profile_id, 0, [NewEi(0, f0, 0, 5), NewEi(1, f1, 0, 5)])
    await store.record_probe(ProbeInput(f0, at(0), "ok"), [NewEntry("old")])  # captures nothing
    await store.record_probe(
        ProbeInput(f0, at(60), "ok"), [NewEntry("new")], captures=[CaptureInput(cei.eis[0].id, 1)]
    )
    await store.record_probe(
        ProbeInput(f1, at(120), "ok"),
        [NewEntry("n1", title="hello")],
        captures=[CaptureInput(cei.eis[1].id, 2)],
        cei_changes=[CeiStateChange("c1", "captured", 2)],
    )
    captured = await store.captured_entries(user_id, profile_id)
    assert [(c.entry.identity, c.cei_id, c.chronon) for c in captured] == [
        ("n1", "c1", 2),
        ("new", "c1", 1),
    ]
    assert captured[0].entry.title == "hello"
    with pytest.raises(ProfileNotFoundError):
        await store.captured_entries(other, profile_id)


async def test_purge_keeps_captured_history(store: Store) -> None:
    _, profile_id, (f0, _) = await _profile_with_feeds(store)
    cei = await store.add_cei("c1", profile_id, 0, [NewEi(0, f0, 0, 5)])
    await store.record_probe(
        ProbeInput(f0, at(0), "ok", finished_at=at(0)), [NewEntry(f"old{i}") for i in range(5)]
    )
    kept = await store.record_probe(
        ProbeInput(f0, at(10), "ok", finished_at=at(10)),
        [NewEntry("captured")],
        captures=[CaptureInput(cei.eis[0].id, 1)],
    )
    await store.record_probe(
        ProbeInput(f0, at(10_000), "ok", finished_at=at(10_000)), [NewEntry("recent")]
    )
    result = await store.purge_older_than(at(5_000), batch_size=2)
    assert (result.probes, result.entries) == (1, 5)
    assert await store.known_identities(f0, ["old0", "captured", "recent"]) == {
        "captured",
        "recent",
    }
    assert {p.id for p in await store.list_probes(f0)} >= {kept.probe_id}
    assert len(await store.list_probes(f0)) == 2
    again = await store.purge_older_than(at(5_000))
    assert (again.probes, again.entries) == (0, 0)


# --- metrics and service state ------------------------------------------------------


async def test_metrics_summary(store: Store) -> None:
    user_id, profile_id, (f0, _) = await _profile_with_feeds(store)
    other = await store.create_profile(user_id, "empty", [])
    for i, state in enumerate(["captured", "captured", "captured", "missed", "pending"]):
        await store.add_cei(f"c{i}", profile_id, i, [NewEi(0, f0, i, i + 1)])
        if state != "pending":
            await store.set_cei_state(f"c{i}", state, i + 1)  # type: ignore[arg-type]
    for chronon in range(4):
        await store.record_chronon_metrics(
            chronon, started_at=at(60 * chronon), budget=10, used=chronon + 1
        )
    await store.record_chronon_metrics(3, started_at=at(180), budget=10, used=10)  # overwrite
    summary = await store.metrics_summary(user_id)
    assert (summary.captured, summary.missed, summary.pending) == (3, 1, 1)
    assert summary.completeness == pytest.approx(0.75)
    assert (summary.budget_used, summary.budget_total, summary.chronons) == (1 + 2 + 3 + 10, 40, 4)
    assert summary.budget_use == pytest.approx(16 / 40)
    per = {p.profile_id: p for p in summary.profiles}
    assert per[profile_id].completeness == pytest.approx(0.75)
    assert per[other.id].completeness is None and per[other.id].pending == 0
    recent = await store.metrics_summary(user_id, recent_chronons=1)
    assert (recent.budget_used, recent.budget_total) == (10, 10)
    stranger, _ = await store.create_user("bob")
    empty = await store.metrics_summary(stranger)
    assert (empty.completeness, empty.profiles) == (None, ())
    with pytest.raises(ValidationError):
        await store.record_chronon_metrics(9, started_at=at(0), budget=1, used=2)
    with pytest.raises(ValidationError):
        await store.metrics_summary(user_id, recent_chronons=0)


async def test_service_state_round_trip(store: Store) -> None:
    assert await store.get_state("origin") is None
    assert await store.get_state("origin", 7) == 7
    await store.set_state("origin", {"t0": "2026-01-01T00:00:00+00:00", "chronon_seconds": 60})
    await store.set_state("origin", {"t0": "x", "n": [1, 2]})
    assert await store.get_state("origin") == {"t0": "x", "n": [1, 2]}
    await store.ping()


async def test_timestamps_come_back_aware_utc(store: Store) -> None:
    user_id, _ = await store.create_user("alice")
    user = await store.get_user(user_id)
    assert user.created_at.tzinfo is not None and user.created_at.utcoffset() == dt.timedelta(0)
    feed, _ = await store.register_feed("http://example.com/f")
    plus_two = dt.timezone(dt.timedelta(hours=2))
    updated = await store.update_feed_after_probe(
        feed.id, FeedUpdate(probed_at=dt.datetime(2026, 1, 1, 14, 0, tzinfo=plus_two), outcome="ok")
    )
    assert updated.last_probe_at == dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    assert updated.last_probe_at.tzinfo == dt.UTC  # type: ignore[union-attr]


async def test_unreachable_database_is_a_storage_error() -> None:
    broken = Store.from_url("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    try:
        with pytest.raises(StorageError):
            await broken.ping()
    finally:
        await broken.close()


async def test_driver_errors_become_storage_errors_without_sql_or_parameters(sqlite_url: str) -> None:
    async with Store.from_url(sqlite_url) as unmigrated:
        with pytest.raises(StorageError) as info:
            await unmigrated.authenticate("secret-key")
    message = str(info.value)
    assert "api_keys" in message
    assert "[SQL" not in message and "parameters" not in message
    assert info.value.__cause__ is not None
