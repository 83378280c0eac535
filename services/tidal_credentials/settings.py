"""Settings of the credential issuer (env prefix TIDAL_CREDENTIALS_; the bus
namespace and cluster as every service reads them: TIDAL_NAMESPACE and
TIDAL_CLUSTER, else the `common` section of the TidalConfiguration file
TIDAL_CONFIG names, so it grants the subjects the agents publish on). Only
constant-size material: the account signing key and the account's public
key, whatever the number of nodes."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from tidal_bus.node_issuer import DEFAULT_AGENT_SERVICE_ACCOUNT, DEFAULT_AUDIENCE
from tidal_bus.nkey import InvalidSeed, public_key
from tidal_runtime.configuration import TidalConfigSource

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_ACCOUNT = re.compile(r"^A[A-Z2-7]{55}$")


def _in_cluster_url() -> str:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    return f"https://{host}:{port}" if host else "https://kubernetes.default.svc"


class CredentialsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TIDAL_CREDENTIALS_", extra="ignore", populate_by_name=True,
                                      hide_input_in_errors=True)

    namespace: str = Field("tidal", validation_alias=AliasChoices("TIDAL_NAMESPACE", "namespace"),
                           description="the bus namespace the node agents' subjects are in")
    cluster: str = Field("default", validation_alias=AliasChoices("TIDAL_CLUSTER", "cluster"),
                         pattern=r"^[A-Za-z0-9_-]{1,63}$", description="the cluster the agents publish for")
    http_host: str = Field("0.0.0.0", description="address the issuer listens on")
    http_port: int = Field(8443, ge=0, le=65535, description="its TCP port (0: any free one)")
    tls_cert_file: Path | None = Field(None, description="serving certificate (HTTPS); unset: plain HTTP")
    tls_key_file: Path | None = Field(None, description="its key")
    signing_key_file: Path = Field(..., description="the account signing key's seed (account-signing.nk)")
    account: str | None = Field(None, description="the account's public key (account.pub, A…)")
    account_file: Path | None = Field(None, description="or a file holding it (the Secret's `account`)")
    audience: str = Field(DEFAULT_AUDIENCE, description="the audience the agents' projected tokens are for")
    agent_service_account: str = Field(DEFAULT_AGENT_SERVICE_ACCOUNT,
                                       description="namespace:name of the node agents' ServiceAccount")
    ttl_s: int = Field(3600, ge=60, le=86400, description="lifetime of an issued user JWT; agents renew at 2/3")
    kube_api_url: str = Field(default_factory=_in_cluster_url, description="the Kubernetes API server")
    kube_token_file: Path = Field(SERVICE_ACCOUNT_DIR / "token", description="the issuer's own token, "
                                  "which may create tokenreviews")
    kube_ca_file: Path | None = Field(SERVICE_ACCOUNT_DIR / "ca.crt", description="the API server's CA")
    review_timeout_s: float = Field(5.0, gt=0, description="how long a TokenReview may take")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, the environment, then the file's `common` section (namespace, cluster)."""
        return init_settings, env_settings, dotenv_settings, TidalConfigSource(settings_cls), file_secret_settings


    @field_validator("agent_service_account")
    @classmethod
    def _agent(cls, value: str) -> str:
        if value.count(":") != 1 or not all(value.split(":")):
            raise ValueError("agent_service_account: give namespace:name")
        return value

    @model_validator(mode="after")
    def _files(self) -> "CredentialsSettings":
        if self.account is None and self.account_file is not None:
            try:
                self.account = self.account_file.read_text().strip()
            except OSError as exc:
                raise ValueError(f"TIDAL_CREDENTIALS_ACCOUNT_FILE: {exc.strerror}") from None
        if not _ACCOUNT.match((self.account or "").strip()):
            raise ValueError("TIDAL_CREDENTIALS_ACCOUNT (or _FILE): not an account public key (56 characters "
                             "starting with A)")
        self.account = (self.account or "").strip()
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("TIDAL_CREDENTIALS_TLS_CERT_FILE and TIDAL_CREDENTIALS_TLS_KEY_FILE go together")
        return self

    def signing_seed(self) -> str:
        """The account signing key, checked: ValueError naming the file (never the seed)."""
        try:
            seed = self.signing_key_file.read_text().strip()
            public_key(seed, "account")
        except (OSError, InvalidSeed) as exc:
            raise ValueError(f"TIDAL_CREDENTIALS_SIGNING_KEY_FILE {self.signing_key_file}: {exc}") from None
        return seed
