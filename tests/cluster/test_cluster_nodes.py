"""Node faults with real processes: SIGKILL, SIGTERM, SIGSTOP past the lease, a join under
load, a node cut off from etcd. Every fire runs exactly once (see :mod:`cluster.check`)."""

from __future__ import annotations

import time

import pytest
from cluster.effects import EffectLedger
from cluster.procs import ClusterProcs
from cluster.scenario import Scenario

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow, pytest.mark.cluster]


def test_node_sigkill_and_restart(procs: ClusterProcs, ledger: EffectLedger) -> None:
    s = Scenario(procs, ledger)
    s.start()
    time.sleep(2.0)
    killed_at = time.time()
    procs.kill("n1")
    procs.wait_owned(["n0", "n2"])
    failover_s = time.time() - killed_at
    procs.restart("n1")
    procs.wait_owned(["n0", "n1", "n2"])
    s.finish("node SIGKILL", failover_s=f"{failover_s:.1f}")


def test_node_sigterm_hands_over_and_rejoins(procs: ClusterProcs, ledger: EffectLedger) -> None:
    s = Scenario(procs, ledger)
    s.start()
    time.sleep(2.0)
    began = time.time()
    code = procs.term("n1")
    stopped_s = time.time() - began
    assert code == 0, f"n1 exited {code} after SIGTERM"
    procs.wait_owned(["n0", "n2"])
    handover_s = time.time() - began
    time.sleep(1.0)
    procs.restart("n1")
    procs.wait_owned(["n0", "n1", "n2"])
    s.finish("node SIGTERM", stop_s=f"{stopped_s:.1f}", handover_s=f"{handover_s:.1f}")


def test_node_sigstop_past_its_lease_then_sigcont(
    procs: ClusterProcs, ledger: EffectLedger
) -> None:
    """The zombie: frozen past its session TTL, its partitions are taken; resumed, it must
    notice it lost them, drop what it held and rejoin, its late writes refused."""
    s = Scenario(procs, ledger)
    s.start()
    time.sleep(2.0)
    began = time.time()
    procs.pause("n1")
    procs.wait_owned(["n0", "n2"])
    failover_s = time.time() - began
    time.sleep(max(0.0, procs.session_ttl_s * 2 + 1 - (time.time() - began)))
    procs.resume("n1")
    procs.wait_owned(["n0", "n1", "n2"], timeout=40)
    s.finish("node SIGSTOP past lease", failover_s=f"{failover_s:.1f}")


def test_node_cut_off_from_etcd_then_restored(procs: ClusterProcs, ledger: EffectLedger) -> None:
    """Its etcd connections black-holed (not refused): it must fence itself before its lease
    can have expired, the others take its partitions, and it rejoins once restored."""
    s = Scenario(procs, ledger)
    s.start()
    time.sleep(2.0)
    began = time.time()
    procs.cut_from_etcd("n1")
    procs.wait_owned(["n0", "n2"], via="n0")
    failover_s = time.time() - began
    time.sleep(2.0)
    procs.reconnect_to_etcd("n1")
    procs.wait_owned(["n0", "n1", "n2"], timeout=40)
    s.finish("node cut from etcd", failover_s=f"{failover_s:.1f}")


def test_node_joins_under_load(procs: ClusterProcs, ledger: EffectLedger) -> None:
    """Two nodes carry the load; a third starts. It gets its share by graceful handoff (the
    old owners stop, give back, release; it loads from etcd), the workers find it by
    discovery (they were given only the first two), and its partitions go on firing."""
    s = Scenario(procs, ledger)
    s.start(nodes=["n0", "n1"])
    time.sleep(2.0)
    began = time.time()
    procs.add_node("n2")
    status = procs.wait_owned(["n0", "n1", "n2"])
    rebalance_s = time.time() - began
    share = -(-procs.partitions // 3)
    owned = [p.get("owner") for p in status["partitions"]].count("n2")
    assert 1 <= owned <= share, status
    s.finish("node joins under load", rebalance_s=f"{rebalance_s:.1f}")
