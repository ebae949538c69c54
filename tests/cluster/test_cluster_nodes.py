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
