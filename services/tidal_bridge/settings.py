"""Settings of the bridge (env prefix `TIDAL_BRIDGE_`; shared keys such as
`TIDAL_BUS_URL` and `TIDAL_CLUSTER` unprefixed)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from tidal_runtime.settings import ServiceSettings

from .pods import GPU_RESOURCE


class BridgeSettings(ServiceSettings):
    """Where the API server is, which pods are Tidal's, and how hard to retry."""

    model_config = SettingsConfigDict(env_prefix="TIDAL_BRIDGE_", extra="ignore", populate_by_name=True)
    config_section: ClassVar[str] = "bridge"

    kube_api_url: str | None = Field(None, description="API server URL used as is, without credentials "
                                     "(tests, `kubectl proxy`); else kubeconfig, else in-cluster")
    kubeconfig: str | None = Field(None, description="path of a kubeconfig file")
    kube_context: str | None = Field(None, description="context in the kubeconfig")
    scheduler_name: str = Field("tidal", min_length=1, description="pods with this spec.schedulerName are Tidal's")
    gpu_resource: str = Field(GPU_RESOURCE, min_length=1, description="extended resource counting whole GPUs")
    publish_node_facts: bool = Field(False, description="publish a node-level NodeTopology per Node object; "
                                     "only for clusters without node agents (it would replace their inventory)")
    watch_tenants: bool = Field(True, description="publish Tenant objects as tenant.config and write tenant "
                                "usage and fair-share scores to Tenant / FairShare status (needs the CRDs)")
    status_interval_s: float = Field(5.0, gt=0, description="at most one status write per object this often")
    request_timeout_s: float = Field(10.0, gt=0, description="the longest one API request may take (a watch: "
                                     "to connect, and beyond its timeoutSeconds)")
    watch_timeout_s: int = Field(300, ge=1, description="server-side timeoutSeconds of one watch request")
    backoff_initial_s: float = Field(0.5, gt=0, description="first delay before a failed watch is started "
                                     "again (doubles)")
    backoff_max_s: float = Field(30.0, gt=0, description="the longest delay between watch restarts")
    api_attempts: int = Field(5, ge=1, description="tries of a bind (deliveries of an action) while the API "
                              "server fails transiently, before a failed result is published")
    api_retry_s: float = Field(0.5, gt=0, description="first back-off between those tries (doubles)")
    api_retry_max_s: float = Field(8.0, gt=0, description="the longest back-off between those tries")
    bind_concurrency: int = Field(32, ge=1, le=1024, description="binds in flight at once (each an API round "
                                  "trip, the Binding, and its Scheduled Event); one pod's decisions are bound in "
                                  "their log order")
    gpu_admission_wait_s: float = Field(60.0, gt=0, description="the longest a GPU pod's bind waits for the "
                                        "kubelet to admit the pod of the same node and size bound before it "
                                        "(binds_in_flight.py); then it binds anyway, with a warning")
    bind_attempts: int = Field(3, ge=1, description="binding tries on 409 Conflict")
    bind_retry_s: float = Field(0.2, gt=0, description="first delay before binding again after a 409 "
                                "Conflict (doubles)")
    conflict_attempts: int = Field(5, ge=1, description="read-modify-write tries of a node's taints")
    evict_attempts: int = Field(8, ge=1, description="deliveries of an eviction refused by a "
                                "PodDisruptionBudget (429) before it is reported refused")
    evict_retry_s: float = Field(2.0, gt=0, description="first delay before retrying such an eviction (doubles)")
    evict_retry_max_s: float = Field(60.0, gt=0, description="the longest delay between such retries")
    event_burst: int = Field(25, ge=1, description="FailedScheduling events one pod may cost at once "
                             "(a repeat is a count on one Event object, still a write)")
    event_refill_s: float = Field(300.0, gt=0, description="then one more event per pod every this long")
    max_event_age_s: float = Field(600.0, gt=0, description="node actions older than this are skipped (a new "
                                   "consumer group must not carry out last week's evictions)")

    @model_validator(mode="after")
    def _own_cluster_only(self) -> "BridgeSettings":
        # The bridge acts on one API server: another cluster's decisions must
        # never be carried out here.
        if self.all_clusters or any(c != self.cluster for c in self.clusters):
            raise ValueError(f"the bridge handles only its own cluster ({self.cluster!r}): "
                             "leave clusters/all_clusters unset")
        return self
