"""Online policies, one class each, chosen by name from the registry.

A new policy is one :class:`Policy` subclass and one line in ``_REGISTRY``.
Names are the spec's (``shared/spec/workload-format.md``, "Policy names");
the CLI, the configuration and the API all resolve names here.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.core.policies._base import Candidates, Policy, PoolView, Preemption
from proxy.core.policies._cei import CeiPolicy, MEdf, Mrsf, SEdf
from proxy.core.policies._cover import AdmissionEdf
from proxy.core.policies._simple import RoundRobin, Wic

_P, _NP = Preemption.PREEMPTIVE, Preemption.NON_PREEMPTIVE

_REGISTRY: dict[str, Callable[[], Policy]] = {
    "s-edf-np": lambda: SEdf(_NP),
    "s-edf-p": lambda: SEdf(_P),
    "mrsf-np": lambda: Mrsf(_NP),
    "mrsf-p": lambda: Mrsf(_P),
    "m-edf-np": lambda: MEdf(_NP),
    "m-edf-p": lambda: MEdf(_P),
    "wic": Wic,
    "round-robin": RoundRobin,
    "adm-edf": AdmissionEdf,
}

#: Offline schedulers (``proxy.core.optimum``): valid policy names elsewhere, not online policies.
OFFLINE_NAMES = ("optimal", "lp-bound")

_INSTANCES: dict[str, Policy] = {}


class UnknownPolicyError(ValueError, LookupError):
    """A policy name that the registry does not hold; the message lists the valid ones."""

    def __init__(self, name: str) -> None:
        self.name = name
        valid = ", ".join(policy_names())
        if name in OFFLINE_NAMES:
            msg = (f"policy {name!r} is offline (see proxy.core.optimum), not an online policy; "
                   f"online policies: {valid}")
        else:
            msg = f"unknown policy {name!r}; valid online policies: {valid} (offline: {', '.join(OFFLINE_NAMES)})"
        super().__init__(msg)

    def __str__(self) -> str:
        return str(self.args[0])


def policy_names() -> list[str]:
    """The online policies' names, in the spec's order."""
    return list(_REGISTRY)


def get_policy(name: str) -> Policy:
    """The policy called ``name`` (policies are stateless, so instances are shared)."""
    policy = _INSTANCES.get(name)
    if policy is None:
        factory = _REGISTRY.get(name)
        if factory is None:
            raise UnknownPolicyError(name)
        policy = _INSTANCES[name] = factory()
    return policy


__all__ = [
    "OFFLINE_NAMES",
    "Candidates",
    "CeiPolicy",
    "MEdf",
    "Mrsf",
    "Policy",
    "PoolView",
    "Preemption",
    "RoundRobin",
    "SEdf",
    "UnknownPolicyError",
    "Wic",
    "get_policy",
    "policy_names",
]
