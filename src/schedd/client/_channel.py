"""Channel setup: one channel per endpoint (failover between them is in ``_failover``)."""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from schedd._errors import InvalidArgument
from schedd._limits import message_size_options
from schedd._tls import TlsConfigError, TlsFiles

SERVICE = "schedd.v1.Scheduler"
#: Methods that only read: safe to send again, on another node (see ``_failover``).
IDEMPOTENT_METHODS = (
    "GetJob",
    "ListJobs",
    "GetExecution",
    "ListExecutions",
    "ListDeadLetters",
    "GetClusterStatus",
    "ListQueues",
    "CancelExecution",  # cancelling twice returns the cancelled execution
)


def service_config() -> str:
    """The gRPC service config of each endpoint's channel: pick_first, and no retries of gRPC's
    own (they would retry the same node; ``_failover`` tries the next one instead)."""
    return json.dumps({"loadBalancingConfig": [{"pick_first": {}}]})


def channel_options() -> list[tuple[str, str | int]]:
    """Channel arguments: the service config, keepalive that servers accept, reconnects
    within a second (gRPC's default backoff grows to two minutes, during which a node that came
    back would still be skipped as down), and explicit message size limits."""
    return [
        *message_size_options(),
        ("grpc.service_config", service_config()),
        ("grpc.enable_retries", 0),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1_000),
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


def split_endpoints(endpoints: str | Sequence[str]) -> list[str]:
    """``"a:1,b:2"`` or ``["a:1", "b:2,c:3"]`` -> ``["a:1", "b:2", "c:3"]``, each checked to be
    ``HOST:PORT`` and duplicates dropped (first kept).

    Raises:
        InvalidArgument: An endpoint that is not ``HOST:PORT``, or none at all.
    """
    items = [endpoints] if isinstance(endpoints, str) else list(endpoints)
    parts = [p.strip() for item in items for p in item.split(",") if p.strip()]
    if not parts:
        raise InvalidArgument("endpoints", "at least one HOST:PORT is required")
    for p in parts:
        _split(p)
    return list(dict.fromkeys(parts))


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


class ClientTls(TlsFiles):
    """TLS to the nodes, as :class:`~schedd.client.Client` and the worker take it.

    Every field is optional; the files are read (once) when the client is made::

        ClientTls(ca_file="ca.pem")                      # verify the nodes against this CA
        ClientTls(ca_file="ca.pem", cert_file="client.pem", key_file="client-key.pem")  # mTLS
        ClientTls(ca_file="ca.pem", server_name="schedd.internal")  # nodes dialled by IP

    Attributes:
        ca_file: The CA certificates (PEM) the nodes' certificates are verified against
            (None: the system's CAs).
        cert_file: The client certificate (PEM), for nodes that require one (started with
            a CA: mutual TLS). With ``key_file``.
        key_file: Its private key (PEM, not encrypted).
        server_name: The name the nodes' certificates must hold, when it is not the host
            dialled.
    """


#: How a client is told to use TLS: True (the system's CAs), a CA file, or a ClientTls.
TlsOption = bool | str | Path | TlsFiles | None


def client_tls(tls: TlsOption) -> TlsFiles | None:
    """The TLS settings ``tls=`` stands for, its files read (None: plaintext).

    Raises:
        InvalidArgument: A file that cannot be used; the field is ``tls`` (a CA path) or
            ``tls.<setting>``.
    """
    if tls is None or tls is False:
        return None
    files = tls if isinstance(tls, TlsFiles) else ClientTls(ca_file=None if tls is True else tls)
    try:
        _ = files.material
    except TlsConfigError as exc:
        if isinstance(tls, TlsFiles):
            names = {f: f"tls.{f}" for f in ("cert_file", "key_file", "ca_file", "server_name")}
        else:
            names = {"ca_file": "tls"}
        raise InvalidArgument(names[exc.field], exc.reason(names)) from exc
    return files


@dataclass(frozen=True)
class ChannelSpec:
    """Where and how to connect: the endpoints and each one's channel target, channel options
    and optional TLS (its settings, for diagnosing a failed handshake, and credentials)."""

    endpoints: list[str]
    targets: list[str]
    options: list[tuple[str, str | int]]
    credentials: grpc.ChannelCredentials | None
    tls: TlsFiles | None = None

    @property
    def target(self) -> str:
        """Every endpoint as one gRPC target (what a single channel over them all would use)."""
        return grpc_target(self.endpoints)


def channel_spec(endpoints: str | Sequence[str], tls: TlsOption) -> ChannelSpec:
    """The channel targets and settings; ``tls`` is True (system roots), a root cert path or
    a :class:`ClientTls` (see :func:`client_tls`)."""
    files = client_tls(tls)
    options = channel_options()
    creds: grpc.ChannelCredentials | None = None
    if files is not None:
        creds = files.channel_credentials()
        options += files.channel_options()
    items = split_endpoints(endpoints)
    return ChannelSpec(items, [grpc_target(e) for e in items], options, creds, files)
