"""Results and losses for a partition that moves while they wait for its lock.

A settle round groups results by partition, then takes each partition's lock in turn; a
partition can be given up (lease lost, fenced out, shutdown) while an earlier group runs. The
late group must be answered UNAVAILABLE (the worker keeps the result and its next owner decides),
not fail the whole round.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc

from schedd._clock import ManualClock
from schedd.dispatch import InFlight
from schedd.node._config import NodeConfig
from schedd.node._firing import Firer
from schedd.node._live import OwnedPartitions
from schedd.node._settling import Settler
from schedd.store import partition_of
from schedd.v1 import worker_pb2

PARTITIONS = 8


def _jobs_on_two_partitions() -> tuple[str, str]:
    seen: dict[int, str] = {}
    for i in range(1000):
        job = f"job-{i}"
        seen.setdefault(partition_of(job, PARTITIONS), job)
        if len(seen) == 2:
            a, b = seen.values()
            return a, b
    raise AssertionError("no two partitions")


def _manager() -> tuple[Settler, OwnedPartitions, dict[str, Any]]:
    cfg = NodeConfig(node_id="t", data_dir=Path("/nonexistent"), partitions=PARTITIONS)
    clock = ManualClock(1_000)
    table = OwnedPartitions(PARTITIONS)
    m = Settler(cfg, clock, None, table, Firer(cfg, clock, None))  # type: ignore[arg-type]
    by_job: dict[str, Any] = {}
    for job in _jobs_on_two_partitions():
        p = partition_of(job, PARTITIONS)
        runner = SimpleNamespace(
            partition=p, live={}, lock=asyncio.Lock(), doubted=[], pacer=SimpleNamespace()
        )
        runner.doubt = lambda jobs, orphans=(), r=runner: r.doubted.append(
            (sorted(jobs), sorted(orphans))
        )
        table.add(runner)  # type: ignore[arg-type]
        by_job[job] = runner
    return m, table, by_job


def _result(job: str) -> worker_pb2.Result:
    return worker_pb2.Result(
        execution_id=f"{job}@5000", fencing_token=9, outcome=worker_pb2.OUTCOME_SUCCEEDED
    )


async def test_a_partition_given_up_while_its_results_wait_answers_unavailable() -> None:
    m, table, by_job = _manager()
    (job_a, runner_a), (job_b, runner_b) = by_job.items()
    await runner_a.lock.acquire()
    await runner_b.lock.acquire()
    task = asyncio.create_task(m.on_results("w", [_result(job_a), _result(job_b)]))
    await asyncio.sleep(0)
    # Both partitions are given up while the round waits for the first lock.
    table.remove(runner_a.partition)
    table.remove(runner_b.partition)
    runner_a.lock.release()
    runner_b.lock.release()
    acks = await task
    assert [a.execution_id for a in acks] == [f"{job_a}@5000", f"{job_b}@5000"]
    assert all(not a.accepted for a in acks)
    assert {a.code for a in acks} == {grpc.StatusCode.UNAVAILABLE.value[0]}
    assert all("does not own" in a.message for a in acks)


async def test_a_partition_that_stays_is_still_answered_when_another_moves() -> None:
    m, table, by_job = _manager()
    (job_a, runner_a), (job_b, _runner_b) = by_job.items()
    await runner_a.lock.acquire()
    task = asyncio.create_task(m.on_results("w", [_result(job_b), _result(job_a)]))
    await asyncio.sleep(0)
    table.remove(runner_a.partition)
    runner_a.lock.release()
    acks = await task
    # job_b's partition is still here: its result is judged (unknown execution -> stale token).
    assert acks[0].code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert acks[1].code == grpc.StatusCode.UNAVAILABLE.value[0]


async def test_losses_for_a_partition_that_moved_are_left_to_its_next_owner() -> None:
    m, table, by_job = _manager()
    (job_a, runner_a), _ = by_job.items()
    runner_a.live[f"{job_a}@5000"] = SimpleNamespace(ex=SimpleNamespace(fencing_token=9))
    redelivered: list[Any] = []

    async def redeliver(runner: Any, lives: list[Any], reason: str) -> None:
        redelivered.append((runner, lives))

    m._redeliver = redeliver  # type: ignore[method-assign]
    lost = InFlight(
        dispatch=worker_pb2.Dispatch(execution_id=f"{job_a}@5000", fencing_token=9),
        worker_id="w",
        dispatched_ms=0,
        lease_deadline_ms=0,
    )
    await runner_a.lock.acquire()
    task = asyncio.create_task(m.on_lost([lost], "worker disconnected"))
    await asyncio.sleep(0)
    table.remove(runner_a.partition)
    runner_a.lock.release()
    await task
    assert redelivered == []
    # The same loss with the partition in place is redelivered.
    table.add(runner_a)
    await m.on_lost([lost], "worker disconnected")
    assert len(redelivered) == 1


async def test_partitions_settle_concurrently_and_one_failing_does_not_fail_the_rest() -> None:
    m, _, by_job = _manager()
    (job_a, runner_a), (job_b, runner_b) = by_job.items()
    applied: list[int] = []

    async def apply(runner: Any, group: list[Any], worker_id: str) -> list[Any]:
        applied.append(runner.partition)
        if runner is runner_b:
            raise RuntimeError("etcd said no")
        return [
            (n, worker_pb2.ResultAck(execution_id=r.execution_id, accepted=True)) for n, r in group
        ]

    m._apply_results = apply  # type: ignore[method-assign]
    runner_b.live[f"{job_b}@5000"] = SimpleNamespace(ex=SimpleNamespace(fencing_token=9))
    await runner_a.lock.acquire()
    task = asyncio.create_task(m.on_results("w", [_result(job_a), _result(job_b)]))
    for _ in range(5):
        await asyncio.sleep(0)
    # B settled while A still waits for its lock: one slow partition holds up no other.
    assert applied == [runner_b.partition]
    runner_a.lock.release()
    acks = await task
    assert acks[0].accepted
    assert not acks[1].accepted and acks[1].code == grpc.StatusCode.UNAVAILABLE.value[0]
    # Nothing has B's execution in flight now: its runner re-reads it and hands it out again.
    assert runner_b.doubted == [([job_b], [f"{job_b}@5000"])]
    assert runner_a.doubted == []


async def test_heartbeats_for_a_partition_this_node_gave_up_are_not_called_stale() -> None:
    """Handed over, the new owner's probe adopts the running execution under a new token; a
    cancel from the old owner would race that probe and have the work run twice."""
    m, table, by_job = _manager()
    (job_a, runner_a), (job_b, runner_b) = by_job.items()
    runner_b.live[f"{job_b}@5000"] = SimpleNamespace(ex=SimpleNamespace(fencing_token=9))
    table.remove(runner_a.partition)
    beats = [
        worker_pb2.Heartbeat(execution_id=f"{job_a}@5000", fencing_token=9),  # moved away
        worker_pb2.Heartbeat(execution_id=f"{job_b}@5000", fencing_token=9),  # current
        worker_pb2.Heartbeat(execution_id=f"{job_b}@6000", fencing_token=9),  # unknown here
    ]
    assert await m.on_heartbeats("w", beats) == [f"{job_b}@6000"]
