"""The service layer: the chronon loop, wiring of core, feeds, rules and store, housekeeping.

Public: :class:`ProxyService` (the facade the API calls), :class:`ServiceStatus`,
:class:`~proxy.service.metrics.ServiceMetrics`, :class:`~proxy.service.clock.ChrononClock`,
and what a rule's dry run answers (:class:`RuleTrial` of :class:`FeedTrial` of
:class:`EntryVerdict`, :meth:`ProxyService.try_rule`).
"""

from proxy.service import health
from proxy.service._dry_run import EntryVerdict, FeedTrial, RuleTrial
from proxy.service._profile_changes import ProfileChanged, ProfileChanges
from proxy.service.clock import ChrononClock
from proxy.service.metrics import ServiceMetrics
from proxy.service.service import ProxyService, ServiceStatus, fetcher_settings

__all__ = ["ChrononClock", "EntryVerdict", "FeedTrial", "ProfileChanged", "ProfileChanges",
           "ProxyService", "RuleTrial", "ServiceMetrics", "ServiceStatus", "fetcher_settings", "health"]
