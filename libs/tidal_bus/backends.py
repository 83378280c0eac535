"""The bus backends by URL scheme: one registry, from which the accepted
schemes, the error that lists them and the options each backend takes are
all derived. A backend is imported only when a URL names it, so a NATS-only
process never loads the Kafka client (and the other way round)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

from .api import Backend
from .auth import BusAuth, redact_url
from .errors import BusConfigError


def _nats_class() -> type:
    from .nats_backend import NatsBackend

    return NatsBackend


def _kafka_class() -> type:
    from .kafka_backend import KafkaBackend

    return KafkaBackend


def _nats(cls: type, url: str, parts: SplitResult, hosts: str, namespace: str, auth: BusAuth,
          options: dict[str, Any]) -> Backend:
    # one URL per seed server, each with the URL's user:password if it has one
    userinfo = parts.netloc.rpartition("@")[0]
    prefix = f"{parts.scheme}://{userinfo + '@' if userinfo else ''}"
    servers = ",".join(prefix + host.strip() for host in hosts.split(",") if host.strip())
    return cls(servers, namespace, auth=auth, **options)


def _kafka(cls: type, url: str, parts: SplitResult, hosts: str, namespace: str, auth: BusAuth,
           options: dict[str, Any]) -> Backend:
    return cls(hosts, namespace, auth=auth, url=url, **options)


@dataclass(frozen=True)
class BackendKind:
    """How a URL scheme becomes a backend: its class (imported on first use)
    and how the URL's parts become the constructor's arguments."""

    load: Callable[[], type]
    build: Callable[..., Backend]

    def options(self) -> frozenset[str]:
        """The keyword options this backend's constructor takes."""
        parameters = inspect.signature(self.load().__init__).parameters.values()
        return frozenset(p.name for p in parameters if p.kind is p.KEYWORD_ONLY) - {"auth", "url"}


BUS_BACKENDS: dict[str, BackendKind] = {
    "nats": BackendKind(_nats_class, _nats),
    "tls": BackendKind(_nats_class, _nats),  # NATS over TLS
    "kafka": BackendKind(_kafka_class, _kafka),
}


def backend_kind(url: str) -> BackendKind:
    scheme = urlsplit(url).scheme
    if scheme not in BUS_BACKENDS:
        schemes = ", ".join(f"{name}://" for name in BUS_BACKENDS)
        raise BusConfigError(f"bus URL {redact_url(url)!r}: scheme must be one of {schemes}")
    return BUS_BACKENDS[scheme]


def options_for(url: str, **candidates: Any) -> dict[str, Any]:
    """Of `candidates`, the options the URL's backend takes (e.g. NATS's
    failure-detection times mean nothing to Kafka)."""
    taken = backend_kind(url).options()
    return {name: value for name, value in candidates.items() if name in taken}


def backend_from_url(url: str, namespace: str, *, auth: BusAuth | None = None, **options: Any) -> Backend:
    """`nats://[user:password@]h:p[,h2:p2]`, `tls://…` or `kafka://[user:password@]h:p[,h2:p2]`
    -> a backend (not yet connected). Credentials and TLS come from `auth`,
    by default the `TIDAL_BUS_…` environment (see auth.py); errors never
    show the password."""
    parts = urlsplit(url)
    hosts = parts.netloc.split("@")[-1]
    if not hosts:
        raise BusConfigError(f"bus URL {redact_url(url)!r} names no host")
    kind = backend_kind(url)
    return kind.build(kind.load(), url, parts, hosts, namespace, auth if auth is not None else BusAuth.from_env(),
                      options)
