"""The pure scheduling core: model, engine (candidate pool), policies, optimum.

Nothing here does I/O, reads a clock or uses global randomness; chronons are
integers and every input arrives as an argument.
"""

from proxy.core.engine import CeiCaptured, CeiMissed, CeiState, EiCaptured, Engine, Event
from proxy.core.model import CEI, EI, Budget, Workload, WorkloadError
from proxy.core.policies import Policy, UnknownPolicyError, get_policy, policy_names

__all__ = [
    "CEI",
    "EI",
    "Budget",
    "CeiCaptured",
    "CeiMissed",
    "CeiState",
    "EiCaptured",
    "Engine",
    "Event",
    "Policy",
    "UnknownPolicyError",
    "Workload",
    "WorkloadError",
    "get_policy",
    "policy_names",
]
