"""Synthetic workloads in the main paper's setup (Roitman, Gal, Raschid, §4.1, Table 1).

Two stages, each seeded through one ``numpy.random.Generator`` (no global
randomness, so a seed reproduces a file byte for byte):

1. **Updates.**  Each resource ``r`` gets a Poisson number of updates with
   mean ``λ_r`` over the epoch of ``K`` chronons, at uniform chronons
   (several updates inside one chronon are one observable change).  ``λ_r``
   is ``λ`` for every resource, or lognormal around ``λ`` (``rate_sigma``)
   for heterogeneous feeds; a real trace can replace this stage
   (:mod:`proxy.sim.traces`).
2. **Profiles and CEIs** (§4.1.2, AuctionWatch(k)).  Each of ``m`` profiles
   gets a rank from Zipf(β) over ``1..k`` (or exactly ``k``) and that many
   distinct resources from Zipf(α) over the resources by popularity.  A
   profile's CEIs follow "notify after a new bid is posted in all k
   auctions": CEI ``j+1`` holds, for each watched resource, the EI of its
   first update strictly after the last EI start of CEI ``j``.

EI of an update at ``u``: ``window(W)`` gives ``[u, min(u+W, K-1)]``;
``overwrite`` gives ``[u, next_update - 1]`` (or ``K-1``), the bid being
overwritten by the next one.

Not here: file I/O (``workload_io``) and any notion of policy.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum

import numpy as np

from proxy.core.model import CEI, EI, Budget, Workload


class Life(StrEnum):
    """How long an update stays capturable (§4.1.2)."""

    WINDOW = "window"
    OVERWRITE = "overwrite"


class Reveal(StrEnum):
    """When an online policy learns of an EI.

    ``release``: the whole CEI at its release (the spec's default, and what
    the paper's simulator feeds the proxy).  ``update``: each EI at its own
    start, as a pub/sub proxy learns of updates only when they happen.
    """

    RELEASE = "release"
    UPDATE = "update"


@dataclass(frozen=True, slots=True)
class GenParams:
    """Control parameters of Table 1; the defaults are its baseline values."""

    resources: int = 1000
    profiles: int = 100
    chronons: int = 1000
    budget: int = 1
    lam: float = 20.0
    rank: int = 3
    life: Life = Life.WINDOW
    window: int = 10
    alpha: float = 0.0
    beta: float = 0.0
    exact_rank: bool = False
    reveal: Reveal = Reveal.RELEASE
    rate_sigma: float = 0.0

    def check(self) -> None:
        """Raise ``ValueError`` naming the first parameter out of range."""
        for name in ("resources", "profiles", "chronons", "rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("budget", "window"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("lam", "alpha", "beta", "rate_sigma"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def to_meta(self) -> dict[str, object]:
        return {k: (str(v) if isinstance(v, StrEnum) else v) for k, v in asdict(self).items()}


def poisson_updates(
    rng: np.random.Generator, resources: int, chronons: int, lam: float, rate_sigma: float = 0.0
) -> list[list[int]]:
    """Sorted, distinct update chronons per resource (stage 1)."""
    if rate_sigma > 0:
        # Lognormal rates with mean λ: exp(σZ - σ²/2) has mean 1.
        rates = lam * np.exp(rate_sigma * rng.standard_normal(resources) - rate_sigma**2 / 2)
    else:
        rates = np.full(resources, lam)
    counts = rng.poisson(rates)
    times = rng.integers(0, chronons, size=int(counts.sum()))
    out: list[list[int]] = []
    offset = 0
    for c in counts.tolist():
        out.append(np.unique(times[offset : offset + c]).tolist())
        offset += c
    return out


def zipf_weights(size: int, exponent: float) -> np.ndarray:
    """P(rank i) ∝ i^-exponent for i = 1..size; exponent 0 is uniform (§4.1.2)."""
    w = np.arange(1, size + 1, dtype=float) ** -exponent
    return np.asarray(w / w.sum())


def ei_for_update(updates: Sequence[int], index: int, life: Life, window: int, chronons: int) -> tuple[int, int]:
    """``(start, finish)`` of the EI for ``updates[index]`` under ``life``."""
    u = updates[index]
    if life is Life.WINDOW:
        return u, min(u + window, chronons - 1)
    # overwrite: valid until the next observable update replaces it.
    nxt = bisect_right(updates, u)
    return u, (updates[nxt] - 1 if nxt < len(updates) else chronons - 1)


def profile_ceis(
    watched: Sequence[int],
    updates: Sequence[Sequence[int]],
    life: Life,
    window: int,
    chronons: int,
    reveal: Reveal,
) -> list[tuple[EI, ...]]:
    """The CEIs of one AuctionWatch profile over ``watched`` resources, in time order."""
    out: list[tuple[EI, ...]] = []
    last = -1
    while True:
        eis: list[EI] = []
        for r in watched:
            ups = updates[r]
            i = bisect_right(ups, last)
            if i == len(ups):
                return out
            s, f = ei_for_update(ups, i, life, window, chronons)
            eis.append(EI(r, s, f, s if reveal is Reveal.UPDATE else None))
        out.append(tuple(eis))
        last = max(ei.start for ei in eis)


def generate(
    params: GenParams,
    seed: int,
    updates: Sequence[Sequence[int]] | None = None,
    *,
    updated_only: bool = False,
) -> Workload:
    """A workload for ``params`` and ``seed``; ``updates`` (per resource) replaces stage 1.

    ``updated_only``: profiles watch only resources with at least one update
    (a real trace holds many feeds silent in the window, and a profile on a
    silent feed would produce no CEI at all).
    """
    params.check()
    rng = np.random.default_rng(seed)
    n, k = params.resources, params.chronons
    if updates is None:
        updates = poisson_updates(rng, n, k, params.lam, params.rate_sigma)
    elif len(updates) != n:
        raise ValueError(f"updates cover {len(updates)} resources, params say {n}")

    # Popularity order is a seeded permutation so that popular resources are
    # not simply the small ids (which policies use as a tie-break).
    by_popularity = rng.permutation(n)
    resource_p = zipf_weights(n, params.alpha)
    eligible = n
    if updated_only:
        silent = np.array([not updates[int(r)] for r in by_popularity])
        resource_p = np.where(silent, 0.0, resource_p)
        eligible = int((~silent).sum())
        if eligible == 0:
            raise ValueError("no resource has an update: nothing to watch")
        resource_p = resource_p / resource_p.sum()
    max_rank = min(params.rank, eligible)
    rank_p = zipf_weights(max_rank, params.beta)

    pending: list[tuple[int, int, int, tuple[EI, ...]]] = []
    for p in range(params.profiles):
        rank = max_rank if params.exact_rank else int(rng.choice(max_rank, p=rank_p)) + 1
        picks = rng.choice(n, size=rank, replace=False, p=resource_p)
        watched = [int(by_popularity[i]) for i in picks]
        for j, eis in enumerate(profile_ceis(watched, updates, params.life, params.window, k, params.reveal)):
            pending.append((min(ei.start for ei in eis), p, j, eis))
    pending.sort(key=lambda x: x[:3])
    # Zero-padded ids so that the spec's string tie-break follows release order.
    width = len(str(max(len(pending) - 1, 0)))
    ceis = tuple(
        CEI(id=f"c{i:0{width}d}", profile=f"p{p}", eis=eis) for i, (_, p, _, eis) in enumerate(pending)
    )
    meta: dict[str, object] = {
        "generator": "proxy.sim.generate/1",
        "seed": seed,
        "params": params.to_meta(),
        "updates": sum(len(u) for u in updates),
        "eis": sum(len(c.eis) for c in ceis),
    }
    if updated_only:
        meta["updated_only"] = True
    workload = Workload(chronons=k, budget=Budget(params.budget), resources=n, ceis=ceis, meta=meta)
    workload.validate()
    return workload
