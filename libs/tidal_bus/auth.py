"""Who the bus connection is and how it is protected: credentials and TLS.

Read from the environment (`TIDAL_BUS_…`), with every secret preferably in a
file (`TIDAL_BUS_PASSWORD_FILE`, `TIDAL_BUS_TOKEN_FILE`,
`TIDAL_BUS_CREDS_FILE`, `TIDAL_BUS_NKEY_SEED_FILE`, `TIDAL_BUS_TLS_*_FILE`).
Secrets held in memory are `SecretStr`, so printing the settings shows
`**********`; URLs are only ever shown through `redact_url`.

NATS takes one of: user + password (in the URL or here), a token, a `.creds`
file (user JWT + nkey seed: what `tidal nats-config` and `tidal nats-creds`
issue), or an nkey seed (file or value). With a creds file or a seed, a user
name only names the reply inbox the user may subscribe to (with a creds
file it defaults to the name in its JWT); TLS with a CA file, a client
certificate, or a `tls://` URL. Kafka takes SASL PLAIN / SCRAM-SHA-256 /
SCRAM-SHA-512 (user + password) and TLS, passed through to aiokafka.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

from pydantic import SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import BusConfigError
from .nats_jwt import MAX_CREDS_BYTES, InvalidCreds, parse_creds
from .nkey import MAX_SEED_BYTES, InvalidSeed, user_public_key

SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@,\s]*)@")
_INBOX_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def redact_url(url: str) -> str:
    """`url` with any password (or token) replaced by `***`, for logs and
    messages: `nats://svc:s3cret@h:4222` -> `nats://svc:***@h:4222`;
    `nats://t0ken@h` -> `nats://***@h`. Every URL of a comma list is redacted."""

    def hide(match: re.Match[str]) -> str:
        user, sep, _secret = match.group("userinfo").partition(":")
        return f"{match.group('scheme')}{user}:***@" if sep else f"{match.group('scheme')}***@"

    return _USERINFO.sub(hide, url)


def inbox_prefix_for(user: str) -> str:
    """The reply-subject prefix of a NATS user: `_INBOX_<user>`, one subject
    token. The server config lets each user subscribe to its own prefix only,
    so no service can read the replies meant for another."""
    return "_INBOX_" + _INBOX_UNSAFE.sub("_", user)


def url_credentials(url: str) -> tuple[str | None, SecretStr | None]:
    """(user, password) written in the URL's first host, if any."""
    match = _USERINFO.match(url)
    if not match or not match.group("userinfo"):
        return None, None
    user, sep, secret = match.group("userinfo").partition(":")
    return unquote(user) or None, SecretStr(unquote(secret)) if sep else None


class BusPermissionError(BusConfigError):
    """The broker refused an operation this user is not permitted: retrying
    cannot help, the server's authorization must change."""


class BusAuth(BaseSettings):
    """Credentials and TLS of the bus connection (env prefix `TIDAL_BUS_`)."""

    # hide_input_in_errors: a validation error must never echo a password back.
    model_config = SettingsConfigDict(env_prefix="TIDAL_BUS_", extra="ignore", frozen=True,
                                      hide_input_in_errors=True)

    user: str | None = None
    user_file: Path | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    token: SecretStr | None = None
    token_file: Path | None = None
    creds_file: Path | None = None
    nkey_seed: SecretStr | None = None
    nkey_seed_file: Path | None = None
    tls: bool = False
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_hostname: str | None = None
    sasl_mechanism: SaslMechanism | None = None
    security_protocol: SecurityProtocol | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "BusAuth":
        for value, file, name in ((self.user, self.user_file, "USER"), (self.password, self.password_file, "PASSWORD"),
                                  (self.token, self.token_file, "TOKEN"),
                                  (self.nkey_seed, self.nkey_seed_file, "NKEY_SEED")):
            if value is not None and file is not None:
                raise ValueError(f"give TIDAL_BUS_{name} or TIDAL_BUS_{name}_FILE, not both")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("a TLS client certificate needs both TIDAL_BUS_TLS_CERT_FILE and TIDAL_BUS_TLS_KEY_FILE")
        for field in ("user_file", "password_file", "token_file", "creds_file", "nkey_seed_file", "tls_ca_file",
                      "tls_cert_file", "tls_key_file"):
            path = getattr(self, field)
            if path is not None and not path.is_file():
                raise ValueError(f"TIDAL_BUS_{field.upper()} {str(path)!r} is not a readable file")
        return self

    @classmethod
    def from_env(cls, **overrides: Any) -> "BusAuth":
        """The settings from the environment (plus `overrides`); a bad value is
        a BusConfigError naming the variable, never showing a secret."""
        try:
            return cls(**overrides)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "bus auth"
            raise BusConfigError(f"bus credentials ({where}): {first['msg']}") from None

    # -- secrets, read when connecting -----------------------------------------
    def password_secret(self, url: str = "") -> SecretStr | None:
        """The password: from the settings, else its file, else the URL."""
        if self.password is not None:
            return self.password
        if self.password_file is not None:
            return SecretStr(_read_secret(self.password_file))
        return url_credentials(url)[1]

    def token_secret(self) -> SecretStr | None:
        if self.token is not None:
            return self.token
        return SecretStr(_read_secret(self.token_file)) if self.token_file is not None else None

    def nkey_seed_secret(self) -> SecretStr | None:
        """The nkey seed, checked: a BusConfigError naming the setting (never
        showing the seed) when it is not a user seed."""
        if self.nkey_seed is None and self.nkey_seed_file is None:
            return None
        name = "TIDAL_BUS_NKEY_SEED" if self.nkey_seed is not None else "TIDAL_BUS_NKEY_SEED_FILE"
        seed = self.nkey_seed if self.nkey_seed is not None else \
            SecretStr(_read_secret(self.nkey_seed_file, MAX_SEED_BYTES))
        try:
            user_public_key(seed.get_secret_value())
        except InvalidSeed as exc:
            raise BusConfigError(f"{name}: {exc}") from None
        return seed

    def creds_user(self) -> str | None:
        """The user name in the creds file's JWT, the file checked first: a
        BusConfigError naming TIDAL_BUS_CREDS_FILE (never showing the seed)
        when it is not a usable `.creds` file. None without a creds file."""
        if self.creds_file is None:
            return None
        try:
            return parse_creds(_read_secret(self.creds_file, MAX_CREDS_BYTES)).name or None
        except InvalidCreds as exc:
            raise BusConfigError(f"TIDAL_BUS_CREDS_FILE {str(self.creds_file)!r}: {exc}") from None

    def user_name(self, url: str = "") -> str | None:
        """The user: from the settings, else its file, else the URL, else
        the name in the creds file's JWT."""
        return self._given_user(url) or self.creds_user()

    def _given_user(self, url: str) -> str | None:
        if self.user_file is not None:
            return _read_secret(self.user_file)
        return self.user or url_credentials(url)[0]

    def uses_tls(self, url: str = "") -> bool:
        return self.tls or self.tls_ca_file is not None or self.tls_cert_file is not None \
            or url.startswith("tls://")

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying client context: the CA file (or the system's CAs) and
        the client certificate when one is given."""
        try:
            context = ssl.create_default_context(cafile=str(self.tls_ca_file) if self.tls_ca_file else None)
            if self.tls_cert_file is not None and self.tls_key_file is not None:
                context.load_cert_chain(str(self.tls_cert_file), str(self.tls_key_file))
        except (OSError, ssl.SSLError) as exc:
            raise BusConfigError(f"bus TLS files unusable: {exc}") from None
        return context

    # -- per broker ------------------------------------------------------------
    def nats_options(self, url: str) -> dict[str, Any]:
        """Keyword arguments for `nats.connect` (servers aside)."""
        if self.sasl_mechanism or self.security_protocol:
            raise BusConfigError("TIDAL_BUS_SASL_MECHANISM / TIDAL_BUS_SECURITY_PROTOCOL are Kafka settings; "
                                 "NATS takes a user, token, creds file or nkey seed")
        user, password, token = self._given_user(url), self.password_secret(url), self.token_secret()
        seed, creds_user = self.nkey_seed_secret(), self.creds_user()
        if user and password is None and not (self.user or self.user_file) and token is None:
            user, token = None, SecretStr(user)  # `nats://TOKEN@host`: a lone userinfo is a token in NATS
        # with a seed or a creds file, the key is the identity and a user only names the inbox
        keyed = seed is not None or self.creds_file is not None
        logs_in = password is not None or (user and not keyed)
        methods = [name for name, given in (("user/password", logs_in), ("token", token),
                                            ("creds file", self.creds_file), ("nkey seed", seed))
                   if given]
        if len(methods) > 1:
            raise BusConfigError(f"NATS authentication: choose one of {' and '.join(methods)}")
        if password is not None and not user:
            raise BusConfigError("NATS authentication: a password needs a user (TIDAL_BUS_USER or user@ in the URL)")
        options: dict[str, Any] = {}
        user = user or creds_user
        if user:
            options["inbox_prefix"] = inbox_prefix_for(user)
            if not keyed:
                options["user"] = user
            if password is not None:
                options["password"] = password.get_secret_value()
        if token is not None:
            options["token"] = token.get_secret_value()
        if self.creds_file is not None:
            options["user_credentials"] = str(self.creds_file)
        if self.nkey_seed is not None:
            options["nkeys_seed_str"] = self.nkey_seed.get_secret_value()
        elif self.nkey_seed_file is not None:
            options["nkeys_seed"] = str(self.nkey_seed_file)
        if self.uses_tls(url):
            options["tls"] = self.ssl_context()
            if self.tls_hostname:
                options["tls_hostname"] = self.tls_hostname
        return options

    def kafka_options(self, url: str) -> dict[str, Any]:
        """Keyword arguments for aiokafka's producer, consumer and admin client."""
        for name, given in (("TIDAL_BUS_TOKEN", self.token_secret()), ("TIDAL_BUS_CREDS_FILE", self.creds_file),
                            ("TIDAL_BUS_NKEY_SEED", self.nkey_seed), ("TIDAL_BUS_NKEY_SEED_FILE", self.nkey_seed_file)):
            if given is not None:
                raise BusConfigError(f"{name} is a NATS setting; Kafka takes SASL user/password")
        user, password = self.user_name(url), self.password_secret(url)
        sasl = bool(user or password or self.sasl_mechanism)
        if sasl and not (user and password is not None and self.sasl_mechanism):
            raise BusConfigError("Kafka SASL needs TIDAL_BUS_USER, a password (TIDAL_BUS_PASSWORD_FILE) and "
                                 "TIDAL_BUS_SASL_MECHANISM (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) together")
        tls = self.uses_tls(url)
        protocol = self.security_protocol or {(False, False): "PLAINTEXT", (False, True): "SSL",
                                              (True, False): "SASL_PLAINTEXT", (True, True): "SASL_SSL"}[(sasl, tls)]
        if protocol.startswith("SASL") != sasl:
            problem = "does not use the SASL credentials given" if sasl else "needs SASL credentials"
            raise BusConfigError(f"TIDAL_BUS_SECURITY_PROTOCOL={protocol} {problem}")
        options: dict[str, Any] = {"security_protocol": protocol}
        if protocol.endswith("SSL"):
            options["ssl_context"] = self.ssl_context()
        elif tls:
            raise BusConfigError(f"TLS files are set but TIDAL_BUS_SECURITY_PROTOCOL={protocol} does not use TLS")
        if sasl:
            assert password is not None
            options.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=user,
                           sasl_plain_password=password.get_secret_value())
        return options


def _read_secret(path: Path, limit: int | None = None) -> str:
    """A secret file's content without the trailing newline editors add
    (at most `limit` bytes read, when given)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(limit if limit is not None else -1).rstrip("\r\n")
    except OSError as exc:
        raise BusConfigError(f"cannot read secret file {path}: {exc.strerror}") from None
