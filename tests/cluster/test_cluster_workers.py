"""Worker faults with real processes: SIGKILL mid-job, SIGSTOP past the execution lease.
Every fire runs exactly once in effect (see :mod:`cluster.check`)."""

from __future__ import annotations

import time

import pytest
from cluster.effects import EffectLedger
from cluster.procs import ClusterProcs
from cluster.scenario import Scenario

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow, pytest.mark.cluster]


def test_worker_sigkill_mid_job_then_restart(procs: ClusterProcs, ledger: EffectLedger) -> None:
    s = Scenario(procs, ledger)
    s.start(work_ms=600)  # each job's run spans 0.6 s: a kill always lands mid-job
    time.sleep(2.0)
    s.kill_worker("w0")
    time.sleep(3.0)
    procs.restart("w0")
    s.finish("worker SIGKILL")


def test_worker_sigstop_past_its_lease_then_sigcont(
    procs: ClusterProcs, ledger: EffectLedger
) -> None:
    """A frozen worker keeps its streams open: what it runs and holds must go to the other
    worker (new tokens) once it stops heartbeating; resumed, its late writes are refused."""
    procs.lease_timeout_ms = 8_000  # well past the silence: held work moves first
    s = Scenario(procs, ledger)
    s.start(work_ms=300)
    time.sleep(2.0)
    procs.pause("w0")
    time.sleep(procs.lease_timeout_ms / 1000 + 2.0)
    procs.resume("w0")
    s.finish("worker SIGSTOP past lease")
