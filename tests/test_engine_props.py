"""The engine reproduces the spec exactly: same schedule as the naive reference, for every policy."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.engine import CeiCaptured, CeiMissed, CeiState, EiCaptured, Engine
from proxy.core.model import CEI, EI, Budget, Workload
from proxy.core.policies import _ordering
from tests.reference_engine import ALL_POLICIES, reference_schedule, rescore, run_engine

# Prefixes chosen so that ids sort differently from their index, and some share
# their first 16 bytes (the engine's numeric id keys tie; strings must decide).
ID_PREFIXES = ["a", "b", "ab", "B", "é", "x" * 16, "x" * 16 + "y", "c-"]


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    k = draw(st.integers(1, 30))
    n = draw(st.integers(1, 4))
    ceis: list[CEI] = []
    for i in range(draw(st.integers(0, 8))):
        raw = []
        for _ in range(draw(st.integers(1, 3))):
            s = draw(st.integers(0, k - 1))
            f = draw(st.integers(s, min(k - 1, s + 8)))
            raw.append((draw(st.integers(0, n - 1)), s, f))
        release = draw(st.none() | st.integers(0, k - 1))
        base = release if release is not None else min(s for _, s, _ in raw)
        eis = tuple(EI(r, s, f, draw(st.none() | st.integers(base, k - 1))) for r, s, f in raw)
        cid = draw(st.sampled_from(ID_PREFIXES)) + str(draw(st.integers(0, 99))) + f"/{i}"
        ceis.append(CEI(cid, draw(st.sampled_from(["p0", "p1"])), eis, release))
    budget = draw(
        st.integers(0, 3).map(Budget) | st.lists(st.integers(0, 3), min_size=k, max_size=k).map(lambda b: Budget(tuple(b)))
    )
    w = Workload(k, budget, n, tuple(ceis))
    w.validate()
    return w


@contextmanager
def numpy_path(enabled: bool) -> Iterator[None]:
    """Force the large-pool code path (sample, partition, prefix, tie cut) even on tiny pools."""
    names = ("SMALL_POOL", "PREFIX_SLACK", "TIE_CUT", "SAMPLE")
    saved = [getattr(_ordering, name) for name in names]
    if enabled:
        for name in names:
            setattr(_ordering, name, 1 if name == "SAMPLE" else 0)
    try:
        yield
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(_ordering, name, value)


SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("large_path", [False, True], ids=["python-path", "numpy-path"])
@pytest.mark.parametrize("policy", ALL_POLICIES)
@SETTINGS
@given(w=workloads())
def test_engine_schedule_equals_reference(policy: str, large_path: bool, w: Workload) -> None:
    with numpy_path(large_path):
        got, engine = run_engine(w, policy)
    assert got == reference_schedule(w, policy)
    per_chronon = Counter(t for t, _ in got)
    assert all(per_chronon[t] <= w.budget.at(t) for t in range(w.chronons))
    assert all(len({r for t2, r in got if t2 == t}) == per_chronon[t] for t in per_chronon)
    assert engine.counts()[CeiState.CAPTURED] == rescore(w, got)


@SETTINGS
@given(w=workloads(), policy=st.sampled_from(ALL_POLICIES))
def test_events_agree_with_states_and_counts(w: Workload, policy: str) -> None:
    _, engine = run_engine(w, policy)
    events = engine.drain_events()
    captured = [e.cei_id for e in events if isinstance(e, CeiCaptured)]
    missed = [e.cei_id for e in events if isinstance(e, CeiMissed)]
    assert len(captured) == len(set(captured)) and len(missed) == len(set(missed))
    assert not set(captured) & set(missed)
    counts = engine.counts()
    assert counts[CeiState.CAPTURED] == len(captured)
    assert counts[CeiState.MISSED] == len(missed)
    assert sum(counts.values()) == len(w.ceis)
    for c in w.ceis:
        expected = (CeiState.CAPTURED if c.id in captured else
                    CeiState.MISSED if c.id in missed else CeiState.PENDING)
        assert engine.state(c.id) is expected
    # Every EI of a captured CEI was reported captured exactly once.
    ei_events = Counter(e.cei_id for e in events if isinstance(e, EiCaptured))
    by_id = {c.id: c for c in w.ceis}
    for cid in captured:
        assert ei_events[cid] == len(by_id[cid].eis)
    assert engine.drain_events() == []


@SETTINGS
@given(w=workloads(), policy=st.sampled_from(ALL_POLICIES))
def test_live_probe_path_equals_simulator_path(w: Workload, policy: str) -> None:
    """begin_probe + complete_probe(success=True) within a chronon is exactly probe()."""
    sim_schedule, sim = run_engine(w, policy)

    class LiveEngine(Engine):
        def probe(self, resources):
            chosen = list(resources)
            for r in chosen:
                self.begin_probe(r)
            out = []
            for r in chosen:
                out += self.complete_probe(r, self.now, success=True)
            return out

    live_schedule, live = run_engine(w, policy, LiveEngine(w.resources))
    assert live_schedule == sim_schedule
    assert live.counts() == sim.counts()


@SETTINGS
@given(w=workloads(), policy=st.sampled_from(ALL_POLICIES), data=st.data())
def test_slow_and_failing_probes_resolve_every_cei_by_its_successful_probes(
    w: Workload, policy: str, data: st.DataObject
) -> None:
    """Live path: probes land 0-3 chronons late or fail; verdicts wait for them.

    Once every probe has completed and every window has passed, a CEI is
    captured exactly when each of its EIs has a successful probe of its
    resource that started inside its window, and missed otherwise.
    """
    eng = Engine(w.resources)
    released: dict[int, list[CEI]] = {}
    reveals: dict[int, list[tuple[CEI, EI, bool]]] = {}
    for c in w.ceis:
        rel = c.effective_release
        released.setdefault(rel, []).append(c)
        later = sorted((c.reveal_of(ei), j) for j, ei in enumerate(c.eis) if c.reveal_of(ei) > rel)
        for n, (when, j) in enumerate(later):
            reveals.setdefault(when, []).append((c, c.eis[j], n == len(later) - 1))
    due: dict[int, list[tuple[int, int, bool]]] = {}
    successes: list[tuple[int, int]] = []
    end = w.chronons + 4
    for t in range(end + 1):
        eng.advance(t)
        for c in released.get(t, ()):
            known = [(ei.resource, ei.start, ei.finish) for ei in c.eis if c.reveal_of(ei) <= t]
            eng.add_cei(c.id, c.profile, known, sealed=len(known) == len(c.eis))
        for c, ei, last in reveals.get(t, ()):
            eng.reveal_ei(c.id, ei.resource, ei.start, ei.finish, seal=last)
        if t < w.chronons:
            for r in eng.select(w.budget.at(t), policy):
                eng.begin_probe(r)
                delay = data.draw(st.integers(0, 3))
                due.setdefault(t + delay, []).append((r, t, data.draw(st.booleans())))
        # Probes land at the end of a chronon, after that chronon's decisions.
        for r, started, ok in due.pop(t, []):
            eng.complete_probe(r, started, success=ok)
            if ok:
                successes.append((started, r))
    assert not due
    probes = set(successes)
    for c in w.ceis:
        covered = all(
            any((p, ei.resource) in probes for p in range(ei.start, ei.finish + 1)) for ei in c.eis
        )
        assert eng.state(c.id) is (CeiState.CAPTURED if covered else CeiState.MISSED), c.id
