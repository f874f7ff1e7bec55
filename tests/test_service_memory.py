"""The loop's memory is bounded by what is live, not by how long it has run (the soak).

``benchmarks/machinery/bench_soak.py`` showed the heap of ``proxy serve`` growing
with every chronon: the engine remembered the verdict of every CEI ever resolved
(one dict entry each) because nothing told it to forget them. The runtime now
forgets a verdict once the evaluator no longer holds its CEI open and
``RESOLVED_KEPT_CHRONONS`` have passed (docs/operations.md, "Soak"). Chronons are
counted, never timed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, cast

from proxy.core.policies import get_policy
from proxy.feeds import Prober
from proxy.rules import ChrononGrid
from proxy.service._persist import Step, Writer
from proxy.service.clock import ChrononClock
from proxy.service.loop import ChrononLoop
from proxy.service.metrics import ServiceMetrics
from proxy.service.runtime import RESOLVED_KEPT_CHRONONS, Runtime
from proxy.store import Feed, Profile, Rule, Store

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
MISH, CNN = 11, 12  # store feed ids; resources 0 and 1
RULE = 7


def _feed(feed_id: int, resource: int, *, disabled: bool = False) -> Feed:
    return Feed(id=feed_id, url=f"http://f/{feed_id}", url_normalised=f"http://f/{feed_id}",
                resource=resource, etag=None, last_modified=None, last_probe_at=None,
                last_outcome=None, consecutive_errors=0, next_allowed_at=None, disabled=disabled,
                disabled_reason=None, created_at=T0)


def _profile(every: str) -> Profile:
    """One trigger rule on MISH every ``every`` (60 s chronons), querying CNN within 2 minutes."""
    spec: dict[str, Any] = {"name": "oil", "trigger": {"feed": str(MISH), "every": every, "slack": "1m",
                                                       "when": {"contains": ["oil"]}},
                            "query": [{"feed": str(CNN), "within": "2m"}]}
    rule = Rule(id=RULE, profile_id=3, name="oil", position=0, spec=spec, state=None, feed_ids=(MISH, CNN))
    return Profile(id=3, user_id=1, name="p", created_at=T0, updated_at=T0, rules=(rule,))


def _runtime(*, disabled: bool = False) -> Runtime:
    rt = Runtime(ChrononGrid(T0, 60.0))
    for resource, feed_id in enumerate((MISH, CNN)):
        rt.feeds.note(rt.feeds.put(_feed(feed_id, resource, disabled=disabled)))
    return rt


def _known(rt: Runtime, cei_id: str) -> bool:
    try:
        rt.engine.state(cei_id)
    except KeyError:
        return False
    return True


@dataclasses.dataclass
class _Writer:
    """What ``ChrononLoop.tick`` asks of the writer: never full; what it is given is dropped."""

    full: bool = False
    backlog: int = 0
    batches: int = 0

    def submit(self, steps: list[Step]) -> None:
        self.batches += 1


def test_the_loop_forgets_resolved_ceis_so_its_memory_stays_bounded() -> None:
    # The feeds are disabled: nothing is probed, every firing (one a chronon) is missed when its
    # window passes. Before the fix the engine remembered all 3,000 verdicts.
    rt = _runtime(disabled=True)
    rt.install(_profile("1m"), restore_states=False)
    wall = T0.timestamp()
    clock = ChrononClock(T0, 60.0, wall=lambda: wall)
    writer = _Writer()
    loop = ChrononLoop(rt, cast(Store, None), cast(Writer, writer), cast(Prober, None), clock,
                       ServiceMetrics(), budget=2, policy=get_policy("mrsf-p"))
    chronons = 3000
    for t in range(chronons):
        wall = clock.start_of(t).timestamp()
        assert loop.tick(t, 0.0) == []
    fired = [f"r{RULE}:{i}" for i in range(chronons)]
    resolved = sum(1 for c in fired if _known(rt, c) and not rt.evaluator.holds_open(c))
    assert rt.tally.missed == 0 and writer.batches == chronons  # the tally goes into each chronon row
    assert not _known(rt, fired[0]) and not _known(rt, fired[chronons // 2])  # forgotten
    assert 0 < resolved <= RESOLVED_KEPT_CHRONONS + 10  # the last ones only, not 3,000
    assert len(rt.resolved) <= RESOLVED_KEPT_CHRONONS + 10
    assert rt.tally.refused_ops == 0


def test_forgetting_changes_no_decision_and_refuses_no_op() -> None:
    # Both feeds probed every chronon, MISH always with a new "oil" entry: most firings are
    # captured. Every CEI the evaluator may still name is known to the engine all along.
    rt = _runtime()
    rt.install(_profile("5m"), restore_states=False)

    @dataclasses.dataclass(frozen=True)
    class _Entry:
        title: str
        published: dt.datetime
        summary: str | None = None
        content: str | None = None

    forgotten = 0
    for t in range(1000):
        rt.engine.advance(t)
        rt.apply(rt.evaluator.on_tick(t))
        for r in (0, 1):
            rt.engine.begin_probe(r)
            new = [_Entry("Oil up", rt.clock.start_of(t))] if r == 0 else []
            rt.apply(rt.evaluator.on_probe(r, t, True, new))
            rt.engine.complete_probe(r, t, success=True)
            rt.drain_all()
        forgotten += rt.forget_resolved(t)
        assert all(_known(rt, c) for c in rt.evaluator.open_cei_ids())
    assert rt.tally.captured > 150 and rt.tally.refused_ops == 0
    assert forgotten > 100 and len(rt.resolved) <= RESOLVED_KEPT_CHRONONS


def test_a_cei_the_evaluator_holds_open_keeps_its_verdict_until_released() -> None:
    # After a restore a rule's saved state can still hold a CEI the engine resolved (its late
    # seal must stay a no-op, not a refused op): its verdict waits until the rule lets it go.
    rt = _runtime(disabled=True)
    rt.install(_profile("1m"), restore_states=False)
    held = {f"r{RULE}:0"}
    rt.evaluator.holds_open = held.__contains__  # type: ignore[method-assign]
    for t in range(4 * RESOLVED_KEPT_CHRONONS):
        rt.engine.advance(t)
        rt.apply(rt.evaluator.on_tick(t))
        rt.drain_all()
        rt.forget_resolved(t)
    assert _known(rt, f"r{RULE}:0") and not _known(rt, f"r{RULE}:1")
    held.clear()
    t += RESOLVED_KEPT_CHRONONS
    rt.engine.advance(t)
    rt.forget_resolved(t)
    assert not _known(rt, f"r{RULE}:0")


def test_the_heap_trim_hands_back_free_memory_where_the_c_library_is_glibc() -> None:
    import platform

    from proxy.service._heap import _malloc_trim, trim_heap

    garbage = [bytes(4096) for _ in range(10_000)]  # 40 MiB in blocks glibc serves, then freed
    del garbage
    released = trim_heap()
    assert isinstance(released, bool)
    if platform.libc_ver()[0] == "glibc":
        assert _malloc_trim() is not None
    else:
        assert released is False
