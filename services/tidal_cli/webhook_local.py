"""The admission webhook on one machine (`tidal up`, `tidal simulate`): a
throw-away CA and serving certificate for 127.0.0.1 in DATA_DIR/webhook-tls,
and the HTTPS socket, held by the stack like the services' HTTP sockets so
the address stays the webhook's across restarts. `configuration()` is the
MutatingWebhookConfiguration that points an API server (the simulator's
stand-in) at it."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from .webhook_tls import WebhookTls, make_webhook_tls, webhook_configuration

PATH = "/mutate/nodes-status"


@dataclass
class LocalWebhook:
    tls: WebhookTls
    folder: Path
    listener: socket.socket

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.listener.getsockname()[1]}{PATH}"

    def env(self) -> dict[str, str]:
        """The webhook's settings for this certificate and socket."""
        return {"TIDAL_WEBHOOK_TLS_CERT_FILE": str((self.folder / "tls.crt").resolve()),
                "TIDAL_WEBHOOK_TLS_KEY_FILE": str((self.folder / "tls.key").resolve()),
                "TIDAL_WEBHOOK_HTTPS_FD": str(self.listener.fileno()), "TIDAL_WEBHOOK_PATH": PATH}

    def configuration(self, failure_policy: str = "Ignore") -> dict:
        return webhook_configuration(self.tls.ca_bundle, url=self.url, failure_policy=failure_policy)


def local_webhook(data_dir: Path) -> LocalWebhook:
    """A new certificate in DATA_DIR/webhook-tls and a listening socket on 127.0.0.1."""
    tls = make_webhook_tls(["localhost"], ["127.0.0.1"], days=30)
    folder = Path(data_dir) / "webhook-tls"
    tls.write(folder)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.set_inheritable(True)
    return LocalWebhook(tls, folder, listener)
