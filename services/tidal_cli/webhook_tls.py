"""A certificate authority and the webhook's serving certificate, made
here (`cryptography`): for clusters without cert-manager, for `tidal up` /
`tidal simulate`, and for tests.

The API server verifies the webhook against the MutatingWebhookConfiguration's
`caBundle` (the CA, base64 PEM) and the host it calls: the serving
certificate names the Service's DNS names (`<svc>`, `<svc>.<ns>`,
`<svc>.<ns>.svc`, `<svc>.<ns>.svc.cluster.local`) and any IP addresses
asked (127.0.0.1 for a local run). ECDSA P-256 keys, SHA-256.
"""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tidal_clock import now_utc


@dataclass(frozen=True)
class WebhookTls:
    """PEM texts: the CA's certificate, the serving certificate and its key."""

    ca_pem: str
    cert_pem: str
    key_pem: str

    @property
    def ca_bundle(self) -> str:
        """The CA as a MutatingWebhookConfiguration's `caBundle` (base64 of the PEM)."""
        return base64.b64encode(self.ca_pem.encode()).decode()

    def write(self, folder: Path) -> tuple[Path, Path, Path]:
        """tls.crt, tls.key (mode 600) and ca.crt in `folder`; their paths."""
        folder.mkdir(parents=True, exist_ok=True)
        cert, key, ca = folder / "tls.crt", folder / "tls.key", folder / "ca.crt"
        cert.write_text(self.cert_pem)
        key.touch(mode=0o600)
        key.write_text(self.key_pem)
        ca.write_text(self.ca_pem)
        return cert, key, ca


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names the API server may call a Service by."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def make_webhook_tls(dns_names: list[str], ip_addresses: list[str] = (), *, days: int = 365,
                     ca_name: str = "tidal-webhook-ca") -> WebhookTls:
    """A new CA and a serving certificate it signs for `dns_names` and `ip_addresses`, valid `days`."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    now = now_utc() - timedelta(minutes=5)  # clocks a little behind still accept it
    until = now + timedelta(days=days)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder().subject_name(ca_subject).issuer_name(ca_subject)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))
    names = [x509.DNSName(n) for n in dns_names] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    common = dns_names[0] if dns_names else str(ip_addresses[0])
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])).issuer_name(ca_subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return WebhookTls(ca.public_bytes(serialization.Encoding.PEM).decode(),
                      cert.public_bytes(serialization.Encoding.PEM).decode(), _pem(key))


def secret_manifest(tls: WebhookTls, name: str, namespace: str) -> dict:
    """A `kubernetes.io/tls` Secret holding the pair, and the CA as `ca.crt`."""
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "tidal"}},
            "data": {"tls.crt": b64(tls.cert_pem), "tls.key": b64(tls.key_pem), "ca.crt": b64(tls.ca_pem)}}


WEBHOOK_NAME = "node-allocatable.tidal.dev"


def webhook_configuration(ca_bundle: str | None, *, service: str = "tidal-webhook", namespace: str = "tidal-system",
                          path: str = "/mutate/nodes-status", url: str | None = None, name: str = "tidal-webhook",
                          failure_policy: str = "Ignore", timeout_s: int = 2) -> dict:
    """The MutatingWebhookConfiguration registering the webhook on UPDATE of
    nodes/status (k8s/webhook/mutatingwebhookconfiguration.yaml): called by
    its Service, or at `url` (a webhook outside the cluster, the stand-in
    API server's), trusting `ca_bundle`."""
    client: dict = {"url": url} if url else {"service": {"namespace": namespace, "name": service, "path": path,
                                                          "port": 443}}
    if ca_bundle:
        client["caBundle"] = ca_bundle
    labels = {"app.kubernetes.io/name": service, "app.kubernetes.io/component": "webhook",
              "app.kubernetes.io/part-of": "tidal"}
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name, "labels": labels},
            "webhooks": [{"name": WEBHOOK_NAME, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "failurePolicy": failure_policy, "timeoutSeconds": timeout_s, "matchPolicy": "Equivalent",
                          "reinvocationPolicy": "Never", "clientConfig": client,
                          "rules": [{"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                     "resources": ["nodes/status"], "scope": "Cluster"}]}]}
