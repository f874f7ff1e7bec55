"""``proxy bench live --rule-kind trigger|mixed``: workloads of trigger rules with a query, and a mix.

Issue 43 item 7. A rules workload is built from a generated one
(:func:`proxy.bench.live.poisson_workload` or ``trace_workload``, same seed, same
updates, same profiles' feeds), so it is seeded exactly as the other kinds are,
and it keeps their CEI form: the same scorer (:func:`proxy.bench.metrics.cei_outcome`),
simulator and plain readers read it.

**trigger.** Each profile's first feed ``T`` is its trigger feed and the others
its query feeds (a profile of one feed gets one more, drawn from the seed). Its
rule: ``on: update`` of ``T``, ``slack`` the window ``W``, ``when: {contains:
[topic{p}]}``, and each query feed ``within`` ``W``. A share :data:`MATCH_SHARE`
of ``T``'s updates (drawn per update and per profile, from the seed) carry the
profile's keyword in their title; the farm publishes them so
(:meth:`RulePlan.entry_text`). The CEI of a matching update ``u``:

* the trigger EI ``[u, u + W]`` on ``T``;
* one query EI ``[s, s + W]`` per query feed, ``s`` the chronon of the first probe
  of ``T`` in the trigger EI that saw the entry: the trigger fires there, as in the
  service (main paper §2.1: the query EIs are revealed when the trigger fires).

``s`` depends on the schedule scored, so each schedule (the service's probes, the
simulators', each reader's) is scored on its own CEIs (:meth:`RulePlan.anchored`),
by the same scorer. The generated workload holds ``s = u + 1``, the first chronon the
service can probe ``T`` after the ping (:mod:`proxy.bench.live`): what the simulators
plan with. A matching update in the last chronon makes no CEI.

Updates of ``T`` without the keyword open a trigger CEI in the service too (it
cannot know before it looks), sealed at rank 1 when the probe finds no match.
The user asked for none of them: they are not scored, but the live-equivalent
simulator holds them as tail CEIs (:meth:`RulePlan.tail_ceis`), as the service
spends probes on them.

**mixed.** Profile ``p`` (in ``watched`` order) is a watch rule when ``p % 3 ==
0`` (AuctionWatch over its feeds, the generator's CEIs), a single-feed alert
when ``p % 3 == 1`` (on its first feed, every update ``[u, u + W]``), and a
trigger rule with a query as above when ``p % 3 == 2``.

Deliberately not here: posting, running and scoring (:mod:`proxy.bench.live`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from proxy.bench.metrics import ProbeRec
from proxy.core.model import CEI, EI

if TYPE_CHECKING:
    from proxy.bench.live import BenchWorkload
    from proxy.farm.farm import EntryText

Anchor = Callable[[Sequence[CEI], Sequence[ProbeRec], Mapping[tuple[int, int], float] | None], tuple[CEI, ...]]
"""Scores a schedule's own trigger CEIs (:meth:`RulePlan.anchored`)."""

MATCH_SHARE = 0.5
"""The share of a trigger feed's updates that carry a trigger profile's keyword."""

MIXED_CYCLE = ("watch", "alert", "trigger")
"""Profile ``p`` of a ``mixed`` workload is of kind ``MIXED_CYCLE[p % 3]``."""

RULE_WORKLOADS = ("trigger", "mixed")
"""The ``--rule-kind`` values that need a rules workload (:func:`rules_workload`)."""


@dataclass(frozen=True, slots=True)
class ProfileRule:
    """One profile's rule in a rules workload: its kind, feeds (trigger or alert feed first), keyword."""

    kind: str
    """``watch``, ``alert`` or ``trigger``."""
    feeds: tuple[int, ...]
    keyword: str | None = None
    """A trigger rule's ``contains`` keyword; ``None`` for the other kinds."""


@dataclass(frozen=True, slots=True)
class RulePlan:
    """What a rules workload adds to a :class:`~proxy.bench.live.BenchWorkload`: the rules and the words."""

    kind: str
    """The ``--rule-kind`` it was built for: ``trigger`` or ``mixed``."""
    profiles: tuple[ProfileRule, ...]
    """Per profile, in ``watched`` order."""
    keywords: dict[tuple[int, int], tuple[str, ...]]
    """``(resource, update chronon)`` → the keywords its entry's title carries."""
    names: tuple[str, ...] = ()
    """Each profile's name (``BenchWorkload.profile_names``), in the same order."""

    def rule_body(self, p: int, feeds: Sequence[int], within: str) -> dict[str, Any]:
        """The rule posted for profile ``p``; ``feeds`` are its service feed ids, ``within`` the window."""
        rule = self.profiles[p]
        if rule.kind == "watch":
            return {"name": "watch", "watch": {"feeds": [str(f) for f in feeds], "within": within}}
        trigger: dict[str, Any] = {"feed": str(feeds[0]), "on": "update", "slack": within}
        if rule.kind == "alert":
            return {"name": "alert", "trigger": trigger}
        return {"name": "trigger", "trigger": trigger | {"when": {"contains": [rule.keyword]}},
                "query": [{"feed": str(f), "within": within} for f in feeds[1:]]}

    def entry_text(self, bw: BenchWorkload) -> EntryText:
        """The farm's text of each entry: filler, and the keywords of the update it publishes.

        The farm numbers a feed's entries from 1, the documents' first entries
        (the history, or one placeholder: :func:`proxy.bench.live.run_live`) first;
        the schedule then publishes one entry per update, in order.
        """
        from proxy.farm._docs import default_entry_text

        by_seq: dict[tuple[str, int], tuple[str, ...]] = {}
        for r, ups in enumerate(bw.updates):
            first = (len(bw.history[r]) if bw.history else 1) + 1
            for i, u in enumerate(ups):
                words = self.keywords.get((r, u))
                if words:
                    by_seq[str(r), first + i] = words

        def text(feed_id: str, seq: int) -> tuple[str, str]:
            title, summary = default_entry_text(feed_id, seq)
            words = by_seq.get((feed_id, seq))
            return (f"{title} ({' '.join(words)})", summary) if words else (title, summary)

        return text

    def anchored(self, window: int) -> Anchor:
        """How to score a schedule: each trigger CEI's query EIs ``[s, s + window]`` from the
        chronon ``s`` of the schedule's first probe of the trigger feed inside the trigger EI
        that started at or after the entry's publication (``published``, as
        :func:`proxy.bench.metrics.cei_outcome` reads it). A CEI whose trigger no probe
        caught is kept as generated: it is missed either way."""
        triggers = {name for name, rule in zip(self.names, self.profiles, strict=True) if rule.kind == "trigger"}

        def anchor(ceis: Sequence[CEI], probes: Sequence[ProbeRec],
                   published: Mapping[tuple[int, int], float] | None = None) -> tuple[CEI, ...]:
            seen: dict[int, list[tuple[int, float]]] = {}
            for p in probes:
                if p.ok:
                    seen.setdefault(p.resource, []).append((p.chronon, p.time))
            for lst in seen.values():
                lst.sort()
            out = []
            for c in ceis:
                if c.profile in triggers and len(c.eis) > 1:
                    t = c.eis[0]
                    after = (published or {}).get((t.resource, t.start), float(t.start))
                    lst = seen.get(t.resource, [])
                    fired = next((ch for ch, at in lst[bisect_left(lst, (t.start, -1e18)):]
                                  if ch > t.finish or at >= after), None)
                    if fired is not None and fired <= t.finish:
                        c = replace(c, eis=(t, *(EI(q.resource, fired, fired + window, fired) for q in c.eis[1:])))
                out.append(c)
            return tuple(out)

        return anchor

    def tail_ceis(self, bw: BenchWorkload) -> tuple[CEI, ...]:
        """The CEIs the service holds that the scorer never counts (:func:`proxy.bench.live.tail_ceis`).

        A watch profile's last, never-completed CEI (as for ``--rule-kind watch``),
        and a trigger profile's CEI at each update of its trigger feed without its
        keyword: the service opens one, probes for it and seals it at rank 1.
        """
        from proxy.bench.live import tail_ceis

        k, w = bw.workload.chronons, bw.window
        out: list[CEI] = []
        for name, rule in zip(bw.profile_names, self.profiles, strict=True):
            if rule.kind == "watch":
                own = tuple(c for c in bw.workload.ceis if c.profile == name)
                alone = replace(bw, workload=replace(bw.workload, ceis=own), watched=(rule.feeds,),
                                profile_names=(name,), rules=None)
                out.extend(tail_ceis(alone))
            elif rule.kind == "trigger":
                t = rule.feeds[0]
                out.extend(CEI(f"tail-{name}-{u}", name, (EI(t, u, min(u + w, k - 1), u),))
                           for u in bw.updates[t] if rule.keyword not in self.keywords.get((t, u), ()))
        return tuple(out)


def rules_workload(bw: BenchWorkload, kind: str, seed: int, match_share: float = MATCH_SHARE) -> BenchWorkload:
    """``bw``'s updates and profiles' feeds as a ``trigger`` or ``mixed`` workload (module docstring).

    Seeded: the same ``bw`` and ``seed`` give the same workload. ``bw.profile_names``
    are kept, in ``watched`` order; the CEIs are renumbered in release order, as the
    generator numbers them.
    """
    import numpy as np

    from proxy.bench.live import BenchError

    if kind not in RULE_WORKLOADS:
        raise BenchError(f"a rules workload is one of {', '.join(RULE_WORKLOADS)}, got {kind!r}")
    if not 0 < match_share <= 1:
        raise BenchError(f"match share must be in (0, 1], got {match_share}")
    rng = np.random.default_rng([seed, 43])  # issue 43: its own stream, beside the generator's
    wl = bw.workload
    k, w, n = wl.chronons, bw.window, wl.resources
    rules: list[ProfileRule] = []
    keywords: dict[tuple[int, int], list[str]] = {}
    pending: list[tuple[int, int, int, tuple[EI, ...]]] = []
    for p, (name, feeds) in enumerate(zip(bw.profile_names, bw.watched, strict=True)):
        this = kind if kind == "trigger" else MIXED_CYCLE[p % len(MIXED_CYCLE)]
        if this == "watch":
            rules.append(ProfileRule("watch", feeds))
            own = [c for c in wl.ceis if c.profile == name]
            pending.extend((min(e.start for e in c.eis), p, j, c.eis) for j, c in enumerate(own))
            continue
        t = feeds[0]
        if this == "alert":
            rules.append(ProfileRule("alert", (t,)))
            pending.extend((u, p, j, (EI(t, u, min(u + w, k - 1), u),)) for j, u in enumerate(bw.updates[t]))
            continue
        queries = tuple(feeds[1:])
        if not queries:
            if n < 2:
                raise BenchError("a trigger rule needs a query feed besides its trigger: use 2 feeds or more")
            other = int(rng.integers(0, n - 1))
            queries = (other + (other >= t),)  # any feed but the trigger's
        word = f"topic{p}"
        rules.append(ProfileRule("trigger", (t, *queries), word))
        hits = rng.random(len(bw.updates[t])) < match_share
        j = 0
        for u, hit in zip(bw.updates[t], hits.tolist(), strict=True):
            if not hit:
                continue
            keywords.setdefault((t, u), []).append(word)
            if u + 1 >= k:
                continue  # no query window inside the run
            eis = (EI(t, u, min(u + w, k - 1), u),
                   *(EI(q, u + 1, min(u + 1 + w, k - 1), u + 1) for q in queries))
            pending.append((u, p, j, eis))
            j += 1
    pending.sort(key=lambda x: x[:3])
    width = len(str(max(len(pending) - 1, 0)))
    ceis = tuple(CEI(f"c{i:0{width}d}", bw.profile_names[p], eis) for i, (_, p, _, eis) in enumerate(pending))
    workload = replace(wl, ceis=ceis, meta={**wl.meta, "rule_kind": kind, "match_share": match_share})
    workload.validate()
    plan = RulePlan(kind, tuple(rules), {key: tuple(v) for key, v in keywords.items()}, bw.profile_names)
    counts = {x: sum(1 for r in rules if r.kind == x) for x in MIXED_CYCLE}
    mix = ", ".join(f"{counts[x]} {x}" for x in MIXED_CYCLE if counts[x])
    desc = (f"{bw.description}; as {kind} rules ({mix}): trigger rules on update with slack W, "
            f"a keyword on {match_share:.0%} of their feed's updates, query feeds within W")
    return replace(bw, workload=workload, watched=tuple(r.feeds for r in rules), description=desc, rules=plan)


__all__ = ["MATCH_SHARE", "MIXED_CYCLE", "RULE_WORKLOADS", "Anchor", "ProfileRule", "RulePlan", "rules_workload"]
