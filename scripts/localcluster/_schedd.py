"""The cluster's schedd processes (nodes, workers) and how to ask the nodes about the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from localcluster._config import ClusterConfig
from localcluster._procs import Daemon

#: The same interpreter (the repository's .venv) runs schedd and schedctl.
SCHEDD = [sys.executable, "-m", "schedd.cli.schedd_main"]
SCHEDCTL = [sys.executable, "-c", "from schedd.cli.schedctl import main; main()"]


def _daemon(config: ClusterConfig, name: str, kind: str) -> Daemon:
    home = config.dir / name
    return Daemon(name, home / f"{kind}.pid", home / f"{kind}.log", marker=str(home / "data"))


def node_daemons(config: ClusterConfig) -> list[Daemon]:
    return [_daemon(config, n, "node") for n in config.node_names]


def worker_daemons(config: ClusterConfig) -> list[Daemon]:
    return [_daemon(config, n, "worker") for n in config.worker_names]


def node_tls_args(config: ClusterConfig) -> list[str]:
    """A node's TLS flags (none without TLS): client certificates to etcd, mutual TLS on its
    gRPC port (HTTPS for the dashboard and metrics, when on). The members are verified
    against ``localhost``, a name their certificate holds: with several endpoints the etcd
    client cannot verify them against the addresses it dials."""
    if not config.tls:
        return []
    f = config.tls_file
    return [
        "--etcd-ca", f("etcd-ca.pem"),
        "--etcd-server-name", "localhost",
        "--etcd-cert", f("etcd-client.pem"),
        "--etcd-key", f("etcd-client-key.pem"),
        "--tls-cert-file", f("node.pem"),
        "--tls-key-file", f("node-key.pem"),
        "--tls-ca-file", f("ca.pem"),
    ]  # fmt: skip


def worker_tls_args(config: ClusterConfig) -> list[str]:
    """A worker's TLS flags (none without TLS): the CA and its client certificate."""
    if not config.tls:
        return []
    f = config.tls_file
    return [
        "--tls-ca-file", f("ca.pem"),
        "--tls-cert-file", f("worker.pem"),
        "--tls-key-file", f("worker-key.pem"),
    ]  # fmt: skip


def schedctl_tls_args(config: ClusterConfig) -> list[str]:
    """schedctl's TLS flags (none without TLS): the CA and the client certificate."""
    if not config.tls:
        return []
    f = config.tls_file
    return ["--cacert", f("ca.pem"), "--cert", f("client.pem"), "--key", f("client-key.pem")]


def node_argv(config: ClusterConfig, name: str) -> list[str]:
    return [
        *SCHEDD, "--log-level", config.log_level, "node",
        "--etcd", ",".join(config.etcd_endpoints),
        "--listen", config.node_address(name),
        "--node-id", name,
        "--data-dir", str(config.dir / name / "data"),
        "--partitions", str(config.partitions),
        "--prefix", config.prefix,
        "--session-ttl", str(config.session_ttl_s),
        "--max-clock-skew-ms", str(config.max_clock_skew_ms),
        *node_tls_args(config),
    ]  # fmt: skip


def worker_argv(config: ClusterConfig, name: str) -> list[str]:
    return [
        *SCHEDD, "--log-level", config.log_level, "worker",
        "--connect", ",".join(config.node_addresses),
        "--import", config.worker_import,
        "--queue", config.worker_queue,
        "--worker-id", name,
        "--capacity", str(config.worker_capacity),
        "--data-dir", str(config.dir / name / "data"),
        *worker_tls_args(config),
    ]  # fmt: skip


def child_env() -> dict[str, str]:
    """This environment without ``SCHEDD_*``: every setting the children get is a flag, so a
    variable left in the shell (``SCHEDD_ADVERTISE``...) cannot slip into all of them."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}


@dataclass
class NodeAnswer:
    """One node's ``schedctl cluster status -o json``, or why there is none."""

    node: str
    address: str
    status: dict[str, Any] | None
    error: str = ""


def ask_nodes(config: ClusterConfig, timeout_s: float = 5.0) -> list[NodeAnswer]:
    """``schedctl --endpoints ADDR cluster status -o json`` for every node at once.

    Each node is asked on its own (not one round-robin call) because each answers for the
    worker streams it holds: together they show whether every worker reached every node.
    """
    env = child_env()
    procs = {
        name: subprocess.Popen(
            [*SCHEDCTL, "--endpoints", config.node_address(name), "--timeout", str(timeout_s),
             *schedctl_tls_args(config), "cluster", "status", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        for name in config.node_names
    }  # fmt: skip
    answers: list[NodeAnswer] = []
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=timeout_s + 20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        address = config.node_address(name)
        if proc.returncode != 0:
            message = err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
            answers.append(NodeAnswer(name, address, None, message))
            continue
        try:
            answers.append(NodeAnswer(name, address, json.loads(out)))
        except ValueError as exc:
            answers.append(NodeAnswer(name, address, None, f"not JSON: {exc}"))
    return answers


@dataclass
class ClusterView:
    """What the nodes say, merged: live nodes, partition owners, which worker reached which
    node."""

    answers: list[NodeAnswer]

    @property
    def first(self) -> dict[str, Any]:
        """The first node answer (nodes and partitions come from etcd: any node's will do)."""
        for a in self.answers:
            if a.status is not None:
                return a.status
        return {}

    @property
    def live_nodes(self) -> list[dict[str, Any]]:
        return list(self.first.get("nodes", []))

    @property
    def partitions(self) -> list[dict[str, Any]]:
        return list(self.first.get("partitions", []))

    @property
    def partition_count(self) -> int:
        return int(self.first.get("partition_count", 0))

    def unowned(self) -> list[int]:
        owned = {int(p.get("partition", 0)) for p in self.partitions if p.get("owner")}
        return [p for p in range(self.partition_count) if p not in owned]

    def workers(self) -> dict[str, set[str]]:
        """worker id -> the nodes it has a stream to."""
        out: dict[str, set[str]] = {}
        for a in self.answers:
            for w in (a.status or {}).get("workers", []):
                # A cluster-wide answer lists each worker once with every node it reached.
                nodes = w.get("node_ids") or [w.get("node_id") or a.node]
                out.setdefault(str(w["worker_id"]), set()).update(str(n) for n in nodes)
        return out


def shares(view: ClusterView) -> dict[str, int]:
    """node id -> how many partitions it owns, from the owners (not the nodes' own counts,
    which another node's answer may give at another instant)."""
    out = {str(n.get("node_id")): 0 for n in view.live_nodes}
    for p in view.partitions:
        owner = str(p.get("owner") or "")
        if owner:
            out[owner] = out.get(owner, 0) + 1
    return out


def is_balanced(view: ClusterView) -> bool:
    """Every partition owned and no live node above ceil(P / n), the share each node aims
    for: a node releases only above it and claims only free partitions, so ownership stops
    moving there while the membership stays (with P = 64 and 3 nodes: 22, 22, 20 is
    settled too)."""
    owned = shares(view)
    if not owned or view.partition_count == 0 or view.unowned():
        return False
    high = -(-view.partition_count // len(owned))
    return all(n <= high for n in owned.values())


def is_whole(config: ClusterConfig, view: ClusterView) -> bool:
    """Every node live and answering, every partition owned by one of them, and every worker
    connected to every node."""
    if any(a.status is None for a in view.answers):
        return False
    live = {str(n.get("node_id")) for n in view.live_nodes}
    if not set(config.node_names) <= live or view.partition_count == 0 or view.unowned():
        return False
    workers = view.workers()
    nodes = set(config.node_names)
    return all(nodes <= workers.get(w, set()) for w in config.worker_names)
