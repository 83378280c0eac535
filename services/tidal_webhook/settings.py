"""Settings of the admission webhook (env prefix TIDAL_WEBHOOK_)."""

from __future__ import annotations

from typing import ClassVar

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from tidal_runtime import ServiceSettings
from tidal_runtime.configuration import ENV_ONLY


class WebhookSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TIDAL_WEBHOOK_", extra="ignore", populate_by_name=True)
    config_section: ClassVar[str] = "webhook"

    https_host: str = Field("0.0.0.0", description="address the AdmissionReview endpoint is served on")
    https_port: int = Field(8443, ge=0, le=65535, description="the AdmissionReview endpoint (TLS); /healthz "
                            "/readyz /metrics stay on http_port")
    https_fd: int | None = Field(None, ge=0, json_schema_extra=ENV_ONLY, description="a listening socket inherited from the process that "
                                 "started this one (`tidal up` keeps it across restarts), served instead of "
                                 "binding https_host:https_port")
    tls_cert_file: Path | None = Field(None, description="PEM serving certificate (chain), e.g. the tls.crt of "
                                       "the Secret cert-manager or `tidal webhook-cert` made")
    tls_key_file: Path | None = Field(None, description="its PEM private key (tls.key)")
    tls_reload_s: float = Field(60.0, gt=0, description="how often the files are checked for a renewed "
                                "certificate (cert-manager rotates the Secret in place)")
    path: str = Field("/mutate/nodes-status", pattern=r"^/[A-Za-z0-9/_.-]*$", description="URL path of the "
                      "AdmissionReview endpoint (the MutatingWebhookConfiguration's service path)")
    max_factor: float = Field(1.5, ge=1.0, description="the policy's cap: allocatable written is at most the "
                              "kubelet's × this (keep it with TIDAL_OVERSELL_MAX_FACTOR / _BOUNDED_W)")
    max_age_s: float = Field(300.0, gt=0, description="an oversold figure older than this is not written")
    kubelet_only: bool = Field(True, description="patch only the node's own kubelet's status updates "
                               "(system:node:<name>); false: every writer's")

    @model_validator(mode="after")
    def _both_tls_files(self) -> "WebhookSettings":
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        return self

    def require_tls(self) -> tuple[Path, Path]:
        """The certificate and key files; ValueError when they are not set
        (an admission webhook is called over HTTPS only)."""
        if self.tls_cert_file is None or self.tls_key_file is None:
            raise ValueError("TIDAL_WEBHOOK_TLS_CERT_FILE and TIDAL_WEBHOOK_TLS_KEY_FILE are required: the API "
                             "server calls webhooks over HTTPS only (`tidal webhook-cert` makes a pair)")
        return self.tls_cert_file, self.tls_key_file
