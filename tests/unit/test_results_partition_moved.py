"""Results and losses for a partition that moves while they wait for its lock.

A settle round groups results by partition, then takes each partition's lock in turn; a
partition can be given up (lease lost, fenced out, shutdown) while an earlier group runs. The
late group must be answered UNAVAILABLE (the worker keeps the result and its next owner decides),
not fail the whole round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import grpc
from unit.partition_kit import config, own

from schedd._clock import ManualClock
from schedd.dispatch import InFlight
from schedd.node._fire_policy import FirePolicy
from schedd.node._live import Live, OwnedPartitions
from schedd.node._part_results import Judged
from schedd.node._partition import Partition
from schedd.node._settling import ResultRouter
from schedd.store import MemoryKV, partition_of
from schedd.v1 import execution_pb2, worker_pb2

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


class _Partition(Partition):
    """The real partition, its settling and redeliveries recorded (and made to fail)."""

    failing = False
    settled: list[int]
    redelivered: list[list[str]]

    async def _settle(
        self, group: Sequence[tuple[int, worker_pb2.Result]], worker_id: str
    ) -> list[Judged]:
        self.settled.append(self.partition)
        if self.failing:
            raise RuntimeError("etcd said no")
        return await super()._settle(group, worker_id)

    async def _redeliver(self, lives: list[Live], reason: str) -> None:
        self.redelivered.append([lv.ex.id for lv in lives])


async def _router() -> tuple[ResultRouter, OwnedPartitions, dict[str, _Partition]]:
    clock = ManualClock(1_000)
    cfg = config(partitions=PARTITIONS)
    table = OwnedPartitions(PARTITIONS)
    policy = FirePolicy(cfg, clock)
    kv = MemoryKV(clock=clock)
    settled: list[int] = []
    by_job: dict[str, _Partition] = {}
    for job in _jobs_on_two_partitions():
        p = partition_of(job, PARTITIONS)
        part = await own(kv, clock, None, cfg, partition=p, policy=policy, cls=_Partition)
        assert isinstance(part, _Partition)
        part.settled, part.redelivered = settled, []
        table.add(part)
        by_job[job] = part
    return ResultRouter(table), table, by_job


def _result(job: str) -> worker_pb2.Result:
    return worker_pb2.Result(
        execution_id=f"{job}@5000", fencing_token=9, outcome=worker_pb2.OUTCOME_SUCCEEDED
    )


def _live(part: Partition, eid: str) -> Live:
    ex = execution_pb2.Execution(id=eid, job_id=eid.split("@", maxsplit=1)[0], fencing_token=9)
    lv = part.live[eid] = Live(ex, dispatched=True)
    return lv


async def _give_up(table: OwnedPartitions, part: Partition) -> None:
    table.remove(part.partition)
    await part.stop()


async def test_a_partition_given_up_while_its_results_wait_answers_unavailable() -> None:
    router, table, by_job = await _router()
    (job_a, part_a), (job_b, part_b) = by_job.items()
    await part_a.lock.acquire()
    await part_b.lock.acquire()
    task = asyncio.create_task(router.on_results("w", [_result(job_a), _result(job_b)]))
    await asyncio.sleep(0)
    # Both partitions are given up while the round waits for their locks.
    await _give_up(table, part_a)
    await _give_up(table, part_b)
    part_a.lock.release()
    part_b.lock.release()
    acks = await task
    assert [a.execution_id for a in acks] == [f"{job_a}@5000", f"{job_b}@5000"]
    assert all(not a.accepted for a in acks)
    assert {a.code for a in acks} == {grpc.StatusCode.UNAVAILABLE.value[0]}
    assert all("does not own" in a.message for a in acks)


async def test_a_partition_that_stays_is_still_answered_when_another_moves() -> None:
    router, table, by_job = await _router()
    (job_a, part_a), (job_b, _part_b) = by_job.items()
    await part_a.lock.acquire()
    task = asyncio.create_task(router.on_results("w", [_result(job_b), _result(job_a)]))
    await asyncio.sleep(0)
    await _give_up(table, part_a)
    part_a.lock.release()
    acks = await task
    # job_b's partition is still here: its result is judged (unknown execution -> stale token).
    assert acks[0].code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert "stale" in acks[0].message
    assert acks[1].code == grpc.StatusCode.UNAVAILABLE.value[0]


async def test_losses_for_a_partition_that_moved_are_left_to_its_next_owner() -> None:
    router, _, by_job = await _router()
    (job_a, part_a), _ = by_job.items()
    _live(part_a, f"{job_a}@5000")
    lost = InFlight(
        dispatch=worker_pb2.Dispatch(execution_id=f"{job_a}@5000", fencing_token=9),
        worker_id="w",
        dispatched_ms=0,
        lease_deadline_ms=0,
    )
    await part_a.lock.acquire()
    task = asyncio.create_task(router.on_lost([lost], "worker disconnected"))
    await asyncio.sleep(0)
    part_a._stopping = True  # given up while the loss waited for the lock
    part_a.lock.release()
    await task
    assert part_a.redelivered == []
    # The same loss with the partition in place is redelivered.
    part_a._stopping = False
    await router.on_lost([lost], "worker disconnected")
    assert part_a.redelivered == [[f"{job_a}@5000"]]
    # One under an older token is not (its worker's result is stale).
    lost.dispatch.fencing_token = 8
    await router.on_lost([lost], "worker disconnected")
    assert len(part_a.redelivered) == 1


async def test_partitions_settle_concurrently_and_one_failing_does_not_fail_the_rest() -> None:
    router, _, by_job = await _router()
    (job_a, part_a), (job_b, part_b) = by_job.items()
    part_b.failing = True
    _live(part_b, f"{job_b}@5000")
    await part_a.lock.acquire()
    task = asyncio.create_task(router.on_results("w", [_result(job_a), _result(job_b)]))
    for _ in range(5):
        await asyncio.sleep(0)
    # B settled while A still waits for its lock: one slow partition holds up no other.
    assert part_b.settled == [part_b.partition]
    part_a.lock.release()
    acks = await task
    assert acks[0].code == grpc.StatusCode.FAILED_PRECONDITION.value[0]  # unknown there
    assert not acks[1].accepted and acks[1].code == grpc.StatusCode.UNAVAILABLE.value[0]
    # Nothing has B's execution in flight now: it is re-read and handed out again.
    assert part_b._doubts.take() == ({job_b}, {f"{job_b}@5000"})
    assert part_a._doubts.take() == (set(), set())


async def test_heartbeats_for_a_partition_this_node_gave_up_are_not_called_stale() -> None:
    """Handed over, the new owner's probe adopts the running execution under a new token; a
    cancel from the old owner would race that probe and have the work run twice."""
    router, table, by_job = await _router()
    (job_a, part_a), (job_b, part_b) = by_job.items()
    _live(part_b, f"{job_b}@5000")
    await _give_up(table, part_a)
    beats = [
        worker_pb2.Heartbeat(execution_id=f"{job_a}@5000", fencing_token=9),  # moved away
        worker_pb2.Heartbeat(execution_id=f"{job_b}@5000", fencing_token=9),  # current
        worker_pb2.Heartbeat(execution_id=f"{job_b}@6000", fencing_token=9),  # unknown here
    ]
    assert await router.on_heartbeats("w", beats) == [f"{job_b}@6000"]
