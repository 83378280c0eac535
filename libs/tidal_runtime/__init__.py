"""The service runtime shared by every Tidal service. Its names are imported
on first use, so a CLI command that only reads a file does not load the
service machinery (bus clients, metrics, tracing) to get at a helper here."""

from .exports import lazy_exports

PUBLIC = {
    "InventoryGate": "inventory_gate:InventoryGate",
    "OutputBatches": "output_batches:OutputBatches",
    "Service": "service:Service",
    "ServiceMetrics": "metrics:ServiceMetrics",
    "ServiceSettings": "settings:ServiceSettings",
    "SharedValues": "shared:SharedValues",
    "packed_id": "packed_ids:packed_id",
    "read_as_text": "packed_ids:read_as_text",
    "unpacked_id": "packed_ids:unpacked_id",
    "Subscription": "service:Subscription",
    "collect_oldest_only_when_asked": "collector:collect_oldest_only_when_asked",
    "configure_logging": "logs:configure_logging",
    "pad_heap_top": "heap:pad_heap_top",
    "run_service": "service:run_service",
}
__all__ = sorted(PUBLIC)
__getattr__ = lazy_exports(__name__, PUBLIC)
