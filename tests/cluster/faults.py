"""The faults the cluster tests inflict, each followed by its recovery (returns once the
cluster is whole again): used one by one, chained, and at random by the soak."""

from __future__ import annotations

import time
from collections.abc import Callable

from cluster.procs import ClusterProcs
from cluster.scenario import NODES, Scenario

from schedd.dev import EtcdCluster

Fault = Callable[[Scenario, EtcdCluster, str], None]


def node_sigkill(s: Scenario, etcd: EtcdCluster, node: str) -> None:
    s.procs.kill(node)
    s.procs.wait_owned(_others(s.procs, node))
    s.procs.restart(node)
    s.procs.wait_owned(NODES, timeout=40)


def node_sigterm(s: Scenario, etcd: EtcdCluster, node: str) -> None:
    code = s.procs.term(node)
    assert code == 0, f"{node} exited {code} after SIGTERM"
    s.procs.wait_owned(_others(s.procs, node))
    s.procs.restart(node)
    s.procs.wait_owned(NODES, timeout=40)


def node_sigstop(s: Scenario, etcd: EtcdCluster, node: str) -> None:
    began = time.time()
    s.procs.pause(node)
    s.procs.wait_owned(_others(s.procs, node))
    time.sleep(max(0.0, s.procs.session_ttl_s * 2 + 1 - (time.time() - began)))
    s.procs.resume(node)
    s.procs.wait_owned(NODES, timeout=40)


def node_cut_from_etcd(s: Scenario, etcd: EtcdCluster, node: str) -> None:
    s.procs.cut_from_etcd(node)
    s.procs.wait_owned(_others(s.procs, node))
    time.sleep(1.0)
    s.procs.reconnect_to_etcd(node)
    s.procs.wait_owned(NODES, timeout=40)


def node_joins(s: Scenario, etcd: EtcdCluster, node: str) -> None:
    """A node that never ran joins (the workers find it by discovery)."""
    s.procs.add_node(node)
    s.procs.wait_owned(NODES, timeout=40)


def worker_sigkill(s: Scenario, etcd: EtcdCluster, worker: str) -> None:
    s.kill_worker(worker)
    time.sleep(2.0)
    s.procs.restart(worker)


def worker_sigstop(s: Scenario, etcd: EtcdCluster, worker: str) -> None:
    s.procs.pause(worker)
    time.sleep(s.procs.lease_timeout_ms / 1000 + 1.0)
    s.procs.resume(worker)


def etcd_member_sigkill(s: Scenario, etcd: EtcdCluster, which: str) -> None:
    leader = etcd.leader()
    index = leader if which == "leader" else (leader + 1) % len(etcd.members)
    etcd.kill(index)
    time.sleep(5.0)
    etcd.restart(index)


#: name -> (fault, the targets it may hit); "node joins" only where the node never ran
FAULTS: dict[str, tuple[Fault, list[str]]] = {
    "node SIGKILL": (node_sigkill, NODES),
    "node SIGTERM": (node_sigterm, NODES),
    "node SIGSTOP past lease": (node_sigstop, NODES),
    "node cut from etcd": (node_cut_from_etcd, NODES),
    "worker SIGKILL": (worker_sigkill, ["w0", "w1"]),
    "worker SIGSTOP past lease": (worker_sigstop, ["w0", "w1"]),
    "etcd member SIGKILL": (etcd_member_sigkill, ["leader", "follower"]),
}
JOIN = node_joins


def _others(procs: ClusterProcs, node: str) -> list[str]:
    return [n for n in NODES if n != node and n in procs.procs]
