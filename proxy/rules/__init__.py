"""Notification rules and the trigger evaluator.

Public API:

* the rule language (:mod:`proxy.rules.schemas`): :class:`ProfileSpec`,
  :class:`RuleSpec` and their parts, pydantic v2 models the REST API validates
  requests with;
* conditions on entries (:mod:`proxy.rules.matching`): :class:`Condition`
  (one rule's ``when``; :meth:`Condition.match` says what matched, a
  :class:`Match`) and :class:`KeywordIndex` (all the rules of a feed, one
  Aho–Corasick scan per entry field);
* durations (:mod:`proxy.rules.durations`): :func:`parse_duration`,
  :func:`to_chronons`;
* the evaluator (:mod:`proxy.rules.evaluator`): :class:`TriggerEvaluator`
  turning ticks, probe results and pings into engine operations, and
  :func:`rule_progress` reading a rule's saved state as a :class:`RuleProgress`;
* what it exchanges (:mod:`proxy.rules.ports`): :class:`OpenCei`,
  :class:`RevealEi`, :class:`SealCei`, :func:`apply_ops`, the
  :class:`EntryLike` and :class:`EnginePort` protocols, and the chronon clock
  (:class:`ChrononMapping`, :class:`ChrononGrid`);
* per-feed update models learnt from entry dates, probes and pings, which
  also size ``overwrite`` lives (:mod:`proxy.rules.update_models`): :class:`FeedUpdateModels`,
  :class:`UpdateModelSettings`, :class:`FeedModelEstimate`,
  :class:`DocumentSummary`, :class:`GammaPrior`, :func:`posterior_rate`,
  :class:`UpdateModelStateError` and the chronon helpers
  :func:`seconds_to_chronon`, :func:`chronon_start`.

Nothing in this package does I/O or reads a clock; the service drives it.
"""

from proxy.rules.durations import DurationError, parse_duration, to_chronons
from proxy.rules.evaluator import (
    RuleProgress,
    RuleStateError,
    TriggerEvaluator,
    UnknownFeedError,
    rule_progress,
)
from proxy.rules.matching import Condition, KeywordIndex, Match
from proxy.rules.ports import (
    ChrononGrid,
    ChrononMapping,
    EnginePort,
    EntryLike,
    MatchedEntry,
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
from proxy.rules.update_models import (
    DocumentSummary,
    FeedModelEstimate,
    FeedUpdateModels,
    GammaPrior,
    UpdateModelSettings,
    UpdateModelStateError,
    chronon_start,
    posterior_rate,
    seconds_to_chronon,
)

__all__ = [
    "ChrononGrid",
    "ChrononMapping",
    "Condition",
    "ConditionSpec",
    "DocumentSummary",
    "DurationError",
    "EnginePort",
    "EntryLike",
    "FeedModelEstimate",
    "FeedUpdateModels",
    "GammaPrior",
    "KeywordIndex",
    "Match",
    "MatchedEntry",
    "Op",
    "OpenCei",
    "PeriodSpec",
    "ProfileSpec",
    "QuerySpec",
    "RevealEi",
    "RuleProgress",
    "RuleSpec",
    "RuleStateError",
    "SealCei",
    "TriggerEvaluator",
    "TriggerSpec",
    "UnknownFeedError",
    "UpdateModelSettings",
    "UpdateModelStateError",
    "WatchSpec",
    "apply_ops",
    "chronon_start",
    "error_messages",
    "parse_duration",
    "posterior_rate",
    "rule_progress",
    "seconds_to_chronon",
    "to_chronons",
]
