"""`tidal webhook-cert`: a CA and the admission webhook's serving
certificate, as the Secret the Deployment mounts (`tidal-webhook-tls`) and
the MutatingWebhookConfiguration with that CA as its caBundle, for
clusters without cert-manager (k8s/webhook/cert-manager.yaml otherwise):

    tidal webhook-cert --namespace tidal-system > webhook.yaml && kubectl apply -f webhook.yaml

The caBundle is also printed on stderr. `--tls-dir` writes tls.crt,
tls.key and ca.crt for a webhook run outside Kubernetes (`--ip`,
`--url`). Running it again makes a new CA: apply both documents together.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

import yaml

from .errors import CliError
from .options import number


def add(subparsers) -> None:
    p = subparsers.add_parser("webhook-cert", help="a CA and the admission webhook's serving certificate: the "
                              "Secret and the MutatingWebhookConfiguration (caBundle filled) as YAML",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--namespace", default="tidal-system", help="where the webhook's Service runs")
    p.add_argument("--service", default="tidal-webhook", help="the webhook's Service (names in the certificate)")
    p.add_argument("--secret", default="tidal-webhook-tls", help="the Secret the Deployment mounts")
    p.add_argument("--dns", action="append", default=[], metavar="NAME", help="another DNS name to certify")
    p.add_argument("--ip", action="append", default=[], metavar="ADDRESS", help="an IP address to certify")
    p.add_argument("--url", help="register the webhook at this https URL instead of its Service")
    p.add_argument("--days", type=number(1, 3650, integer=True), default=365, help="validity of the CA and the certificate")
    p.add_argument("--tls-dir", type=Path, help="also write tls.crt, tls.key and ca.crt here")
    p.add_argument("--out", default="-", help="file for the YAML (default: stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tidal_webhook import WebhookSettings

    from .webhook_tls import make_webhook_tls, secret_manifest, service_names, webhook_configuration

    for address in args.ip:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise CliError(f"--ip: {address!r} is not an IP address") from None
    if args.url and not args.url.startswith("https://"):
        raise CliError(f"--url: {args.url!r}: the API server calls webhooks over https only")
    tls = make_webhook_tls([*service_names(args.service, args.namespace), *args.dns], args.ip, days=args.days)
    path = WebhookSettings.model_fields["path"].default
    documents = [secret_manifest(tls, args.secret, args.namespace),
                 webhook_configuration(tls.ca_bundle, service=args.service, namespace=args.namespace, path=path,
                                       url=args.url)]
    text = yaml.safe_dump_all(documents, sort_keys=False)
    if args.tls_dir is not None:
        tls.write(args.tls_dir)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
    print(f"caBundle: {tls.ca_bundle}", file=sys.stderr)
    return 0
