"""The spec's candidate order and walk, shared by every CEI-aware policy.

Spec ("Exact semantics of the named policies", steps 5-6): sort candidates by
``(group, value, I.finish, c.id, I.resource)`` ascending, ``c.id`` compared as
a string, then walk adding resources until ``C_t`` distinct ones are chosen.

Sorting a million candidates fully would be too slow for one chronon, so on
large pools we only sort a prefix of the order that is guaranteed to hold the
answer: the ``k`` smallest packed ``(group, value, finish)`` keys with every
tie at the threshold, cut down further by the CEI id's leading bytes when the
tie group is large.  Exact string comparison happens in Python only among
candidates whose first 16 id bytes agree.  This module deliberately does not
know any policy's value: callers pass ``group`` and ``value`` arrays.
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Iterable, Iterator

import numpy as np

from proxy.core.policies._base import Candidates, IntArray, PoolView, U64Array

#: Below this many candidates a plain Python sort beats numpy's per-call overhead.
#: Tests lower it to 0 to run the numpy path on small pools too.
SMALL_POOL = 64
#: The first prefix tried holds ``4 * budget + PREFIX_SLACK`` candidates.
PREFIX_SLACK = 16
#: A tie group at the threshold larger than this (and than 4x what is still
#: needed) is cut by the leading id bytes instead of sorted whole.
TIE_CUT = 64
#: Pools of at least ``16 * SAMPLE`` candidates bound the threshold on a sample this big.
SAMPLE = 4096


def walk(resources: Iterable[int], budget: int, blocked: Container[int]) -> list[int]:
    """Spec step 6: distinct resources in the given order, skipping blocked ones, up to ``budget``."""
    chosen: list[int] = []
    if budget <= 0:
        return chosen
    seen: set[int] = set()
    for r in resources:
        if r in seen or r in blocked:
            continue
        seen.add(r)
        chosen.append(r)
        if len(chosen) >= budget:
            break
    return chosen


def select_by_key(
    pool: PoolView,
    cands: Candidates,
    group: IntArray | None,
    value: IntArray | None,
    budget: int,
    blocked: Container[int],
) -> list[int]:
    """Choose resources by the spec's key.

    ``group`` None means all zeros (preemptive); ``value`` None means the
    value orders exactly like ``finish`` (S-EDF's ``finish - t + 1``), which
    saves packing it.  ``group`` and ``value`` must be fresh arrays: they are
    overwritten.
    """
    m = len(cands)
    if budget <= 0 or m == 0:
        return []
    if m <= SMALL_POOL:
        return _select_small(pool, cands, group, value, budget, blocked)
    return _select_large(pool, cands, group, value, budget, blocked)


def _select_small(
    pool: PoolView,
    cands: Candidates,
    group: IntArray | None,
    value: IntArray | None,
    budget: int,
    blocked: Container[int],
) -> list[int]:
    m = len(cands)
    ids = pool.ids(cands.cei.tolist())
    groups: list[int] = group.tolist() if group is not None else [0] * m
    finish: list[int] = cands.finish.tolist()
    values: list[int] = value.tolist() if value is not None else finish
    rows = sorted(zip(groups, values, finish, ids, cands.resource.tolist(), strict=True))
    return walk((row[4] for row in rows), budget, blocked)


def _primary_key(group: IntArray | None, value: IntArray | None, cands: Candidates) -> IntArray:
    """One int64 per candidate ordered like ``(group, value, finish)``.

    Packs the fields into 62 bits when their ranges allow it (they always do
    for realistic workloads), in place to spare memory bandwidth; otherwise
    falls back to the dense rank of the triple (a full sort, still exact).
    The result may be ``cands.finish`` itself: callers must not modify it.
    """
    finish = cands.finish
    f0 = cands.t  # candidates are active: t <= finish <= finish_bound
    bits_f = (cands.finish_bound - f0).bit_length()
    bits_v = 0
    v0 = 0
    if value is not None:
        v0 = int(value.min())
        bits_v = (int(value.max()) - v0).bit_length()
    bits_g = 1 if group is not None else 0
    if bits_g + bits_v + bits_f > 62:
        return _dense_rank(group, value, finish)
    if value is None:
        if group is None:
            return finish
        key = finish - f0
    else:
        # ((value - v0) << bits_f) + (finish - f0), with both offsets in one pass.
        key = value
        key <<= bits_f
        key += finish
        key -= (v0 << bits_f) + f0
    if group is not None:
        group <<= bits_v + bits_f
        key |= group
    return key


def _dense_rank(group: IntArray | None, value: IntArray | None, finish: IntArray) -> IntArray:
    g = group if group is not None else np.zeros_like(finish)
    v = value if value is not None else finish
    order = np.lexsort((finish, v, g))
    fs, vs, gs = finish[order], v[order], g[order]
    change = np.empty(len(order), dtype=np.int64)
    change[0] = 0
    change[1:] = (fs[1:] != fs[:-1]) | (vs[1:] != vs[:-1]) | (gs[1:] != gs[:-1])
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.cumsum(change)
    return rank


def _select_large(
    pool: PoolView,
    cands: Candidates,
    group: IntArray | None,
    value: IntArray | None,
    budget: int,
    blocked: Container[int],
) -> list[int]:
    m = len(cands)
    primary = _primary_key(group, value, cands)
    k = min(m, 4 * budget + PREFIX_SLACK)
    while True:
        sub = _prefix(pool, cands, primary, k)
        k1, k2 = pool.id_keys(cands.cei[sub])
        perm = np.lexsort((cands.resource[sub], k2, k1, primary[sub]))
        chosen = walk(
            _exact_order(pool, cands, sub[perm], primary[sub][perm], k1[perm], k2[perm]),
            budget,
            blocked,
        )
        if len(chosen) >= budget or len(sub) >= m:
            return chosen
        # Not enough distinct, unblocked resources in the prefix: widen it.
        k = min(m, 4 * k)


def _prefix(pool: PoolView, cands: Candidates, primary: IntArray, k: int) -> IntArray:
    """Indices of a prefix of the full order holding at least ``k`` candidates.

    The prefix is closed under ties of ``(primary, first 8 id bytes)``, so it
    is exactly a prefix of the spec's order whatever the remaining keys say.
    On large pools a strided sample first bounds the threshold, so the exact
    partition runs on a few thousand keys instead of millions; if the sample
    misjudges, the full partition runs instead (slower, never wrong).
    """
    m = len(primary)
    if k >= m:
        return np.arange(m, dtype=np.int64)
    if m >= 16 * SAMPLE:
        step = m // SAMPLE
        sample = primary[::step]
        j = min(len(sample) - 1, 4 * k // step + 8)
        idx = np.flatnonzero(primary <= np.partition(sample, j)[j])
        if len(idx) >= k:
            return idx[_prefix_of(pool, cands.cei[idx], primary[idx], k)]
    return _prefix_of(pool, cands.cei, primary, k)


def _prefix_of(pool: PoolView, cei: IntArray, primary: IntArray, k: int) -> IntArray:
    m = len(primary)
    if k >= m:
        return np.arange(m, dtype=np.int64)
    thr = np.partition(primary, k - 1)[k - 1]
    idx = np.flatnonzero(primary <= thr)
    if len(idx) <= max(4 * k, TIE_CUT):
        return idx
    at_thr = primary[idx] == thr
    tie = idx[at_thr]
    below = idx[~at_thr]
    need = k - len(below)
    if len(tie) <= max(4 * need, TIE_CUT):
        return idx
    # A large tie group (e.g. MRSF with few distinct values): cut it by the
    # leading id bytes, which order consistently with the id string.
    tk1 = pool.id_head(cei[tie])
    thr1 = np.partition(tk1, need - 1)[need - 1]
    return np.concatenate((below, tie[tk1 <= thr1]))


def _exact_order(
    pool: PoolView,
    cands: Candidates,
    order: IntArray,
    primary: IntArray,
    k1: U64Array,
    k2: U64Array,
) -> Iterator[int]:
    """Resources of ``order`` with runs of equal id keys re-sorted by the exact id string."""
    n = len(order)
    if n == 0:
        return
    res = cands.resource[order]
    cei = cands.cei[order]
    differs = (primary[1:] != primary[:-1]) | (k1[1:] != k1[:-1]) | (k2[1:] != k2[:-1])
    bounds = [0, *(np.flatnonzero(differs) + 1).tolist(), n]
    for a, b in itertools.pairwise(bounds):
        rs: list[int] = res[a:b].tolist()
        if b - a == 1:
            yield rs[0]
            continue
        cs: list[int] = cei[a:b].tolist()
        if min(cs) == max(cs):
            yield from rs  # one CEI: lexsort already ordered it by resource
            continue
        ids = pool.ids(cs)
        yield from (r for _, r in sorted(zip(ids, rs, strict=True)))
