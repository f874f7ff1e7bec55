"""Admission-EDF (``adm-edf``): commit to the cheapest CEIs that still fit, probe without losing them.

Beyond the main paper's policies (issue "Beyond the paper").  MRSF and M-EDF
take one decision in one sort; this policy splits it in three:

1. **Rank** candidate CEIs by *effective* remaining EIs: MRSF's count of
   known uncaptured EIs, except that an active EI whose resource also serves
   ``n`` candidate EIs counts ``1/n`` (spec "Semantics": one probe captures
   every active EI on its resource).  Ties by earliest finish.  A CEI that
   needs fewer probes per capture comes first.
2. **Admit** CEIs in that order, each with all its active EIs or not at all,
   while the admitted probes stay schedulable: at most ``C·(d + 1)`` due
   within the next ``d + 1`` chronons, for every ``d`` (the exact test for
   unit jobs, EDF being optimal for them).  EIs on one resource share a job
   whose deadline is their earliest finish.  Deadlines beyond ``horizon``
   chronons count as ``t + horizon``: the test assumes no future arrivals,
   so far slack is not to be trusted.  When most candidates live longer
   than ``horizon`` (overwrite-style EIs, which last until the next update),
   only ``long_horizon`` chronons are trusted: nearly every job then has
   slack beyond any plan, and ranking beats deferring.  Otherwise, unless
   the load is light (see step 3), only ``heavy_horizon`` of the median life
   is trusted: under overload newcomers crowd out a plan's far end.  Under
   heavy load (a capture share below ``heavy_load``) the CEIs with the most
   left to capture, ``max(3, median + 1)`` EIs or more, are not admitted at
   all (they may still get spare probes).
3. **Probe** the best-ranked admitted jobs now, except where that would make
   another admitted job miss its deadline (then the more urgent one goes
   first, ``Execution.RANK``), or plainly earliest deadline first
   (``Execution.EDF``).  Either way a job with slack can wait, as SUP waits
   for the last useful chronon (second paper), so a probe that is not needed
   yet does not crowd out one that is.  Spare probes go to the next ranked
   resources.  Under light load — at least ``light_load`` of the CEIs
   resolved lately were captured — and lives within the horizon (the
   long-life switch off), ``RANK`` turns into ``EDF``: when most
   CEIs get captured anyway, the question is no longer which to give up but
   how much room to leave newcomers, and EDF leaves them the jobs with the
   latest deadlines.  Under overload the rank order protects the cheapest
   CEIs from the newcomers.

Online: only the pool's active, known candidates, per-CEI counters and the
share of recently resolved CEIs that were captured are read
(``shared/spec/workload-format.md``: what is known at ``t``).  The
policy keeps no state between chronons: admission is recomputed each
chronon, so a newly released, cheaper CEI can displace one admitted before.
It deliberately does not plan for EIs that have not started yet (a variant
that reserved their slots measured no better) and assumes the current
budget ``C`` holds for the next chronons.
"""

from __future__ import annotations

import enum
from collections.abc import Container

import numpy as np

from proxy.core.policies._base import Candidates, IntArray, Policy, PoolView


class Execution(enum.Enum):
    """Which admitted jobs to probe now."""

    RANK = "rank"  # best ranked, unless an admitted job would then miss its deadline
    EDF = "edf"  # earliest deadline, ties by resource id


class AdmissionEdf(Policy):
    """Rank CEIs MRSF-like, admit while EDF-schedulable, probe the most urgent admitted resources.

    ``horizon``: deadlines further than this many chronons ahead count as
    ``t + horizon`` (the schedulability test assumes no future arrivals, so
    it trusts far slack less; measured best at 20 on the paper's settings,
    see ``docs/policies.md``).  ``long_horizon``: the horizon instead when the
    median life (``finish - start``) of the candidates exceeds ``horizon``
    (measured best at 4 on overwrite life; ``None`` turns the switch off).
    ``scan``: candidates ranked per chronon are at
    least ``scan * C``.  ``started_first``: main paper §3.1's non-preemptive
    group in front (measured worse, off by default).  ``atomic``: admit all of
    a CEI's active EIs or none (a half-admitted CEI wastes its probes).
    ``execution``: see :class:`Execution`.  ``light_load``: the
    :meth:`PoolView.capture_share` from which ``RANK`` probes in ``EDF`` order,
    unless the long-life switch is on (``None``: never; measured on held-out
    seeds, 0.75-0.85 all do the same; with overwrite lives EDF lost 0.3-0.4 %).
    ``heavy_horizon``: unless the load is light or the long-life switch is on,
    the horizon is at most this fraction of the candidates' median life
    (``None``: the whole ``horizon``; 0.8 measured best of 0.7-0.9).
    ``heavy_load``: the capture share below which the costliest CEIs are not
    admitted (``None``: never; 0.65 gave the same except at β=1, +0.03 % against +0.22 %).
    """

    def __init__(self, *, horizon: int | None = 20, long_horizon: int | None = 4, scan: int = 64,
                 started_first: bool = False, atomic: bool = True,
                 execution: Execution = Execution.RANK, light_load: float | None = 0.8,
                 heavy_horizon: float | None = 0.8, heavy_load: float | None = 0.7) -> None:
        if scan < 1:
            raise ValueError(f"scan must be >= 1, got {scan}")
        if horizon is not None and horizon < 0:
            raise ValueError(f"horizon must be >= 0 or None, got {horizon}")
        if long_horizon is not None:
            if horizon is None:
                raise ValueError("long_horizon needs a horizon: it applies when candidates outlive the horizon")
            if not 0 <= long_horizon <= horizon:
                raise ValueError(f"long_horizon must be between 0 and horizon ({horizon}) or None, got {long_horizon}")
        if light_load is not None and not 0.0 < light_load <= 1.0:
            raise ValueError(f"light_load must be in (0, 1] or None, got {light_load}")
        if heavy_horizon is not None and not 0.0 <= heavy_horizon <= 1.0:
            raise ValueError(f"heavy_horizon must be in [0, 1] or None, got {heavy_horizon}")
        if heavy_load is not None and not 0.0 < heavy_load <= 1.0:
            raise ValueError(f"heavy_load must be in (0, 1] or None, got {heavy_load}")
        self.horizon = horizon
        self.long_horizon = long_horizon
        self.scan = scan
        self.started_first = started_first
        self.atomic = atomic
        self.execution = execution
        self.light_load = light_load
        self.heavy_horizon = heavy_horizon
        self.heavy_load = heavy_load

    @property
    def name(self) -> str:
        return "adm-edf"

    def select(self, pool: PoolView, budget: int, blocked: Container[int]) -> list[int]:
        if budget <= 0:
            return []
        cands = pool.cei_candidates()
        m = len(cands)
        if m == 0:
            return []
        t = cands.t
        fin = cands.finish
        horizon = int(fin.max()) - t
        limit = self.horizon
        life = _median_life(cands)
        share = pool.capture_share()  # the load signal: None until enough CEIs resolved
        light = self.light_load is not None and share is not None and share >= self.light_load
        heavy = self.heavy_load is not None and share is not None and share < self.heavy_load
        long_lived = limit is not None and self.long_horizon is not None and life > limit
        if long_lived:
            limit = self.long_horizon
        elif limit is not None and self.heavy_horizon is not None and not light:
            limit = min(limit, round(self.heavy_horizon * life))
        if limit is not None and horizon > limit:
            horizon = limit
            fin = np.minimum(fin, t + horizon)
        cap = budget * (horizon + 1)  # no more jobs than this can ever be admitted
        key = self._rank_key(pool, cands)
        # Rank only a prefix: a million candidates must not be fully sorted
        # each chronon, and at most `cap` jobs can be admitted anyway.
        k = min(m, max(self.scan * budget, 4 * cap))
        prefix = _prefix_order(key, k).tolist()
        res: list[int] = cands.resource.tolist() if m <= k else cands.resource[prefix].tolist()
        fins: list[int] = fin.tolist() if m <= k else fin[prefix].tolist()
        ceis: list[int] = cands.cei.tolist() if m <= k else cands.cei[prefix].tolist()
        pos = range(len(prefix)) if m > k else prefix  # where row i's values sit in the lists
        rows = list(zip(pos, prefix, strict=True))
        costly = _costly(pool, cands) if heavy else None
        if costly is not None:
            left: list[int] = pool.remaining(cands.cei[prefix]).tolist()
            rows = [row for row, n in zip(rows, left, strict=True) if n < costly]
        deadline = self._admit(rows, res, fins, ceis, t, budget, cap, blocked)
        if len(deadline) < budget:
            # Spare probes hurt nothing admitted: take the next resources in
            # rank order (the whole order if the prefix runs dry).
            order = prefix if m <= k else _prefix_order(key, m).tolist()
            all_res: list[int] = cands.resource[order].tolist()
            for r in all_res:
                if r not in deadline and r not in blocked:
                    deadline[r] = t + horizon + 1  # after every admitted job
                    if len(deadline) >= budget:
                        break
        if self.execution is Execution.EDF or (light and not long_lived):
            ranked = sorted(deadline.items(), key=lambda kv: (kv[1], kv[0]))
            return [r for r, _ in ranked[:budget]]
        return _probe_now(deadline, t, budget, horizon + 2)

    def _admit(self, rows: list[tuple[int, int]], res: list[int], fins: list[int], ceis: list[int],
               t: int, budget: int, cap: int, blocked: Container[int]) -> dict[int, int]:
        """Resource -> deadline of the admitted jobs, CEIs taken in ``rows`` order.

        ``slack[d]`` is how many more jobs due within ``t .. t+d`` still fit:
        ``C·(d+1)`` minus those admitted; a set is schedulable (EDF) iff no
        slack is negative.  A job due at ``t+d`` takes one from ``slack[d:]``.
        """
        horizon = cap // budget  # deadlines are at most t + horizon - 1
        slack = [budget * (d + 1) for d in range(horizon)]
        groups: dict[int, list[int]] = {}
        if self.atomic:
            for p, _ in rows:
                groups.setdefault(ceis[p], []).append(p)
        deadline: dict[int, int] = {}
        admitted = 0
        done: set[int] = set()
        for p, _ in rows:
            c = ceis[p]
            if self.atomic:
                if c in done:
                    continue
                done.add(c)
                members = groups[c]
            else:
                members = [p]
            undo: list[tuple[int, int | None, int, int]] = []  # resource, old deadline, slack range
            ok = True
            for j in members:
                r = res[j]
                if r in blocked:
                    ok = False
                    break
                f = fins[j] - t
                old = deadline.get(r)
                if old is not None and old <= f:
                    continue  # the admitted probe of r captures this EI too
                hi = horizon if old is None else old
                for d in range(f, hi):
                    slack[d] -= 1
                    if slack[d] < 0:
                        ok = False
                deadline[r] = f
                undo.append((r, old, f, hi))
                if not ok:
                    break
            if not ok:
                for r, old, lo, hi in reversed(undo):
                    for d in range(lo, hi):
                        slack[d] += 1
                    if old is None:
                        del deadline[r]
                    else:
                        deadline[r] = old
                continue
            admitted = len(deadline)
            if admitted >= cap or slack[-1] <= 0:
                break  # no further job can fit
        return {r: t + d for r, d in deadline.items()}

    def _rank_key(self, pool: PoolView, cands: Candidates) -> IntArray:
        """Smaller is better: (not started, effective remaining EIs, finish) packed into one int64.

        Effective remaining: a CEI's known uncaptured EIs, where an active EI
        whose resource also serves ``n`` candidate EIs counts ``1/n`` (the probe
        is shared, spec "Semantics"), so cheap-to-finish CEIs come first.
        Quantised to 1/1024 so that the sort stays on integers.
        """
        cei, res, finish = cands.cei, cands.resource, cands.finish
        share = np.bincount(res)[res].astype(np.float64)  # candidates on each row's resource
        np.reciprocal(share, out=share)
        np.subtract(1.0, share, out=share)  # what sharing saves on this EI
        saved = np.bincount(cei, weights=share)[cei]
        eff = pool.remaining(cei) * _QUANT
        eff -= np.rint(saved * _QUANT).astype(np.int64)
        f0 = int(finish.min())
        bits_f = (int(finish.max()) - f0).bit_length()
        key = eff << bits_f
        key += finish
        key -= f0
        if self.started_first:
            bits_v = int(key.max()).bit_length()
            key |= (pool.captured_count(cei) == 0).astype(np.int64) << bits_v
        return key


_QUANT = 1024

#: Candidates sampled (evenly strided) to estimate a median over them: enough
#: for a median, and ``select`` over a million candidates stays fast.
_SAMPLE = 1024


def _sample(cands: Candidates) -> slice:
    """An even stride over the candidates that keeps about :data:`_SAMPLE` rows (all when fewer)."""
    return slice(None, None, max(1, len(cands) // _SAMPLE))


def _costly(pool: PoolView, cands: Candidates) -> int:
    """Under heavy load, the known uncaptured EIs from which a CEI is not admitted.

    ``max(3, median + 1)``, the median taken over the candidates' CEIs (an
    even sample when there are many): the CEIs left with the most to capture
    are given up first, as the rolling LP gives up those needing three more
    probes or more (``docs/policies.md``).
    """
    median = int(np.median(pool.remaining(cands.cei[_sample(cands)])))
    return max(3, median + 1)


def _median_life(cands: Candidates) -> float:
    """The median ``finish - start`` of the candidates (of an even sample when there are many)."""
    rows = _sample(cands)
    return float(np.median(cands.finish[rows] - cands.start[rows]))


def _probe_now(jobs: dict[int, int], t: int, budget: int, span: int) -> list[int]:
    """The ``budget`` jobs to probe at ``t``: best ranked first, unless that makes another miss.

    ``jobs`` maps resource -> deadline in rank order and is schedulable.  A
    job is taken when the jobs left (with the probes still free at ``t``)
    remain schedulable; EDF guarantees some job always qualifies.
    """
    if len(jobs) <= budget:
        return list(jobs)
    cnt = [0] * span  # jobs due at t + d
    for d in jobs.values():
        cnt[d - t] += 1
    chosen: list[int] = []
    for r, d in jobs.items():
        cnt[d - t] -= 1
        free = budget - len(chosen) - 1
        due = 0
        ok = True
        for e, c in enumerate(cnt):
            due += c
            if due > free + budget * e:
                ok = False
                break
        if ok:
            chosen.append(r)
            if len(chosen) >= budget:
                break
        else:
            cnt[d - t] += 1
    return chosen


def _prefix_order(key: IntArray, k: int) -> IntArray:
    """Indices of the ``k`` smallest keys in ascending order (ties by index, but arbitrary which tie makes the cut)."""
    m = len(key)
    if k >= m:
        return np.argsort(key, kind="stable")
    idx = np.argpartition(key, k - 1)[:k]
    idx.sort()
    return idx[np.argsort(key[idx], kind="stable")]
