"""Settings: one pydantic-settings class per service.

Shared keys are read from unprefixed-by-service variables (`TIDAL_BUS_URL`,
`TIDAL_CLUSTER`, `TIDAL_NAMESPACE`, `TIDAL_LOG_LEVEL`, and the bus
credentials `TIDAL_BUS_USER`, `TIDAL_BUS_PASSWORD_FILE`, `TIDAL_BUS_CREDS_FILE`,
`TIDAL_BUS_TLS_CA_FILE`… of `tidal_bus.auth.BusAuth`); everything else from
the service's own prefix, e.g. `TIDAL_PLACEMENT_HTTP_PORT`. Values are
validated at start, so a typo fails fast with the variable's name.

The same settings also come from one TidalConfiguration file (its `common`
section and the service's own, see `configuration`), named by
`TIDAL_CONFIG`: environment variables override the file field by field.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from tidal_bus.auth import BusAuth, redact_url
from tidal_bus.backends import options_for
from tidal_bus.subjects import check_namespace

from .configuration import COMMON, ENV_ONLY, TidalConfigSource

DEFAULT_BUS_URL = "nats://127.0.0.1:4222"
DEFAULT_CLUSTER = "default"
"""The cluster id when TIDAL_CLUSTER is not set: what k8s/base/config/configmap.yaml
sets, so the CLI and a service started by hand name the same cluster."""


class ServiceSettings(BaseSettings):
    """What every service needs. Subclass with `env_prefix="TIDAL_<NAME>_"`."""

    model_config = SettingsConfigDict(env_prefix="TIDAL_SERVICE_", extra="ignore", populate_by_name=True)
    config_section: ClassVar[str] = COMMON
    """The section of the TidalConfiguration file these settings read besides `common`."""

    bus_url: str = Field(DEFAULT_BUS_URL, validation_alias=AliasChoices("TIDAL_BUS_URL", "bus_url"),
                         description="the broker: nats://host:port or kafka://host:port, several servers "
                                     "comma-separated (a password in it is never logged)")
    cluster: str = Field(DEFAULT_CLUSTER, validation_alias=AliasChoices("TIDAL_CLUSTER", "cluster"),
                         pattern=r"^[A-Za-z0-9_-]{1,63}$",
                         description="the Kubernetes cluster this instance serves: every subject and event "
                                     "carries it, so clusters can share one bus")
    namespace: str = Field("tidal", validation_alias=AliasChoices("TIDAL_NAMESPACE", "namespace"),
                           description="first token of every bus subject and stream name: installations "
                                       "sharing one broker stay apart")
    log_level: str = Field("INFO", validation_alias=AliasChoices("TIDAL_LOG_LEVEL", "log_level"),
                           description="DEBUG, INFO, WARNING or ERROR")
    http_host: str = Field("0.0.0.0", description="address /healthz, /readyz and /metrics are served on")
    http_port: int = Field(8080, ge=0, le=65535, description="their TCP port (0: any free one)")
    http_fd: int | None = Field(None, ge=0, json_schema_extra=ENV_ONLY,
                                description="a listening socket inherited from the process that "
                                "started this one (`tidal up` keeps it across restarts): served instead of "
                                "binding http_host:http_port, so no other process takes the port in between")
    clusters: list[str] = Field(
        default_factory=list,
        description="clusters whose events this instance handles; empty = its own cluster only",
    )
    all_clusters: bool = Field(False, description="handle events of every cluster on the bus")
    drain_timeout_s: float = Field(20.0, gt=0, description="on stop, how long consumers may take to finish "
                                   "the message in hand and commit before they are cancelled")
    journal_s: float = Field(1.0, gt=0, description="a stage that journals its steps (placement, oversell, "
                             "remediation): how often they are published to stage.journal, what `tidal replay` "
                             "re-runs (also on stop)")
    output_window: int = Field(64, ge=1, description="a stage publishing per event (a score per sample…): events "
                               "handled before their outputs are waited for, acked in order once stored "
                               "(tidal_bus.output_window; 1: one at a time)")
    output_linger_s: float = Field(0.25, ge=0, le=5, description="a stage answering every sample in batches "
                                   "(scoring's node scores, oversell's allocatable): how long a batch waits for "
                                   "more samples' answers before it goes out; sooner once the open batches hold "
                                   "the answers of output_window events (tidal_runtime.output_batches; 0: "
                                   "what one fetch brought)")
    input_linger_s: float = Field(0.25, ge=0, le=5, description="a stage reading every sample (scoring, "
                                  "oversell, remediation on node.metrics; scoring and oversell also on the pod "
                                  "events they follow for their books): once an event is there, how long it "
                                  "waits for more before reading them, in one pull; events trickling in a few "
                                  "at a time then cost one delivery per batch, not one each (0: each as it comes)")
    gc_full_every_s: float = Field(300.0, ge=0, description="the process collects its oldest generation of "
                                   "objects this often, and only then (tidal_runtime.collector); 0: when Python "
                                   "would")
    lag_interval_s: float = Field(5.0, gt=0, description="how often consumer lag is asked of the broker "
                                  "(tidal_consumer_lag on /metrics)")
    bus_ack_wait_s: float = Field(5.0, gt=0, validation_alias=AliasChoices("TIDAL_BUS_ACK_WAIT_S", "bus_ack_wait_s"),
                                  description="NATS: a message handed out and not acknowledged is handed out again "
                                              "after this long (what a crashed member had in hand, or what was lost "
                                              "in flight with a killed server); one still being worked on is kept "
                                              "by an in-progress ack every third of it")
    bus_member_ttl_s: float = Field(6.0, gt=0,
                                    validation_alias=AliasChoices("TIDAL_BUS_MEMBER_TTL_S", "bus_member_ttl_s"),
                                    description="NATS: a group member that stops heartbeating loses its partitions "
                                                "to the others after this long")
    bus_check_s: float = Field(2.0, gt=0, description="how often the broker is asked whether it can take writes "
                               "(a JetStream cluster with quorum); /readyz says not ready while it cannot")
    bus_replicas: int | None = Field(None, ge=1, validation_alias=AliasChoices("TIDAL_BUS_REPLICAS", "bus_replicas"),
                                     description="copies of every stream Tidal creates (NATS stream replicas, "
                                                 "Kafka replication factor); unset: 3 on a cluster of 3 or more "
                                                 "servers or brokers, else 1. An existing stream is never lowered")
    bus_auth: BusAuth = Field(default_factory=BusAuth, validation_alias=AliasChoices("bus_auth"), repr=False,
                              json_schema_extra=ENV_ONLY,
                              description="credentials and TLS of the bus (TIDAL_BUS_USER, …_PASSWORD_FILE, "
                                          "…_CREDS_FILE, …_NKEY_SEED_FILE, …_TLS_CA_FILE; see tidal_bus.auth)")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the environment, then the TidalConfiguration file, then the defaults."""
        return init_settings, env_settings, dotenv_settings, TidalConfigSource(settings_cls), file_secret_settings

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return check_namespace(value)

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        level = value.upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError("log level must be DEBUG, INFO, WARNING or ERROR")
        return level

    def __repr_args__(self):
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "bus_url" else value

    def safe_bus_url(self) -> str:
        """The bus URL as it may be logged or shown: any password hidden."""
        return redact_url(self.bus_url)

    def bus_options(self) -> dict[str, float | int | None]:
        """Backend options from these settings: the NATS failure-detection
        times (Kafka's group session is the broker's business)."""
        return options_for(self.bus_url, ack_wait_s=self.bus_ack_wait_s, member_ttl_s=self.bus_member_ttl_s,
                           replicas=self.bus_replicas, replication_factor=self.bus_replicas)

    def handled_clusters(self) -> frozenset[str] | None:
        """None means every cluster."""
        if self.all_clusters:
            return None
        return frozenset(self.clusters or [self.cluster])
