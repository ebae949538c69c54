"""Why a connection failed, when TLS is why: each way a client and a node can disagree,
against real gRPC servers in this process (plaintext, TLS, and TLS requiring client
certificates), through :func:`diagnose` and through the SDK's error."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc

from schedd import TlsHandshakeFailed, Unavailable
from schedd._handshake import Mismatch, diagnose
from schedd._tls import TlsFiles
from schedd.client import AsyncClient, ClientTls
from schedd.dev import free_port


@dataclass
class Servers:
    plaintext: str
    tls: str  # no client certificate asked
    mtls: str  # client certificates required, signed by the cluster's CA


@pytest.fixture
async def servers(pki: Path) -> AsyncIterator[Servers]:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    node = TlsFiles(cert_file=pki / "node.pem", key_file=pki / "node-key.pem")
    mutual = TlsFiles(cert_file=node.cert_file, key_file=node.key_file, ca_file=pki / "ca.pem")
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    server.add_insecure_port(addresses[0])
    server.add_secure_port(addresses[1], node.server_credentials())
    server.add_secure_port(addresses[2], mutual.server_credentials())
    await server.start()
    try:
        yield Servers(*addresses)
    finally:
        await server.stop(0)


@pytest.fixture
def nobody() -> Iterator[str]:
    """An address where nothing listens: a port bound here and never listened on (refused at
    once, and no other process can take it meanwhile)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def _client(pki: Path, *, cert: str | None = None, name: str | None = None) -> ClientTls:
    if cert is None:
        return ClientTls(ca_file=pki / "ca.pem", server_name=name)
    return ClientTls(
        ca_file=pki / "ca.pem",
        cert_file=pki / f"{cert}.pem",
        key_file=pki / f"{cert}-key.pem",
        server_name=name,
    )


async def test_each_mismatch_is_told_apart(
    servers: Servers, pki: Path, foreign: Path, nobody: str
) -> None:
    async def mismatch(address: str, tls: TlsFiles | None) -> Mismatch | None:
        found = await diagnose(address, tls)
        return found.mismatch if found is not None else None

    good = _client(pki, cert="client")
    assert await mismatch(servers.mtls, None) is Mismatch.SPEAKS_TLS
    assert await mismatch(servers.tls, None) is Mismatch.SPEAKS_TLS
    assert await mismatch(servers.plaintext, good) is Mismatch.PLAINTEXT
    assert await mismatch(servers.mtls, _client(foreign, cert="client")) is Mismatch.UNTRUSTED
    assert await mismatch(servers.mtls, _client(pki, name="else.test")) is Mismatch.WRONG_NAME
    assert await mismatch(servers.mtls, _client(pki)) is Mismatch.CERT_REQUIRED
    refused = ClientTls(
        ca_file=pki / "ca.pem",
        cert_file=foreign / "client.pem",
        key_file=foreign / "client-key.pem",
    )
    assert await mismatch(servers.mtls, refused) is Mismatch.CERT_REFUSED
    # Nothing wrong with TLS: none (a working connection, plaintext both ways, nothing there).
    assert await mismatch(servers.mtls, good) is None
    assert await mismatch(servers.tls, _client(pki, name="node.test")) is None
    assert await mismatch(servers.plaintext, None) is None
    assert await mismatch(nobody, good) is None
    details = await diagnose(servers.mtls, _client(foreign, cert="client"))
    assert details is not None and details.detail == "unable to get local issuer certificate"


async def test_the_sdk_raises_tls_handshake_failed(
    servers: Servers, pki: Path, nobody: str
) -> None:
    async with AsyncClient(servers.mtls, timeout_s=3) as client:
        with pytest.raises(TlsHandshakeFailed) as info:
            await client.get_job("j-1")
    err = info.value
    assert (err.endpoint, err.mismatch) == (servers.mtls, "SPEAKS_TLS")
    assert isinstance(err, Unavailable) and not err.transient
    assert str(err) == (
        f"no scheduler node could serve the call: {servers.mtls} (the node speaks TLS and this"
        " client connects in plaintext: connect with TLS (tls=True, the CA file, or a"
        " ClientTls))"
    )
    async with AsyncClient(servers.mtls, timeout_s=3, tls=_client(pki)) as client:
        with pytest.raises(TlsHandshakeFailed, match="requires a client certificate") as info:
            await client.get_job("j-1")
    assert info.value.mismatch == "CERT_REQUIRED"
    # A node that is simply not there stays a plain Unavailable.
    async with AsyncClient(nobody, timeout_s=2, tls=_client(pki)) as client:
        with pytest.raises(Unavailable, match="not reachable") as down:
            await client.get_job("j-1")
    assert not isinstance(down.value, TlsHandshakeFailed)
