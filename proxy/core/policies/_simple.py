"""Profile-blind baselines: WIC with uniform urgency, and round-robin."""

from __future__ import annotations

from collections.abc import Container

import numpy as np

from proxy.core.policies import _ordering
from proxy.core.policies._base import Policy, PoolView
from proxy.core.policies._ordering import walk


class Wic(Policy):
    """WIC (Pandey, Dhamdhere, Olston 2004) as the spec pins it down.

    Value of resource ``r``: the number of distinct ``(start, finish)`` pairs
    among its active, known, uncaptured EIs; largest first, ties by smaller
    resource id.  It does not prune dead CEIs: WIC does not know CEIs.
    """

    @property
    def name(self) -> str:
        return "wic"

    def select(self, pool: PoolView, budget: int, blocked: Container[int]) -> list[int]:
        if budget <= 0:
            return []
        cands = pool.wic_candidates()
        if len(cands) == 0:
            return []
        if len(cands) <= _ordering.SMALL_POOL:
            pairs: dict[int, set[tuple[int, int]]] = {}
            for r, s, f in zip(cands.resource.tolist(), cands.start.tolist(), cands.finish.tolist(), strict=True):
                pairs.setdefault(r, set()).add((s, f))
            return walk(sorted(pairs, key=lambda r: (-len(pairs[r]), r)), budget, blocked)
        res, start, finish = cands.resource, cands.start, cands.finish
        # Distinct (resource, start, finish) triples, then triples per resource.
        # (np.sort and a diff, not np.unique: the latter was 100x slower here.)
        s0, f0 = int(start.min()), int(finish.min())
        bits_s = (int(start.max()) - s0).bit_length()
        bits_f = (int(finish.max()) - f0).bit_length()
        shift = bits_s + bits_f
        if int(res.max()).bit_length() + shift <= 62:
            key = np.sort((res << shift) | ((start - s0) << bits_f) | (finish - f0))
            first = np.ones(len(key), dtype=np.bool_)
            np.not_equal(key[1:], key[:-1], out=first[1:])
            per_res = key[first] >> shift
        else:
            order = np.lexsort((finish, start, res))
            r, st, f = res[order], start[order], finish[order]
            first = np.ones(len(order), dtype=np.bool_)
            first[1:] = (r[1:] != r[:-1]) | (st[1:] != st[:-1]) | (f[1:] != f[:-1])
            per_res = r[first]
        # per_res is sorted: run lengths are the counts (no bincount: ids may be sparse).
        starts = np.flatnonzero(np.concatenate(([True], per_res[1:] != per_res[:-1])))
        resources = per_res[starts]
        counts = np.diff(np.append(starts, len(per_res)))
        # Largest count first, ties by smaller resource id: one packed sort.
        bits_r = int(resources[-1]).bit_length()
        if bits_r + int(counts.max()).bit_length() <= 62:
            ranked = np.sort(((counts.max() - counts) << bits_r) | resources) & ((1 << bits_r) - 1)
        else:
            ranked = resources[np.lexsort((resources, -counts))]
        return walk(ranked.tolist(), budget, blocked)


class RoundRobin(Policy):
    """What a plain feed reader does: resources ``(t * C_t + i) mod n`` for ``i < C_t``."""

    @property
    def name(self) -> str:
        return "round-robin"

    def select(self, pool: PoolView, budget: int, blocked: Container[int]) -> list[int]:
        n = pool.resources
        if budget <= 0 or n <= 0:
            return []
        base = pool.now * budget
        return walk(((base + i) % n for i in range(budget)), budget, blocked)
