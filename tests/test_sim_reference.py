"""The engine's schedules equal a naive, literal reading of the spec's policy semantics.

``shared/spec/workload-format.md`` ("Exact semantics of the named policies")
defines each named policy so that every implementation produces the same
schedule.  This file is a second implementation, written straight from that
text with no attention to speed, and the simulator's schedules (driven
through the real engine) must match it probe for probe.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.model import CEI, EI, Budget, Workload
from proxy.sim.generate import GenParams, Reveal, generate
from proxy.sim.run import simulate

NAMED = ("s-edf-np", "s-edf-p", "mrsf-np", "mrsf-p", "m-edf-np", "m-edf-p", "wic", "round-robin")


def reference_schedule(wl: Workload, policy: str) -> list[tuple[int, int]]:
    probes: list[tuple[int, int]] = []

    def captured(ei: EI, before: int) -> bool:
        return any(r == ei.resource and ei.start <= t <= ei.finish and t < before for t, r in probes)

    for t in range(wl.chronons):
        cap = wl.budget.at(t)
        if policy == "round-robin":
            # At most C_t *distinct* resources: with C_t > n the cycle wraps onto itself.
            chosen = list(dict.fromkeys((t * cap + i) % wl.resources for i in range(cap)))
        elif policy == "wic":
            windows: dict[int, set[tuple[int, int]]] = {}
            for c in wl.ceis:
                for ei in c.eis:
                    if c.reveal_of(ei) <= t and ei.start <= t <= ei.finish and not captured(ei, t):
                        windows.setdefault(ei.resource, set()).add((ei.start, ei.finish))
            ranked = sorted(windows, key=lambda r: (-len(windows[r]), r))
            chosen = ranked[:cap]
        else:
            family, mode = policy.rsplit("-", 1)
            cands = []
            for c in wl.ceis:
                known = [ei for ei in c.eis if c.reveal_of(ei) <= t]
                unc = [ei for ei in known if not captured(ei, t)]
                if any(ei.finish < t for ei in unc):
                    continue  # dead CEI
                group = 0 if mode == "p" or len(unc) < len(known) else 1
                for ei in unc:
                    if not ei.start <= t <= ei.finish:
                        continue
                    if family == "s-edf":
                        value = ei.finish - t + 1
                    elif family == "mrsf":
                        value = len(unc)
                    else:
                        value = sum(e.finish - max(t, e.start) + 1 for e in unc)
                    cands.append((group, value, ei.finish, c.id, ei.resource))
            chosen = []
            for *_, r in sorted(cands):
                if len(chosen) == cap:
                    break
                if r not in chosen:
                    chosen.append(r)
        probes.extend((t, r) for r in chosen)
    return probes


def _check(wl: Workload) -> None:
    for name in NAMED:
        got = sorted(simulate(wl, name).schedule)
        assert got == sorted(reference_schedule(wl, name)), name


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    k = draw(st.integers(2, 9))
    n = draw(st.integers(1, 5))
    budget = Budget(draw(st.integers(1, 2))) if draw(st.booleans()) else Budget(
        tuple(draw(st.lists(st.integers(0, 3), min_size=k, max_size=k))))
    ceis = []
    for i in range(draw(st.integers(1, 7))):
        raw = []
        for _ in range(draw(st.integers(1, 3))):
            s = draw(st.integers(0, k - 1))
            raw.append((draw(st.integers(0, n - 1)), s, draw(st.integers(s, min(k - 1, s + 3)))))
        release = min(s for _, s, _ in raw)
        eis = tuple(EI(r, s, f, draw(st.integers(release, k - 1)) if draw(st.booleans()) else None)
                    for r, s, f in raw)
        ceis.append(CEI(f"c{i}", f"p{i % 2}", eis))
    return Workload(chronons=k, budget=budget, resources=n, ceis=tuple(ceis))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_engine_matches_the_spec_on_small_workloads(wl: Workload) -> None:
    _check(wl)


def test_engine_matches_the_spec_on_a_generated_workload() -> None:
    _check(generate(GenParams(resources=30, profiles=12, chronons=80, lam=6.0, budget=2, window=4), seed=7))


def test_engine_matches_the_spec_with_reveals() -> None:
    _check(generate(GenParams(resources=30, profiles=12, chronons=80, lam=6.0, window=4,
                              reveal=Reveal.UPDATE), seed=8))
