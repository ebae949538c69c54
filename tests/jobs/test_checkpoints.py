"""Durable checkpoints (real etcd, node and worker processes): a checkpoint a handler saves
reaches etcd through its owner, so when the worker and the node are both SIGKILLed mid-job,
the next attempt, on another worker under another node, resumes from it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from jobs.conftest import KindsCluster

from integration.cluster_harness import eventually
from schedd._errors import Unavailable
from schedd.client import AsyncClient
from schedd.v1 import execution_pb2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def steps(log: Path) -> list[tuple[str, int, int]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        worker, attempt, value = line.split()
        out.append((worker, int(attempt), int(value)))
    return out


async def test_checkpoint_survives_worker_and_owner_crash(
    kinds_etcd: KindsCluster, tmp_path: Path
) -> None:
    log = tmp_path / "steps.log"
    env = {"SCHEDD_CKPT_LOG": str(log)}
    await kinds_etcd.start("--import", "jobs.ckpt_handlers", env=env)
    job_id = (
        await kinds_etcd.client.create_job(
            "count", schedule="@after 1s", handler="count", timeout="2m", max_attempts=3
        )
    ).job.id
    await eventually(
        lambda: asyncio.sleep(0, steps(log)), lambda s: len(s) >= 8, timeout=30, what="progress"
    )
    node, worker = kinds_etcd.procs[0], kinds_etcd.procs[1]
    worker.signal(9)
    node.signal(9)
    worker.wait(10)
    node.wait(10)
    before = steps(log)
    last = before[-1][2]
    assert {w for w, _, _ in before} == {"w0"}

    _, address = kinds_etcd.add_node("n1")
    kinds_etcd.add_worker("w1", "--connect", address, "--import", "jobs.ckpt_handlers", env=env)
    client = AsyncClient(address, timeout_s=15)
    try:

        async def runs() -> list[execution_pb2.Execution]:
            try:
                return list(await client.list_executions(job_id=job_id))
            except Unavailable:
                return []

        done = await eventually(
            runs,
            lambda rs: bool(rs) and rs[0].state == execution_pb2.EXECUTION_SUCCEEDED,
            timeout=90,
            what="the job to finish on w1",
        )
    finally:
        await client.close()
    after = [s for s in steps(log) if s[0] == "w1"]
    resumed_at = after[0][2]
    print(f"checkpoints: w0 reached {last}, w1 resumed at {resumed_at}")
    # Every step w0 logged had saved its checkpoint and sent a heartbeat; the owner writes
    # them to etcd as they come, so at most the last one or two can be lost with the owner.
    assert last - 2 <= resumed_at <= last + 1, (last, resumed_at)
    assert after[-1][2] == 29 and done[0].attempt >= 1


async def test_a_checkpoint_too_large_fails_the_attempt_clearly(
    kinds: KindsCluster, tmp_path: Path
) -> None:
    await kinds.start("--import", "jobs.ckpt_handlers", env={"SCHEDD_CKPT_LOG": "/dev/null"})
    job_id = (
        await kinds.client.create_job("huge", schedule="@after 1s", handler="huge", max_attempts=1)
    ).job.id
    runs = await eventually(
        lambda: kinds.runs(job_id),
        lambda rs: bool(rs) and rs[0].state == execution_pb2.EXECUTION_DEAD,
        timeout=30,
        what="the attempt to fail",
    )
    assert "checkpoint is 1048578 bytes; at most 65536" in runs[0].error, runs[0].error
