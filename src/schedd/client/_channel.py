"""Channel setup: one target over every endpoint, round robin, retries for reads only."""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from schedd._errors import InvalidArgument

SERVICE = "schedd.v1.Scheduler"
#: Methods that only read: safe to retry on UNAVAILABLE.
IDEMPOTENT_METHODS = (
    "GetJob",
    "ListJobs",
    "GetExecution",
    "ListExecutions",
    "ListDeadLetters",
    "GetClusterStatus",
)


def service_config() -> str:
    """The gRPC service config: round robin, and a retry policy for idempotent reads."""
    return json.dumps(
        {
            "loadBalancingConfig": [{"round_robin": {}}],
            "methodConfig": [
                {
                    "name": [{"service": SERVICE, "method": m} for m in IDEMPOTENT_METHODS],
                    "retryPolicy": {
                        "maxAttempts": 4,
                        "initialBackoff": "0.1s",
                        "maxBackoff": "1s",
                        "backoffMultiplier": 2,
                        "retryableStatusCodes": ["UNAVAILABLE"],
                    },
                }
            ],
        }
    )


def channel_options() -> list[tuple[str, str | int]]:
    """Channel arguments: the service config, retries on, keepalive that servers accept."""
    return [
        ("grpc.service_config", service_config()),
        ("grpc.enable_retries", 1),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
    ]


def _split(endpoint: str) -> tuple[str, int]:
    text = endpoint.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise InvalidArgument("endpoints", f"{endpoint!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None


def _resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return []
    return sorted({f"{info[4][0]}:{port}" for info in infos})


def grpc_target(endpoints: str | Sequence[str]) -> str:
    """The channel target for one or several ``HOST:PORT`` endpoints.

    One host name gives ``dns:///host:port``; IP literals give ``ipv4:a:p,b:p`` (or ``ipv6:``);
    several names are resolved once here to IPv4 addresses so that round robin spans them.

    Raises:
        InvalidArgument: An endpoint that is not ``HOST:PORT``, or none at all.
    """
    items = [endpoints] if isinstance(endpoints, str) else list(endpoints)
    parts = [p.strip() for item in items for p in item.split(",") if p.strip()]
    if not parts:
        raise InvalidArgument("endpoints", "at least one HOST:PORT is required")
    pairs = [_split(p) for p in parts]
    versions = {_ip_version(h) for h, _ in pairs}
    if versions == {4}:
        return "ipv4:" + ",".join(f"{h}:{p}" for h, p in pairs)
    if versions == {6}:
        return "ipv6:" + ",".join(f"[{h}]:{p}" for h, p in pairs)
    if len(pairs) == 1:
        host, port = pairs[0]
        return f"dns:///{host}:{port}"
    resolved = [a for h, p in pairs for a in ([f"{h}:{p}"] if _ip_version(h) else _resolve(h, p))]
    if not resolved:
        return "dns:///" + parts[0]
    return "ipv4:" + ",".join(resolved)


@dataclass(frozen=True)
class ChannelSpec:
    """Where and how to connect: the target, channel options and optional TLS credentials."""

    target: str
    options: list[tuple[str, str | int]]
    credentials: grpc.ChannelCredentials | None


def channel_spec(endpoints: str | Sequence[str], tls: bool | str | Path | None) -> ChannelSpec:
    """The channel target and settings; ``tls`` is True (system roots) or a root cert path."""
    creds: grpc.ChannelCredentials | None = None
    if tls is True:
        creds = grpc.ssl_channel_credentials()
    elif tls:
        try:
            roots = Path(tls).read_bytes()
        except OSError as exc:
            raise InvalidArgument("tls", f"cannot read root certificate {tls}: {exc}") from exc
        creds = grpc.ssl_channel_credentials(root_certificates=roots)
    return ChannelSpec(grpc_target(endpoints), channel_options(), creds)
