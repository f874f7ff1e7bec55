"""Which installed rules read each feed's events, and each feed's keyword automaton (issue 46:
the evaluator split by purpose; issue 43: one automaton per feed, not a loop over rules).
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.rules._compiled import CompiledRule, selective
from proxy.rules.matching import KeywordIndex

__all__ = ["FeedRules"]


class FeedRules:
    """Per feed, the rules that trigger on it or watch it, in installation order (the order the
    evaluator visits them), and the automaton over those rules' keyword and regex conditions.

    Query feeds are not listed: a query feed's probe decides nothing.
    """

    def __init__(self) -> None:
        self.rules: dict[int, list[str]] = {}  # feed -> rule ids
        self.index: dict[int, KeywordIndex[str]] = {}  # feed -> its rules' conditions in one automaton

    def add(self, rule: CompiledRule, feeds: tuple[int, ...]) -> None:
        """``rule`` triggers on or watches ``feeds``."""
        cond = rule.condition
        for r in feeds:
            if cond is not None and selective(cond):
                self.index.setdefault(r, KeywordIndex()).add(rule.rule_id, cond)
            self.rules.setdefault(r, []).append(rule.rule_id)

    def remove(self, rule_id: str, feeds: tuple[int, ...]) -> None:
        """``rule_id``, added on ``feeds``, is gone."""
        for r in feeds:
            index = self.index.get(r)
            if index is not None and rule_id in index:
                index.remove(rule_id)
                if not len(index):
                    del self.index[r]
            listed = self.rules[r]
            listed.remove(rule_id)
            if not listed:
                del self.rules[r]

    def on(self, resource: int) -> Sequence[str]:
        """The rules that trigger on or watch ``resource``, in installation order."""
        return self.rules.get(resource, ())
