"""TLS to etcd against a real etcd with ``--client-cert-auth``: certificates made with the
openssl binary, the members' certificate holding DNS names only (no IP address).

The client connects to resolved IPv4 addresses, so with several endpoints it needs the name to
verify (``server_name`` / ``--etcd-server-name``); with one endpoint the endpoint's own host
name is used. Bad TLS flags are refused before anything starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from schedd._errors import Unavailable
from schedd.dev import free_port
from schedd.store import EtcdConfig, EtcdKV

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

SCHEDD = [sys.executable, "-m", "schedd.cli.schedd_main"]


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_pki(d: Path) -> Pki:
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=schedd-test-ca", cwd=d)  # fmt: skip
    (d / "server.ext").write_text("subjectAltName=DNS:etcd.test,DNS:localhost\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name in ("server", "client"):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                 "-extfile", f"{name}.ext", cwd=d)  # fmt: skip
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")


@dataclass
class TlsEtcd:
    port: int
    pki: Pki

    def config(self, *endpoints: str, **kw: object) -> EtcdConfig:
        return EtcdConfig(
            endpoints=endpoints,
            ca_file=str(self.pki.ca),
            cert_file=str(self.pki.client_cert),
            key_file=str(self.pki.client_key),
            timeout_s=3.0,
            **kw,  # type: ignore[arg-type]
        )


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsEtcd]:
    root = tmp_path_factory.mktemp("etcd-tls")
    pki = _make_pki(root)
    port, peer = free_port(), free_port()
    proc = subprocess.Popen(
        ["etcd", "--name", "tls0", "--data-dir", str(root / "data"),
         "--listen-client-urls", f"https://127.0.0.1:{port}",
         "--advertise-client-urls", f"https://127.0.0.1:{port}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"tls0=http://127.0.0.1:{peer}",
         "--cert-file", str(pki.server_cert), "--key-file", str(pki.server_key),
         "--client-cert-auth", "--trusted-ca-file", str(pki.ca)],
        stdout=subprocess.DEVNULL, stderr=open(root / "etcd.log", "wb"),  # noqa: SIM115
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while b"ready to serve client requests" not in (root / "etcd.log").read_bytes():
            assert proc.poll() is None, (root / "etcd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "etcd with TLS did not start"
            time.sleep(0.05)
        yield TlsEtcd(port, pki)
    finally:
        proc.kill()
        proc.wait()


async def _round_trip(config: EtcdConfig) -> bytes | None:
    kv = await EtcdKV.connect(config)
    try:
        await kv.put(b"/tls/k", b"v")
        got = await kv.get(b"/tls/k")
        return got.value if got else None
    finally:
        await kv.close()


async def test_several_endpoints_verify_against_the_server_name(tls_etcd: TlsEtcd) -> None:
    p = tls_etcd.port
    both = (f"127.0.0.1:{p}", f"localhost:{p}")
    assert await _round_trip(tls_etcd.config(*both, server_name="etcd.test")) == b"v"
    # Without the name the client verifies the member's certificate against 127.0.0.1,
    # which it does not hold: refused, as an etcd that is not reachable.
    with pytest.raises(Unavailable):
        await _round_trip(tls_etcd.config(*both))


async def test_one_endpoint_by_name_verifies_against_that_name(tls_etcd: TlsEtcd) -> None:
    assert await _round_trip(tls_etcd.config(f"localhost:{tls_etcd.port}")) == b"v"


def test_tls_settings_are_checked_together() -> None:
    with pytest.raises(ValueError, match="cert_file needs key_file"):
        EtcdConfig(ca_file="ca.pem", cert_file="c.pem")
    with pytest.raises(ValueError, match="server_name needs ca_file"):
        EtcdConfig(server_name="etcd.test")
    assert EtcdConfig(endpoints=("a:1", "b:1"), ca_file="ca").tls_name() is None
    assert EtcdConfig(endpoints=("etcd:1", "etcd:2"), ca_file="ca").tls_name() == "etcd"
    assert EtcdConfig(endpoints=("10.0.0.1:1",), ca_file="ca").tls_name() is None


def test_a_node_with_a_client_cert_and_no_key_is_refused(tls_etcd: TlsEtcd) -> None:
    res = subprocess.run(
        [*SCHEDD, "node", "--etcd", f"localhost:{tls_etcd.port}",
         "--etcd-ca", str(tls_etcd.pki.ca), "--etcd-cert", str(tls_etcd.pki.client_cert)],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 2
    assert "--etcd-cert needs --etcd-key" in res.stderr and "Traceback" not in res.stderr


def test_a_node_runs_over_tls_with_several_endpoints(tls_etcd: TlsEtcd, tmp_path: Path) -> None:
    p, pki = tls_etcd.port, tls_etcd.pki
    env = {**os.environ, "SCHEDD_ETCD_SERVER_NAME": "etcd.test"}
    log = tmp_path / "node.log"
    with open(log, "wb") as out:
        node = subprocess.Popen(
            [*SCHEDD, "node", "--etcd", f"127.0.0.1:{p},localhost:{p}",
             "--listen", f"127.0.0.1:{free_port()}", "--node-id", "tls-node",
             "--data-dir", str(tmp_path / "data"), "--partitions", "4",
             "--etcd-ca", str(pki.ca), "--etcd-cert", str(pki.client_cert),
             "--etcd-key", str(pki.client_key)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "node tls-node claimed" not in log.read_text():
            assert node.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
    finally:
        node.terminate()
        assert node.wait(timeout=30) == 0, log.read_text()[-3000:]
