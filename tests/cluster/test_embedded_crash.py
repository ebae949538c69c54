"""One machine, killed for real: a ``schedd node`` on the embedded store SIGKILLed mid-burst,
during compaction and mid-create of 100k jobs, then started again on the same directory.

Nothing acknowledged may be lost (every claim and result is fsync'd before it is), no job
created twice, and every fire that was due ran exactly once by the effect ledger (per-second
``catch_up`` jobs: the fires due while the node was down run late, once each); the restarted
node does not wait out its dead predecessor's leases.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cluster.check import expected_fires, first_fires, missing, verify
from cluster.effects import EffectLedger
from cluster.procs import SCHEDD, TESTS_DIR, Proc, wait_for
from failed_stash import call_failed

from schedd.client import Client, build_job
from schedd.dev import free_port

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow, pytest.mark.cluster]

SESSION_TTL_S = 10  # a restart that waited out the dead node's lease would take this long


class OneMachine:
    """A node on ``rocksdb:{root}/store`` and a worker, as real processes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.address = f"127.0.0.1:{free_port()}"
        self.effects_db = root / "effects.db"
        log = os.environ.get("SCHEDD_CLUSTER_LOG", "info")
        node = [
            *SCHEDD, "node", "--store", f"rocksdb:{root / 'store'}", "--listen", self.address,
            "--node-id", "n0", "--data-dir", str(root / "node"), "--partitions", "8",
            "--session-ttl", str(SESSION_TTL_S), "--compaction-interval-s", "0.3",
            "--compaction-keep-revisions", "100",
        ]  # fmt: skip
        self.node = Proc("n0", node, {**os.environ, "SCHEDD_LOG_LEVEL": log}, root / "n0.log")
        worker = [
            *SCHEDD, "worker", "--connect", self.address, "--import", "cluster.effect_handlers",
            "--worker-id", "w0", "--capacity", "64", "--data-dir", str(root / "w0"),
        ]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]),
            "SCHEDD_EFFECTS_DB": str(self.effects_db),
            "SCHEDD_WORKER_NAME": "w0",
            "SCHEDD_LOG_LEVEL": log,
        }
        self.worker = Proc("w0", worker, env, root / "w0.log")
        self.client = Client(self.address, timeout_s=20)

    def start_node(self) -> float:
        """Starts the node; returns the seconds until it owned every partition."""
        began = time.monotonic()
        self.node.start()
        wait_for(
            self.client.cluster_status,
            lambda st: len(st.partitions) == 8 and all(p.owner == "n0" for p in st.partitions),
            timeout=30,
            what="n0 to own every partition",
        )
        return time.monotonic() - began

    def kill_node(self) -> None:
        self.node.signal(signal.SIGKILL)
        self.node.wait(10)

    def close(self) -> None:
        self.client.close()
        for p in (self.worker, self.node):
            if p.alive:
                p.signal(signal.SIGKILL)
                p.wait(10)

    def logs(self) -> str:
        return f"--- n0 ---\n{self.node.tail(60)}\n--- w0 ---\n{self.worker.tail(30)}"


@pytest.fixture
def machine(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[OneMachine]:
    m = OneMachine(tmp_path)
    try:
        yield m
    finally:
        m.close()
        if call_failed(request):
            print(f"\n===== process logs =====\n{m.logs()}")


def test_sigkill_mid_burst_and_during_compaction(machine: OneMachine) -> None:
    machine.start_node()
    machine.worker.start()
    jobs = [
        machine.client.create_job(
            f"every-second-{i}", schedule="* * * * * *", handler="effect",
            payload={"work_ms": 50}, misfire="catch_up", catch_up_limit=1000,
        ).job.id
        for i in range(30)
    ]  # fmt: skip
    # A burst: 1,500 one-shot jobs due at one instant, claimed durably ahead of it, and the
    # node killed between the claims and the instant.
    burst_at = (int(time.time()) + 6) * 1000
    at = datetime.fromtimestamp(burst_at / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    specs = [
        build_job(f"burst-{i}", schedule=f"@at {at}", handler="effect", misfire="catch_up")
        for i in range(1500)
    ]
    made = machine.client.create_jobs(specs)
    burst = [j.id for j in made if not isinstance(j, Exception)]
    assert len(burst) == 1500, [j for j in made if isinstance(j, Exception)][:3]
    ledger = EffectLedger(machine.effects_db)
    try:
        first = wait_for(
            lambda: first_fires(ledger, jobs), lambda f: len(f) == len(jobs), timeout=30,
            what="every per-second job's first fire",
        )  # fmt: skip
        time.sleep(max(0.0, burst_at / 1000 - 0.4 - time.time()))
        machine.kill_node()  # the burst is claimed, not yet fired
        time.sleep(2.0)  # its instant passes while the node is down
        restart_s = machine.start_node()
        time.sleep(2.5)
        machine.kill_node()  # compaction runs every 0.3 s: likely mid-compaction
        second_restart_s = machine.start_node()
        time.sleep(2.0)
        end_ms = time.time_ns() // 1_000_000
        expected = expected_fires(first, end_ms) | {(j, burst_at) for j in burst}
        left = wait_for(
            lambda: missing(ledger, expected), lambda m: not m, timeout=60,
            what=f"every expected fire (of {len(expected)}) to have run",
        )  # fmt: skip
        assert not left
        time.sleep(1.0)  # a late duplicate, if any, has a moment to show
        report = verify(ledger, expected)
    finally:
        ledger.close()
    print(
        report.summary(
            "embedded store, node SIGKILL x2",
            restart_s=f"{restart_s:.1f}/{second_restart_s:.1f}",
        )
    )
    assert report.ok, report.failure()
    # No waiting out the dead process's session lease (10 s): its leases die at reopen.
    assert restart_s < SESSION_TTL_S / 2 and second_restart_s < SESSION_TTL_S / 2


def test_sigkill_mid_create_of_100k_jobs(machine: OneMachine) -> None:
    """A client creating 100k jobs (each with its idempotency key) while the node is killed:
    after a restart, the same creation again leaves exactly 100k jobs, none twice."""
    machine.start_node()
    n = 100_000
    specs = [
        build_job(f"yearly-{i}", schedule="0 0 1 1 *", handler="effect", idempotency_key=f"k{i}")
        for i in range(n)
    ]
    done = [0]

    def progress(sent: int, total: int) -> None:
        done[0] = sent

    def create() -> None:
        with contextlib.suppress(Exception):  # the node dies under it
            machine.client.create_jobs(specs, progress=progress)

    creating = threading.Thread(target=create)
    creating.start()
    wait_for(lambda: done[0], lambda d: d >= 10_000, timeout=60, what="10,000 jobs sent")
    machine.kill_node()
    creating.join(120)
    machine.start_node()
    again = machine.client.create_jobs(specs)  # the user's retry, same keys
    errors = [g for g in again if isinstance(g, Exception)]
    assert not errors, errors[:3]
    stored = list(machine.client.list_jobs(page_size=1000))
    names = [j.name for j in stored]
    assert len(names) == n and len(set(names)) == n
    # The retry got the jobs the first try had stored (by their keys), not new ones.
    assert {j.id for j in again if not isinstance(j, Exception)} == {j.id for j in stored}
