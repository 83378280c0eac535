"""The service runtime shared by every Tidal service."""

from .logs import configure_logging
from .metrics import ServiceMetrics
from .service import Service, Subscription, run_service
from .settings import ServiceSettings

__all__ = ["Service", "ServiceMetrics", "ServiceSettings", "Subscription", "configure_logging", "run_service"]
