"""Naming of streams, subjects and topics on the brokers.

A key becomes one NATS subject token: the characters NATS reserves ('.',
'*', '>', whitespace) and '%' itself are percent-encoded, everything else
stays readable, so `tidal.node_metrics.prod.3.ip-10-0-0-1%2Eec2%2Einternal`
is still recognisable in `nats sub` output.
"""

from __future__ import annotations

import re

from tidal_schemas.streams import StreamSpec

_RESERVED = re.compile(r"[.*>%\s\x00-\x1f\x7f]")
_ESCAPE = re.compile(r"%([0-9A-F]{2})")
_NAMESPACE = re.compile(r"^[a-z][a-z0-9_-]{0,40}$")


def check_namespace(namespace: str) -> str:
    """Namespaces isolate deployments, tests and replays on one broker."""
    if not _NAMESPACE.match(namespace):
        raise ValueError(
            f"namespace {namespace!r}: use 1-41 lowercase letters, digits, '_' or '-', starting with a letter"
        )
    return namespace


def encode_token(text: str) -> str:
    """Make `text` safe as a single NATS subject token (reversible)."""
    if not text:
        return "%00"
    return _RESERVED.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), text)


def decode_token(token: str) -> str:
    if "%" not in token:  # nothing was escaped: the usual case, on every message read
        return token
    if token == "%00":
        return ""
    return bytes(_decode_bytes(token)).decode()


def _decode_bytes(token: str) -> bytearray:
    out = bytearray()
    i = 0
    while i < len(token):
        match = _ESCAPE.match(token, i)
        if match:
            out.append(int(match.group(1), 16))
            i = match.end()
        else:
            out.extend(token[i].encode())
            i += 1
    return out


def nats_stream_name(namespace: str, spec: StreamSpec) -> str:
    return f"{namespace}_{spec.token}".upper().replace("-", "_")


def nats_subject(namespace: str, spec: StreamSpec, cluster: str, partition: int, key: str,
                 lane: str | None = None) -> str:
    """Where an event goes; one of the stream's side lane (`lane`) gets the
    lane's name as a sixth token, which readers of the main lane filter out."""
    subject = f"{namespace}.{spec.token}.{encode_token(cluster)}.{partition}.{encode_token(key)}"
    return subject if lane is None else f"{subject}.{lane}"


def nats_partition_filter(namespace: str, spec: StreamSpec, partition: int | None, *,
                          main_lane_only: bool = False) -> str:
    """The subjects of a partition (None: of every partition), with the
    stream's side lane unless `main_lane_only`."""
    if partition is None and not main_lane_only:
        return f"{namespace}.{spec.token}.>"  # the whole stream: its subjects
    last = ">" if spec.side_lane is not None and not main_lane_only else "*"  # the key, and the lane after it
    return f"{namespace}.{spec.token}.*.{'*' if partition is None else partition}.{last}"


def subject_parts(subject: str) -> tuple[str, int, str, str | None]:
    """(cluster, partition, key, lane) of a subject `nats_subject` made (lane
    None: the main lane). Namespaces and stream tokens hold no dots."""
    tokens = subject.split(".")
    return (decode_token(tokens[2]), int(tokens[3]), decode_token(tokens[4]),
            tokens[5] if len(tokens) > 5 else None)


def nats_consumer_name(group: str, spec: StreamSpec, partition: int) -> str:
    return f"{encode_durable(group)}_{spec.token}_p{partition}"


def encode_durable(name: str) -> str:
    """Durable consumer names allow only [A-Za-z0-9_-]."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def kafka_topic(namespace: str, spec: StreamSpec) -> str:
    return f"{namespace}.{spec.name}"
