"""Notification rules and the trigger evaluator.

Public API:

* the rule language (:mod:`proxy.rules.schemas`): :class:`ProfileSpec`,
  :class:`RuleSpec` and their parts, pydantic v2 models the REST API validates
  requests with;
* durations (:mod:`proxy.rules.durations`): :func:`parse_duration`,
  :func:`to_chronons`;
* the evaluator (:mod:`proxy.rules.evaluator`): :class:`TriggerEvaluator`
  turning ticks, probe results and pings into engine operations;
* what it exchanges (:mod:`proxy.rules.ports`): :class:`OpenCei`,
  :class:`RevealEi`, :class:`SealCei`, :func:`apply_ops`, the
  :class:`EntryLike` and :class:`EnginePort` protocols, and the chronon clock
  (:class:`ChrononMapping`, :class:`ChrononGrid`);
* the update model behind ``overwrite`` (:mod:`proxy.rules.updates`):
  :class:`UpdateModel`.

Nothing in this package does I/O or reads a clock; the service drives it.
"""

from proxy.rules.durations import DurationError, parse_duration, to_chronons
from proxy.rules.evaluator import RuleStateError, TriggerEvaluator, UnknownFeedError
from proxy.rules.ports import (
    ChrononGrid,
    ChrononMapping,
    EnginePort,
    EntryLike,
    Op,
    OpenCei,
    RevealEi,
    SealCei,
    apply_ops,
)
from proxy.rules.schemas import (
    ConditionSpec,
    PeriodSpec,
    ProfileSpec,
    QuerySpec,
    RuleSpec,
    TriggerSpec,
    WatchSpec,
    error_messages,
)
from proxy.rules.updates import UpdateModel

__all__ = [
    "ChrononGrid",
    "ChrononMapping",
    "ConditionSpec",
    "DurationError",
    "EnginePort",
    "EntryLike",
    "Op",
    "OpenCei",
    "PeriodSpec",
    "ProfileSpec",
    "QuerySpec",
    "RevealEi",
    "RuleSpec",
    "RuleStateError",
    "SealCei",
    "TriggerEvaluator",
    "TriggerSpec",
    "UnknownFeedError",
    "UpdateModel",
    "WatchSpec",
    "apply_ops",
    "error_messages",
    "parse_duration",
    "to_chronons",
]
