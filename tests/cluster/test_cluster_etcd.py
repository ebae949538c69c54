"""etcd faults with real processes: one member of three SIGKILLed and brought back.
Every fire runs exactly once (see :mod:`cluster.check`)."""

from __future__ import annotations

import time

import pytest
from cluster.effects import EffectLedger
from cluster.procs import ClusterProcs
from cluster.scenario import Scenario

from schedd.dev import EtcdCluster

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow, pytest.mark.cluster]


@pytest.mark.parametrize("which", ["leader", "follower"])
def test_etcd_member_sigkill_and_restart(
    procs: ClusterProcs, ledger: EffectLedger, etcd3: EtcdCluster, which: str
) -> None:
    s = Scenario(procs, ledger)
    s.start()
    time.sleep(2.0)
    leader = etcd3.leader()
    index = leader if which == "leader" else (leader + 1) % len(etcd3.members)
    etcd3.kill(index)
    time.sleep(6.0)
    etcd3.restart(index)
    s.finish(f"etcd {which} SIGKILL", timeout=40)
