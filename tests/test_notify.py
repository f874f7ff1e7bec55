"""Issue 19's pure parts and the outbox's store contract (both backends).

* :func:`decide` and :class:`RetryPolicy` as tables with a fixed clock and RNG;
* signatures checked by the ``standardwebhooks`` package (an independent verifier);
* the text rendering;
* the store writes an event and its deliveries in the SAME transaction as the
  CEI's resolution (a rolled-back probe leaves neither), once per CEI, with
  the document's facts (captured entries; missed EIs and why).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from proxy.errors import ConflictError, NotFoundError, ValidationError
from proxy.notify.payload import Notification
from proxy.notify.render import render_text
from proxy.notify.senders import SendResult
from proxy.notify.signing import new_secret, sign, webhook_headers
from proxy.service.dispatch import RetryPolicy, _outcome_label, decide
from proxy.store import (
    TARGET_DISABLED_ERROR,
    AttemptOutcome,
    CaptureInput,
    CeiStateChange,
    DueDelivery,
    NewEi,
    NewEntry,
    ProbeInput,
    RuleInput,
    Store,
    TargetInput,
)

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# --- back-off and outcomes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempts", "low", "high"),
    [(1, 2.5, 5.0), (2, 5.0, 10.0), (3, 10.0, 20.0), (10, 1280.0, 2560.0), (11, 1800.0, 3600.0), (500, 1800.0, 3600.0)],
)
def test_backoff_doubles_with_equal_jitter_up_to_the_cap(attempts: int, low: float, high: float) -> None:
    policy = RetryPolicy(base=5.0, cap=3600.0)
    rng = random.Random(7)
    delays = [policy.delay(attempts, rng) for _ in range(200)]
    assert all(low <= d <= high for d in delays)
    assert max(delays) - min(delays) > (high - low) / 2  # jitter spreads retries


def _due(attempts: int = 0, window_start: dt.datetime = T0) -> DueDelivery:
    return DueDelivery(
        id=1, event_id=2, target_id=3, kind="webhook", url="https://h/x", secrets=("s",),
        msg_id="msg_1", payload="{}", attempts=attempts, window_start=window_start,
        resolved_at=T0, target_disabled=None,
    )


POLICY = RetryPolicy(base=10.0, cap=100.0, window=86400.0)


@pytest.mark.parametrize(
    ("result", "attempts", "now", "state", "wait", "disabled"),
    [
        (SendResult(True, status=204), 0, at(1), "delivered", (0, 0), False),
        (SendResult(False, status=500, error="HTTP 500"), 0, at(1), "pending", (5, 10), False),
        (SendResult(False, status=500, error="HTTP 500"), 3, at(1), "pending", (40, 80), False),
        (SendResult(False, error="timeout after 10s"), 9, at(1), "pending", (50, 100), False),
        # Retry-After longer than the back-off wins; shorter does not shorten it.
        (SendResult(False, status=503, retry_after=600.0), 0, at(1), "pending", (600, 600), False),
        (SendResult(False, status=429, retry_after=1.0), 0, at(1), "pending", (5, 10), False),
        # 410 Gone: a dead letter at once, and the target is disabled.
        (SendResult(False, status=410, error="HTTP 410", gone=True), 0, at(1), "failed", (0, 0), True),
        # The retry window (24 h) is over: a dead letter.
        (SendResult(False, status=500), 30, at(86400), "failed", (0, 0), False),
        (SendResult(False, status=500), 30, at(86399), "pending", (50, 100), False),
    ],
)
def test_decide(result: SendResult, attempts: int, now: dt.datetime, state: str,
                wait: tuple[float, float], disabled: bool) -> None:
    out = decide(_due(attempts), result, now, POLICY, random.Random(1))
    assert isinstance(out, AttemptOutcome)
    assert out.state == state
    assert wait[0] <= (out.next_attempt_at - now).total_seconds() <= wait[1]
    assert bool(out.disable_target) is disabled
    assert (out.status, out.error) == (result.status, result.error)


# --- signatures and text ----------------------------------------------------------------


def test_signatures_verify_with_the_standard_webhooks_package() -> None:
    secret, body = new_secret(), b'{"type":"captured","x":"\xc3\xa9"}'
    assert secret.startswith("whsec_")
    ts = int(dt.datetime.now(dt.UTC).timestamp())
    headers = webhook_headers([secret], "msg_abc", ts, body)
    assert headers["webhook-signature"] == sign(secret, "msg_abc", ts, body)
    assert Webhook(secret).verify(body, headers) == json.loads(body)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body + b" ", headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)


def test_during_a_rotation_both_secrets_verify() -> None:
    new, old, body = new_secret(), new_secret(), b"{}"
    ts = int(dt.datetime.now(dt.UTC).timestamp())
    headers = webhook_headers([new, old], "msg_1", ts, body)
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert Webhook(new).verify(body, headers) == {}
    assert Webhook(old).verify(body, headers) == {}


def _doc(kind: str) -> Notification:
    ei = {
        "ordinal": 0, "feed_id": 1, "feed_url": "https://blog.example/feed", "state": "captured",
        "start": 10, "finish": 12, "window_start": at(600), "window_end": at(780),
        "captured_chronon": 11, "captured_at": at(660),
        "entries": [{"title": "Oil at $90", "link": "https://blog.example/1", "published": None,
                     "summary": "Crude   oil\nrose " + "x" * 300}],
        "more_entries": 2,
    }
    missed = {
        "ordinal": 1, "feed_id": 2, "feed_url": "https://news.example/rss", "state": "missed",
        "start": 10, "finish": 12, "window_start": at(600), "window_end": at(780),
        "captured_chronon": None, "captured_at": None, "missed_reason": "feed_failing",
        "feed_failure": {"outcome": "http_error", "http_status": 503, "error": None,
                         "chronon": 11, "at": at(661)},
    }
    return Notification.model_validate({
        "type": kind, "event_id": 5, "created_at": at(700),
        "profile": {"id": 1, "name": "analyst"}, "rule": {"id": 2, "name": "oil news"},
        "cei": {"id": "r2:0", "state": kind, "fired": kind == "captured", "release": 10, "resolved_chronon": 12,
                "resolved_at": at(720)},
        "eis": [ei] if kind == "captured" else [ei, missed],
    })


def test_text_rendering_says_what_happened() -> None:
    title, body = render_text(_doc("captured"))
    assert title == "[analyst / oil news] captured: CEI r2:0"
    assert "CEI r2:0 was captured; the rule fired." in body
    assert "* Oil at $90 <https://blog.example/1>" in body
    assert "Crude oil rose" in body and "… and 2 more" in body
    assert max(len(line) for line in body.splitlines()) < 260  # summaries are cut
    title, body = render_text(_doc("missed"))
    assert title.endswith("missed: CEI r2:0")
    assert "was missed; the rule did not fire (its trigger was only checked)." in body
    assert "https://news.example/rss (missed, window 2026-12-01 12:10:00Z): the feed was failing: http_error 503" in body


# --- the store's outbox -----------------------------------------------------------------


async def _setup(store: Store, events: tuple[str, ...] = ("captured", "missed")) -> tuple[int, int, list[int], int]:
    user_id, _ = await store.create_user("alice")
    feeds = []
    for i in range(2):
        reg, _ = await store.register_feed_for(user_id, f"http://example.com/{i}?k=alice")
        feeds.append(reg.feed.id)
    hook = TargetInput("webhook", "https://hooks.example/a", events)
    profile = await store.create_profile(
        user_id, "p", [RuleInput("r", {}, tuple(feeds))], notify=[hook],
        notify_spec=[{"webhook": hook.url, "events": list(events)}])
    assert profile.notify == [{"webhook": "https://hooks.example/a", "events": list(events)}]
    (target,) = profile.new_targets
    assert target.secret is not None and target.secret.startswith("whsec_")
    return user_id, profile.id, feeds, profile.rules[0].id


async def test_a_capture_writes_its_event_and_delivery_in_the_probe_transaction(store: Store) -> None:
    store.chronon_start = lambda t: at(60 * t)
    user_id, pid, (f0, f1), rule_id = await _setup(store)
    cei = await store.add_cei("r1:0", pid, 0, [NewEi(0, f0, 0, 5), NewEi(1, f1, 0, 5)], rule_id=rule_id)
    await store.record_probe(ProbeInput(f0, at(0), "ok", chronon=1), [NewEntry("a", title="A")],
                             captures=[CaptureInput(cei.eis[0].id, 1)])
    assert await store.list_deliveries(user_id) == []  # not resolved yet
    await store.record_probe(
        ProbeInput(f1, at(60), "ok", chronon=2),
        [NewEntry("b", title="B", link="https://e/b", summary="s"), NewEntry("c")],
        captures=[CaptureInput(cei.eis[1].id, 2)],
        cei_changes=[CeiStateChange("r1:0", "captured", 2)],
    )
    (delivery,) = await store.list_deliveries(user_id)
    assert (delivery.cei_id, delivery.type, delivery.state, delivery.attempts) == ("r1:0", "captured", "pending", 0)
    assert delivery.msg_id.startswith("msg_")
    doc = Notification.model_validate_json((await store.get_event(user_id, delivery.event_id)).payload)
    assert doc.event_id == delivery.event_id and doc.type == "captured"
    assert doc.cei.fired is False  # stored as not fired: the document says so
    assert (doc.profile.id, doc.rule and doc.rule.id) == (pid, rule_id)
    assert [(e.feed_id, e.state, e.captured_chronon) for e in doc.eis] == [(f0, "captured", 1), (f1, "captured", 2)]
    assert [e.title for e in doc.eis[0].entries] == ["A"]
    assert [(e.title, e.link, e.summary) for e in doc.eis[1].entries] == [("B", "https://e/b", "s"), (None, None, None)]
    assert doc.eis[1].feed_url == "http://example.com/1?k=alice"  # the owner's own URL
    assert doc.eis[1].window_start == at(0) and doc.eis[1].window_end == at(360)
    assert doc.cei.resolved_at == at(120)
    due = await store.due_deliveries(at(10**6))
    assert [d.id for d in due] == [delivery.id]
    assert due[0].payload == (await store.get_event(user_id, delivery.event_id)).payload
    # Resolving it again writes nothing more (one event per CEI).
    await store.set_cei_state("r1:0", "captured", 3)
    assert len(await store.list_deliveries(user_id)) == 1


async def test_a_rolled_back_probe_leaves_no_notification(store: Store) -> None:
    user_id, pid, (f0, f1), rule_id = await _setup(store)
    cei = await store.add_cei("r1:0", pid, 0, [NewEi(0, f0, 0, 5), NewEi(1, f1, 0, 5)], rule_id=rule_id)
    with pytest.raises(ValidationError):
        await store.record_probe(  # captures an EI of another feed: the whole probe is refused
            ProbeInput(f0, at(0), "ok", chronon=1),
            captures=[CaptureInput(cei.eis[1].id, 1)],
            cei_changes=[CeiStateChange("r1:0", "captured", 1)],
        )
    assert await store.list_deliveries(user_id) == []
    assert await store.events_after(user_id, 0) == []


async def test_a_missed_cei_says_which_eis_and_why(store: Store) -> None:
    user_id, pid, (f0, f1), rule_id = await _setup(store)
    cei = await store.add_cei("r1:0", pid, 0, [NewEi(0, f0, 0, 5), NewEi(1, f1, 0, 5), NewEi(2, f0, 8, 9)],
                              rule_id=rule_id, fired=True)
    await store.record_probe(ProbeInput(f0, at(0), "ok", chronon=1), captures=[CaptureInput(cei.eis[0].id, 1)])
    await store.record_probe(ProbeInput(f1, at(60), "http_error", chronon=2, http_status=503, error="down"))
    await store.record_probe(ProbeInput(f1, at(120), "timeout", chronon=7, error="timeout (read)"))
    await store.set_cei_state("r1:0", "missed", 9)
    (event,) = await store.events_after(user_id, 0)
    doc = Notification.model_validate_json(event.payload)
    assert doc.type == "missed" and doc.cei.resolved_at is None  # no clock given: no wall times
    assert doc.cei.fired is True  # the condition held, and still the CEI was missed
    assert [(e.state, e.missed_reason) for e in doc.eis] == [
        ("captured", None), ("missed", "feed_failing"), ("missed", "window_passed")]
    failure = doc.eis[1].feed_failure
    assert failure is not None and (failure.outcome, failure.http_status, failure.error, failure.chronon) == (
        "http_error", 503, "down", 2)  # the last failure in [0, 5], not the one at chronon 7


async def test_targets_subscriptions_and_events_filter_deliveries(store: Store) -> None:
    user_id, _ = await store.create_user("bob")
    reg, _ = await store.register_feed_for(user_id, "http://example.com/f")
    f = reg.feed.id
    default = TargetInput("webhook", "https://hooks.example/default", ("captured", "missed"))
    own = TargetInput("apprise", "json://hooks.example/own", ("missed",))
    profile = await store.create_profile(
        user_id, "p",
        [RuleInput("a", {}, (f,)), RuleInput("b", {}, (f,), notify=(own,)), RuleInput("c", {}, (f,), notify=())],
        notify=[default])
    a, b, c = (r.id for r in profile.rules)
    assert sorted(t.kind for t in profile.new_targets) == ["apprise", "webhook"]
    for i, rule in enumerate((a, b, c, a)):
        await store.add_cei(f"r{rule}:{i}", profile.id, 0, [NewEi(0, f, 0, 1)], rule_id=rule)
    for i, rule in enumerate((a, b, c)):
        await store.set_cei_state(f"r{rule}:{i}", "captured", 1)
    await store.set_cei_state(f"r{b}:1", "missed", 1)  # captured already: nothing new
    await store.set_cei_state(f"r{a}:3", "missed", 2)
    rows = {(d.cei_id, d.target_kind, d.type) for d in await store.list_deliveries(user_id)}
    assert rows == {(f"r{a}:0", "webhook", "captured"), (f"r{a}:3", "webhook", "missed")}
    # Every resolution is an event for the stream, with or without targets.
    assert [e.cei_id for e in await store.events_after(user_id, 0)] == [
        f"r{a}:0", f"r{b}:1", f"r{c}:2", f"r{a}:3"]
    # The same URL named again is the same target: no new secret.
    again = await store.replace_profile(user_id, profile.id, "p", [RuleInput("a", {}, (f,))], notify=[default])
    assert again.new_targets == ()
    assert len(await store.list_targets(user_id)) == 2


async def test_owner_only_retries_rotation_and_enabling(store: Store) -> None:
    user_id, pid, (f0, _), rule_id = await _setup(store)
    bob, _ = await store.create_user("bob")
    await store.add_cei("r1:0", pid, 0, [NewEi(0, f0, 0, 5)], rule_id=rule_id)
    await store.set_cei_state("r1:0", "missed", 6)
    (d,) = await store.list_deliveries(user_id)
    for call in (store.get_delivery(bob, d.id), store.retry_delivery(bob, d.id),
                 store.rotate_target_secret(bob, d.target_id, dt.timedelta(0)),
                 store.enable_target(bob, d.target_id), store.get_event(bob, d.event_id)):
        with pytest.raises(NotFoundError):
            await call
    assert await store.list_deliveries(bob) == [] and await store.list_targets(bob) == []
    now = dt.datetime.now(dt.UTC)
    await store.record_attempts([AttemptOutcome(d.id, d.target_id, now, "failed", now, 410,
                                                "HTTP 410", disable_target="410 Gone")])
    (failed,) = await store.list_deliveries(user_id, "failed")
    assert (failed.attempts, failed.last_status) == (1, 410)
    with pytest.raises(ConflictError, match="disabled"):
        await store.retry_delivery(user_id, d.id)
    assert (await store.enable_target(user_id, d.target_id)).disabled is False
    retried = await store.retry_delivery(user_id, d.id)
    assert retried.state == "pending" and await store.outbox_backlog() == 1
    rotated = await store.rotate_target_secret(user_id, d.target_id, dt.timedelta(hours=1))
    assert rotated.secret is not None
    (due,) = await store.due_deliveries(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
    assert due.secrets[0] == rotated.secret and len(due.secrets) == 2


async def test_delivery_totals_read_back_from_the_rows_match_the_live_counter(store: Store) -> None:
    """``proxy_deliveries_total`` after a restart (issue 23): the outcomes the dispatcher
    counted, rebuilt from the rows alone."""
    user_id, pid, (f0, _), rule_id = await _setup(store)
    for i in range(5):
        await store.add_cei(f"r1:{i}", pid, 0, [NewEi(0, f0, 0, 5)], rule_id=rule_id)
        await store.set_cei_state(f"r1:{i}", "missed", 6)
    rows = sorted(await store.list_deliveries(user_id), key=lambda d: d.id)
    now = dt.datetime.now(dt.UTC)

    def retry(d: Any) -> AttemptOutcome:
        return AttemptOutcome(d.id, d.target_id, now, "pending", now, 500, "HTTP 500")

    d0, d1, d2, d3, d4 = rows
    history = [
        [retry(d0), retry(d0), AttemptOutcome(d0.id, d0.target_id, now, "delivered", now, 200)],
        [retry(d1), AttemptOutcome(d1.id, d1.target_id, now, "failed", now, 500, "HTTP 500")],  # window over
        [retry(d2)],  # still pending
        [AttemptOutcome(d3.id, d3.target_id, now, "failed", now, 410, "HTTP 410", disable_target="410 Gone")],
        [retry(d4), AttemptOutcome(d4.id, d4.target_id, now, "failed", now,
                                   error=f"{TARGET_DISABLED_ERROR}410 Gone", attempted=False)],
    ]
    counted: dict[str, int] = {}
    for outcomes in history:
        for o in outcomes:
            await store.record_attempts([o])
            counted[_outcome_label(o)] = counted.get(_outcome_label(o), 0) + 1
    assert counted == {"retry": 5, "delivered": 1, "failed": 1, "gone": 1, "target_disabled": 1}
    assert (await store.metric_totals()).deliveries == counted


# --- retention --------------------------------------------------------------------------


async def test_retention_purges_settled_deliveries_and_their_events_never_pending_ones(
    store: Store,
) -> None:
    clock = [at(0)]
    timed = Store(store.engine, clock=lambda: clock[0])  # the same database, stamped by clock
    user_id, _ = await timed.create_user("alice")
    reg, _ = await timed.register_feed_for(user_id, "http://example.com/f")
    f = reg.feed.id
    hooks = [TargetInput("webhook", f"https://hooks.example/{h}", ("captured", "missed"))
             for h in "ab"]
    profile = await timed.create_profile(user_id, "p", [RuleInput("r", {}, (f,))], notify=hooks)
    bob, _ = await timed.create_user("bob")
    quiet = await timed.create_profile(bob, "no targets", [])
    names = ("delivered", "failed", "pending", "recent", "retried", "half")
    for name in (*names, "bob"):
        owner = quiet if name == "bob" else profile
        await timed.add_cei(f"c:{name}", owner.id, 0, [NewEi(0, f, 0, 5)],
                            rule_id=owner.rules[0].id if owner.rules else None)
        await timed.set_cei_state(f"c:{name}", "captured", 1)  # bob's: an event, no delivery
    rows: dict[str, list[Any]] = {}
    for d in await timed.list_deliveries(user_id):
        rows.setdefault(d.cei_id.removeprefix("c:"), []).append(d)
    day = 86400.0
    settle = {"delivered": ("delivered", 60), "failed": ("failed", 120),
              "recent": ("delivered", 40 * day), "retried": ("failed", 60),
              "half": ("delivered", 60)}
    outcomes = [
        AttemptOutcome(d.id, d.target_id, at(when), state, at(when))  # type: ignore[arg-type]
        for name, (state, when) in settle.items()
        for d in rows[name][: 1 if name == "half" else 2]  # "half": one target still pending
    ]
    await timed.record_attempts(outcomes)
    clock[0] = at(40 * day)
    for d in rows["retried"]:
        await timed.retry_delivery(user_id, d.id)  # dead letters brought back: pending again

    result = await timed.purge_older_than(at(30 * day), batch_size=1)
    # Deliveries: both of "delivered" and "failed", the settled one of "half". Events: those of
    # "delivered" and "failed", and bob's (no delivery ever referred to it).
    assert (result.deliveries, result.events) == (5, 3)
    left = sorted((d.cei_id, d.state) for d in await timed.list_deliveries(user_id))
    assert left == [("c:half", "pending"), *[("c:pending", "pending")] * 2,
                    *[("c:recent", "delivered")] * 2, *[("c:retried", "pending")] * 2]
    assert sorted(e.cei_id for e in await timed.events_after(user_id, 0)) == [
        "c:half", "c:pending", "c:recent", "c:retried"]
    assert await timed.events_after(bob, 0) == []
    again = await timed.purge_older_than(at(30 * day))
    assert (again.deliveries, again.events) == (0, 0)
