"""A watch rule's CEIs, AuctionWatch (main paper §4; issue 46: the evaluator split by purpose).

CEI ``j+1`` takes, for each watched feed, its first update strictly after the last EI start
of CEI ``j``; later updates of a feed the current CEI already covers wait for the next CEI.
"""

from __future__ import annotations

from proxy.rules._compiled import WatchRule
from proxy.rules._state import OpenCeis, WatchState
from proxy.rules._waiting import WaitingRules
from proxy.rules.ports import Op, OpenCei, RevealEi

__all__ = ["watch_update"]


def watch_update(
    rule: WatchRule, state: WatchState, resource: int, t: int,
    open_ceis: OpenCeis, waiting: WaitingRules, dirty: set[str],
) -> list[Op]:
    """``resource`` changed at chronon ``t``: what the watch rule does (its state, the open CEIs,
    what the rules wait for and the changed rules kept up to date). A missed CEI (not
    ``alive``) is still built, silently, so the next one starts where AuctionWatch says."""
    if not rule.period.active(t) or t <= state.prev_last_start or resource in state.covered:
        return []
    ei = (resource, t, t + rule.within)
    complete = len(state.covered) + 1 == len(rule.resources)
    ops: list[Op] = []
    dirty.add(rule.rule_id)
    if state.cei_id is None:
        state.cei_id = f"{rule.rule_id}:{state.seq}"
        state.seq += 1
        state.alive = True
        ops.append(OpenCei(state.cei_id, rule.profile_id, rule.rule_id, (ei,), sealed=complete, fired=True))
        if not complete:
            open_ceis.hold(state.cei_id, rule.rule_id)
    elif state.alive:
        ops.append(RevealEi(state.cei_id, *ei, seal=complete))
    state.covered[resource] = t
    waiting.wait((resource,), -1)  # its later updates wait for the next CEI
    if complete:
        state.prev_last_start = max(state.covered.values())
        open_ceis.release(state.cei_id)
        state.cei_id = None
        state.covered = {}
        waiting.wait(rule.resources, +1)
    waiting.reweigh(rule.rule_id, rule, state)
    return ops
