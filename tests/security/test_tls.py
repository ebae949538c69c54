"""TLS everywhere, as an operator runs it: two real ``schedd node`` processes serving mutual
TLS (certificates from the dev CA), a real worker with its client certificate, schedctl as a
process and the SDK. A job made through schedctl runs on the worker; every client that gets
TLS wrong is refused with one line saying what to change; a worker whose certificate another
CA signed is refused at every attempt and never gets work; peers answer each other over
mutual TLS; the dashboard and the metrics endpoint answer over HTTPS."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cluster.procs import SCHEDCTL, SCHEDD, Proc, wait_for

from schedd import TlsHandshakeFailed
from schedd._tls import TlsFiles
from schedd.client import Client, ClientTls
from schedd.dev import EtcdProcess, free_port

pytestmark = pytest.mark.timeout(120)


@dataclass
class TlsCluster:
    """Nodes n0 and n1 with mutual TLS (n0 with the dashboard and metrics), worker w-good
    with the cluster's worker certificate, worker w-foreign with another CA's."""

    root: Path
    pki: Path
    foreign: Path
    addresses: list[str]
    http_port: int
    metrics_port: int
    procs: dict[str, Proc] = field(default_factory=dict)

    def ctl(
        self, *args: str, tls: tuple[str, ...] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """schedctl against n0; ``tls`` its TLS flags (default: the CA and client cert)."""
        if tls is None:
            tls = self.client_flags()
        return subprocess.run(
            [*SCHEDCTL, "--endpoints", self.addresses[0], "--timeout", "5", *tls, *args],
            capture_output=True, text=True, timeout=30, check=False, env=_env(),
        )  # fmt: skip

    def client_flags(self, pki: Path | None = None, ca: Path | None = None) -> tuple[str, ...]:
        d = pki or self.pki
        ca_file = ca or self.pki / "ca.pem"
        return ("--cacert", str(ca_file), "--cert", str(d / "client.pem"),
                "--key", str(d / "client-key.pem"))  # fmt: skip

    def client(self, **overrides: Any) -> Client:
        files = {
            "ca_file": self.pki / "ca.pem",
            "cert_file": self.pki / "client.pem",
            "key_file": self.pki / "client-key.pem",
            **overrides,
        }
        return Client(self.addresses[0], timeout_s=10, tls=ClientTls(**files))

    def logs(self) -> str:
        return "\n".join(f"----- {n}\n{p.tail(40)}" for n, p in self.procs.items())


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDD_", "SCHEDCTL_"))}
    return {**env, "SCHEDD_LOG_LEVEL": "info"}


def _node(c: TlsCluster, name: str, address: str, etcd: str, prefix: str, *extra: str) -> Proc:
    argv = [
        *SCHEDD, "node", "--etcd", etcd, "--listen", address, "--node-id", name,
        "--data-dir", str(c.root / name), "--partitions", "4", "--prefix", prefix,
        "--tls-cert-file", str(c.pki / "node.pem"), "--tls-key-file", str(c.pki / "node-key.pem"),
        "--tls-ca-file", str(c.pki / "ca.pem"), *extra,
    ]  # fmt: skip
    return Proc(name, argv, _env(), c.root / "logs" / f"{name}.log")


def _worker(c: TlsCluster, name: str, certs: Path) -> Proc:
    argv = [
        *SCHEDD, "worker", "--connect", c.addresses[0], "--worker-id", name,
        "--data-dir", str(c.root / name), "--import", "schedd.dev.demo_handlers",
        "--tls-ca-file", str(c.pki / "ca.pem"), "--tls-cert-file", str(certs / "worker.pem"),
        "--tls-key-file", str(certs / "worker-key.pem"),
    ]  # fmt: skip
    return Proc(name, argv, _env(), c.root / "logs" / f"{name}.log")


@pytest.fixture(scope="module")
def tls_cluster(
    etcd_server: EtcdProcess,
    pki: Path,
    foreign: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TlsCluster]:
    root = tmp_path_factory.mktemp("tls-cluster")
    c = TlsCluster(
        root, pki, foreign, [f"127.0.0.1:{free_port()}" for _ in range(2)], free_port(),
        free_port(),
    )  # fmt: skip
    prefix = f"/schedd-tls/{uuid.uuid4().hex[:10]}/"
    web = ("--http-listen", f"127.0.0.1:{c.http_port}",
           "--metrics-listen", f"127.0.0.1:{c.metrics_port}")  # fmt: skip
    c.procs["n0"] = _node(c, "n0", c.addresses[0], etcd_server.endpoint, prefix, *web)
    c.procs["n1"] = _node(c, "n1", c.addresses[1], etcd_server.endpoint, prefix)
    c.procs["w-good"] = _worker(c, "w-good", pki)
    c.procs["w-foreign"] = _worker(c, "w-foreign", foreign)
    for proc in c.procs.values():
        proc.start()
    client = c.client()
    try:

        def ready(status: Any) -> bool:
            for name, proc in c.procs.items():
                assert proc.alive, f"{name} exited:\n{c.logs()}"
            workers = {w.worker_id: set(w.node_ids) for w in status.workers}
            return (
                len(status.nodes) == 2
                and all(p.owner for p in status.partitions)
                and workers.get("w-good") == {"n0", "n1"}
            )

        wait_for(client.cluster_status, ready, timeout=45, what="the TLS cluster")
        yield c
    finally:
        client.close()
        for proc in c.procs.values():
            if proc.alive:
                proc.signal(15)
        for proc in c.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.signal(9)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_a_job_made_with_schedctl_runs_on_the_worker(tls_cluster: TlsCluster) -> None:
    c = tls_cluster
    made = c.ctl("job", "create", "tls-hello", "--schedule", "@every 1s", "--handler", "echo",
                 "--payload", '{"msg": "over TLS"}', "-o", "json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    job_id = json.loads(made.stdout)["id"]

    def runs() -> dict[str, Any]:
        listed = c.ctl("run", "list", "--job", job_id, "-o", "json")
        assert listed.returncode == 0, listed.stderr
        return dict(json.loads(listed.stdout))

    # The run list is cluster-wide: n0 asks n1 for its part over mutual TLS.
    done = wait_for(runs, lambda d: any(r["state"] == "SUCCEEDED" for r in d["executions"]),
                    timeout=20, what="a run of the job")  # fmt: skip
    assert done["missing_nodes"] == []
    assert {r["worker_id"] for r in done["executions"] if r["state"] == "SUCCEEDED"} == {"w-good"}
    assert c.ctl("job", "delete", job_id).returncode == 0


#: What schedctl says (after "schedctl: error: ") for each way of getting TLS wrong.
WRONG_TLS = {
    "no TLS": "the node at {ep} speaks TLS: pass --cacert FILE (the CA that signed the nodes'"
    " certificates; and --cert, --key when they require client certificates)",
    "no client certificate": "the node at {ep} requires a client certificate: pass --cert FILE"
    " and --key FILE",
    "another CA's client certificate": "the node at {ep} refused the client certificate (not"
    " signed by a CA it trusts, or expired): check --cert",
    "another CA trusted": "the node at {ep}: certificate not trusted (unable to get local issuer"
    " certificate): --cacert must be the CA that signed the nodes' certificates",
}


@pytest.mark.parametrize("case", list(WRONG_TLS))
def test_schedctl_getting_tls_wrong_is_one_line(tls_cluster: TlsCluster, case: str) -> None:
    c = tls_cluster
    flags: dict[str, tuple[str, ...]] = {
        "no TLS": (),
        "no client certificate": ("--cacert", str(c.pki / "ca.pem")),
        "another CA's client certificate": c.client_flags(pki=c.foreign),
        "another CA trusted": c.client_flags(ca=c.foreign / "ca.pem"),
    }
    result = c.ctl("job", "list", tls=flags[case])
    assert result.returncode == 5, result.stderr
    assert _one_line(result) == "schedctl: error: " + WRONG_TLS[case].format(ep=c.addresses[0])


def test_the_sdk_client_with_client_tls(tls_cluster: TlsCluster) -> None:
    c = tls_cluster
    # Dialled by IP, verified against a name the node's certificate holds.
    with c.client(server_name="node.test") as client:
        job = client.create_job("sdk-tls", schedule="@daily", handler="echo").job
        assert client.get_job(job.id).name == "sdk-tls"
        client.delete_job(job.id)
    with (
        c.client(cert_file=None, key_file=None) as client,
        pytest.raises(TlsHandshakeFailed) as err,
    ):
        client.list_jobs_page()
    assert err.value.mismatch == "CERT_REQUIRED" and err.value.endpoint == c.addresses[0]
    assert "requires a client certificate" in str(err.value)


def test_a_worker_with_another_cas_certificate_never_gets_work(tls_cluster: TlsCluster) -> None:
    c = tls_cluster
    line = "TLS: the node refused this client's certificate (not signed by a CA it trusts"

    def refusals() -> int:
        return c.procs["w-foreign"].tail(200).count(line)

    # It says why, and keeps trying (it does not exit or go quiet).
    wait_for(refusals, lambda n: n >= 2, timeout=15, what="w-foreign to be refused twice")
    assert c.procs["w-foreign"].alive
    with c.client() as client:  # cluster-wide: both nodes' workers
        assert [w.worker_id for w in client.cluster_status().workers] == ["w-good"]


def test_the_dashboard_and_metrics_answer_over_https(tls_cluster: TlsCluster) -> None:
    c = tls_cluster
    context = TlsFiles(ca_file=c.pki / "ca.pem").client_ssl_context()  # no client certificate

    def get(url: str) -> Any:
        return urllib.request.urlopen(url, timeout=5, context=context)

    with get(f"https://127.0.0.1:{c.http_port}/") as page:
        assert page.status == 200 and b"schedd" in page.read()
    with get(f"https://localhost:{c.metrics_port}/metrics") as metrics:
        assert b'schedd_build_info{role="node"' in metrics.read()
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{c.http_port}/", timeout=5)
    assert "(P=4, TLS, client certificates required)" in c.procs["n0"].tail(400)


def test_a_node_refuses_an_unusable_certificate_before_it_starts(pki: Path) -> None:
    result = subprocess.run(
        [*SCHEDD, "node", "--tls-cert-file", str(pki / "node.pem"),
         "--tls-key-file", str(pki / "client-key.pem")],
        capture_output=True, text=True, timeout=30, check=False, env=_env(),
    )  # fmt: skip
    assert result.returncode == 2
    assert f"Invalid value for --tls-key-file: {pki / 'client-key.pem'} is not the key of" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
