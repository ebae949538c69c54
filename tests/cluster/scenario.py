"""One fault scenario: a 3-node, 2-worker cluster running per-second ``catch_up`` jobs, a
fault, a recovery, then the checks of :mod:`cluster.check` on the effect ledger."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cluster.check import Report, expected_fires, first_fires, missing, verify
from cluster.effects import EffectLedger
from cluster.procs import ClusterProcs, stored_runs, wait_for

NODES = ["n0", "n1", "n2"]
WORKERS = ["w0", "w1"]


@dataclass
class Scenario:
    procs: ClusterProcs
    ledger: EffectLedger
    jobs: list[str] = field(default_factory=list)
    first: dict[str, int] = field(default_factory=dict)
    worker_kills: list[tuple[str, float]] = field(default_factory=list)

    def start(self, *, nodes: list[str] = NODES, job_count: int = 24, work_ms: int = 200) -> None:
        for n in nodes:
            self.procs.add_node(n)
        self.procs.wait_owned(nodes)
        for w in WORKERS:
            self.procs.add_worker(w)
        client = self.procs.client(nodes[0])
        for i in range(job_count):
            job = client.create_job(
                f"every-second-{i}",
                schedule="* * * * * *",
                handler="effect",
                payload={"work_ms": work_ms},
                misfire="catch_up",
                catch_up_limit=1000,
            ).job
            self.jobs.append(job.id)
        self.first = wait_for(
            lambda: first_fires(self.ledger, self.jobs),
            lambda f: len(f) == len(self.jobs),
            timeout=30,
            what="every job's first fire",
        )

    def kill_worker(self, name: str) -> None:
        self.worker_kills.append((name, time.time()))
        self.procs.kill(name)

    def finish(
        self, label: str, *, after_s: float = 3.0, timeout: float = 40.0, **extra: object
    ) -> Report:
        """Fires up to ``after_s`` from now are expected; waits until all ran, then checks."""
        time.sleep(after_s)
        end_ms = time.time_ns() // 1_000_000
        expected = expected_fires(self.first, end_ms)
        left = wait_for(
            lambda: missing(self.ledger, expected),
            lambda m: not m,
            timeout=timeout,
            what=f"every expected fire (of {len(expected)}) to have run",
        )
        assert not left
        time.sleep(1.0)  # late duplicates, if any, have a moment to show
        report = verify(self.ledger, expected, self.worker_kills)
        print(report.summary(label, **extra))
        assert report.ok, report.failure()
        self.assert_settled(end_ms - 2000)
        return report

    def assert_settled(self, before_ms: int, timeout: float = 20.0) -> None:
        """Every fire scheduled before ``before_ms`` ended in the store too: its run key is
        gone. An effect done once is not enough: a run left PENDING after it (its result
        lost between owners) would starve its children and count as running for ever."""
        stuck = wait_for(
            lambda: [
                f"{key} state={ex.state} token={ex.fencing_token} rev={rev}"
                for key, rev, ex in stored_runs(self.procs.etcd_endpoints, self.procs.prefix)
                if ex.scheduled_ms < before_ms
            ],
            lambda left: not left,
            timeout=timeout,
            what=f"every run scheduled before {before_ms} to be settled in the store",
        )
        assert not stuck
