"""Fixtures of the real-process cluster tests: a 3-member etcd per module, a fresh cluster
of processes per test (its logs printed when the test fails)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster.effects import EffectLedger
from cluster.procs import ClusterProcs, dump_runs
from failed_stash import call_failed

from schedd.dev import EtcdCluster


@pytest.fixture(scope="module")
def etcd3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd3"), 3, name="schedd-cluster-test")
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def procs(
    etcd3: EtcdCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ClusterProcs]:
    for i, member in enumerate(etcd3.members):  # a test that killed one leaves it to us
        if member.status() is None:
            etcd3.restart(i)
    c = ClusterProcs(
        tmp_path, etcd3.endpoints, f"/schedd-cluster/{uuid.uuid4().hex[:10]}/", tmp_path / "fx.db"
    )
    try:
        yield c
    finally:
        c.close()
        report = call_failed(request)
        if report:
            print(f"\n===== process logs ({tmp_path / 'logs'}) =====\n{c.logs()}")
            print(f"===== runs in etcd =====\n{dump_runs(etcd3.endpoints, c.prefix)}")


@pytest.fixture
def ledger(procs: ClusterProcs) -> Iterator[EffectLedger]:
    led = EffectLedger(procs.effects_db)
    yield led
    led.close()
