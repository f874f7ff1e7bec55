"""The service layer: the chronon loop, wiring of core, feeds, rules and store, housekeeping.

Public: :class:`ProxyService` (the facade the API calls), :class:`ServiceStatus`,
:class:`~proxy.service.metrics.ServiceMetrics`, :class:`~proxy.service.clock.ChrononClock`.
"""

from proxy.service import health
from proxy.service._profile_changes import ProfileChanged, ProfileChanges
from proxy.service.clock import ChrononClock
from proxy.service.metrics import ServiceMetrics
from proxy.service.service import ProxyService, ServiceStatus, fetcher_settings

__all__ = ["ChrononClock", "ProfileChanged", "ProfileChanges", "ProxyService", "ServiceMetrics",
           "ServiceStatus", "fetcher_settings", "health"]
