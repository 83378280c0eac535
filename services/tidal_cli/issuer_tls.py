"""The credential issuer's serving certificate for `tidal nats-config
--k8s-secrets`: a CA and a certificate for the Service `tidal-credentials`,
made once and kept in the credentials directory, so a re-run writes the
same Secret. The node agents verify the issuer with the CA (`ca.crt`, a
Secret of its own in their namespace: the issuer's key never leaves its
namespace) before they send their ServiceAccount token."""

from __future__ import annotations

from pathlib import Path

from .webhook_tls import WebhookTls, make_webhook_tls, service_names

ISSUER_SERVICE = "tidal-credentials"
ISSUER_SECRET = "tidal-credentials-tls"
CA_SECRET = "tidal-credentials-ca"  # the CA alone, in the node agents' namespace
TLS_DIR = "credentials-issuer-tls"


def issuer_tls(directory: Path, namespace: str = "tidal-system") -> WebhookTls:
    """The issuer's CA, certificate and key kept in `directory`, made (valid
    ten years) when missing."""
    folder = directory / TLS_DIR
    files = [folder / name for name in ("ca.crt", "tls.crt", "tls.key")]
    if all(path.is_file() for path in files):
        ca, cert, key = (path.read_text() for path in files)
        return WebhookTls(ca_pem=ca, cert_pem=cert, key_pem=key)
    tls = make_webhook_tls(service_names(ISSUER_SERVICE, namespace), days=3650, ca_name="tidal-credentials-ca")
    tls.write(folder)
    return tls


def ca_secret(tls: WebhookTls, namespace: str) -> dict:
    """The Secret `tidal-credentials-ca` in `namespace`: the CA's certificate only (`ca.crt`)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": CA_SECRET, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "tidal"}},
            "stringData": {"ca.crt": tls.ca_pem}}
