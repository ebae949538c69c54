"""Faults chained on one running cluster (every kind, one after the other), and the soak:
random faults for ``SCHEDD_SOAK`` seconds (``SCHEDD_SOAK=600 make test-soak``)."""

from __future__ import annotations

import os
import random
import time

import pytest
from cluster.effects import EffectLedger
from cluster.faults import FAULTS, JOIN
from cluster.procs import ClusterProcs
from cluster.scenario import Scenario

from schedd.dev import EtcdCluster

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

CHAIN = [
    ("node SIGKILL", "n1"),
    ("node SIGSTOP past lease", "n2"),
    ("worker SIGSTOP past lease", "w0"),
    ("etcd member SIGKILL", "leader"),
    ("node SIGTERM", "n0"),
    ("worker SIGKILL", "w1"),
    ("node cut from etcd", "n1"),
]


@pytest.mark.timeout(300)
def test_chained_faults(procs: ClusterProcs, ledger: EffectLedger, etcd3: EtcdCluster) -> None:
    s = Scenario(procs, ledger)
    s.start(nodes=["n0", "n1"])
    time.sleep(1.0)
    JOIN(s, etcd3, "n2")  # the first fault: a node joins under load
    for name, target in CHAIN:
        time.sleep(1.0)
        FAULTS[name][0](s, etcd3, target)
    s.finish("chained faults", timeout=60, faults=len(CHAIN) + 1)


@pytest.mark.timeout(0)
@pytest.mark.skipif(not os.environ.get("SCHEDD_SOAK"), reason="set SCHEDD_SOAK=<seconds>")
def test_soak(procs: ClusterProcs, ledger: EffectLedger, etcd3: EtcdCluster) -> None:
    seconds = float(os.environ["SCHEDD_SOAK"])
    seed = int(os.environ.get("SCHEDD_SOAK_SEED", str(random.randrange(1 << 30))))
    print(f"soak: {seconds:.0f} s of random faults, SCHEDD_SOAK_SEED={seed} to replay")
    rng = random.Random(seed)
    s = Scenario(procs, ledger)
    s.start()
    done: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.5, 4.0))
        name = rng.choice(sorted(FAULTS))
        fault, targets = FAULTS[name]
        target = rng.choice(targets)
        print(f"soak: {name} on {target}", flush=True)
        fault(s, etcd3, target)
        done.append(f"{name}:{target}")
    s.finish("soak", timeout=90, faults=len(done), seed=seed)
