"""Background probes: where the budget the EIs left goes, so updates of feeds that never ping are found.

A rule that waits for a feed's updates (``on: update``, a watch rule) learns of
one only from a ping or from a probe that finds new entries. Most feeds never
ping, so the probes that the EIs do not need each chronon go to the watched
feeds most likely to hold an update nobody has seen, weighted by how many
rules wait for them: ``weight * P(the feed changed since its last successful
probe)``, with ``P = 1 - exp(-rate * elapsed)`` under a Poisson update model
(paper 004 §2; Cho & Garcia-Molina 2003 for freshness). A feed never probed
successfully comes first: its first probe is what later ones are compared to.

With equal rates and weights this is round-robin over the watched feeds
(the stalest first); a faster feed is looked at more often, a slower one still
in its turn, because the chance it changed grows with the time since its last
probe. It is a greedy index, not yet the budget-optimal allocation for the
learnt models; ``docs/discovery.md`` says how it compares.

Pure: chronons, rates and weights in, resources out. Does not know why a feed
is watched, nor which feeds are blocked (the caller leaves them out).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["background_probes", "rank_background"]


def background_probes(
    budget: int,
    now: int,
    resources: Sequence[int],
    last_success: Sequence[int | None],
    rate: Sequence[float],
    weight: Sequence[float],
) -> list[int]:
    """At most ``budget`` of ``resources`` to probe at ``now``, best first.

    ``last_success[i]`` is the chronon of resource ``i``'s last successful
    probe (``None``: never), ``rate[i]`` its expected updates per chronon and
    ``weight[i]`` how much an update of it is worth (the rules waiting for it).
    Ties go to the longer wait, then to the smaller resource id. A feed with
    nothing to gain (score 0: probed at ``now``, or a zero rate or weight) is
    never picked.
    """
    n = len(resources)
    if not n == len(last_success) == len(rate) == len(weight):
        raise ValueError("resources, last_success, rate and weight must have the same length")
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if budget == 0 or n == 0:
        return []
    never = np.array([t is None for t in last_success], dtype=bool)
    last = np.array([now if t is None else t for t in last_success], dtype=np.float64)
    elapsed = np.maximum(now - last, 0.0)
    lam = np.maximum(np.asarray(rate, dtype=np.float64), 0.0)
    score = np.asarray(weight, dtype=np.float64) * -np.expm1(-lam * elapsed)
    score[never] = np.inf
    elapsed[never] = np.inf
    return rank_background(budget, resources, score.tolist(), elapsed.tolist())


def rank_background(
    budget: int, resources: Sequence[int], score: Sequence[float], waited: Sequence[float]
) -> list[int]:
    """At most ``budget`` of ``resources`` by ``score``, best first; the ranking behind :func:`background_probes`.

    For callers whose scores come from a richer model than a Poisson rate
    (the service's per-feed update models: seasonal, near-periodic). Ties go
    to the longer ``waited``, then to the smaller resource id; a score of 0
    (nothing to gain) is never picked.
    """
    if not len(resources) == len(score) == len(waited):
        raise ValueError("resources, score and waited must have the same length")
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if budget == 0 or not resources:
        return []
    res = np.asarray(resources, dtype=np.int64)
    sc = np.asarray(score, dtype=np.float64)
    # lexsort: the last key is the primary one; all ascending, so negate what ranks high.
    order = np.lexsort((res, -np.asarray(waited, dtype=np.float64), -sc))
    picked = order[:budget]
    picked = picked[sc[picked] > 0]  # a feed probed this very chronon has nothing new to show
    return [int(r) for r in res[picked]]
