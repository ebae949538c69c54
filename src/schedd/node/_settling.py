"""The node's side of the worker streams: reports routed to the partitions that own them.

:class:`ResultRouter` is the node's :class:`~schedd.dispatch.ExecutionAuthority`. It finds each
reported execution's partition, hands it the reports (partitions settle concurrently: each has
its own lock, fence and transactions), and turns their verdicts into the wire's acks: the one
place a gRPC status code is chosen for a result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeVar

import grpc

from schedd.dispatch import InFlight
from schedd.node._live import Live, OwnedPartitions
from schedd.node._part_results import NOT_OWNED, Judged, Verdict
from schedd.node._partition import Partition
from schedd.v1 import worker_pb2

R = TypeVar("R", worker_pb2.Result, worker_pb2.Heartbeat)

#: The status code a refused result is answered with: FAILED_PRECONDITION tells the worker
#: the result will never be accepted (drop it); UNAVAILABLE that it may be (keep it: the
#: execution is handed out again and the worker's ledger answers).
CODES = {
    Verdict.STALE: grpc.StatusCode.FAILED_PRECONDITION,
    Verdict.DUPLICATE: grpc.StatusCode.FAILED_PRECONDITION,
    Verdict.CHANGED: grpc.StatusCode.FAILED_PRECONDITION,
    Verdict.NOT_WRITTEN: grpc.StatusCode.UNAVAILABLE,
}


class ResultRouter:
    """Routes what workers report to the partitions this node runs."""

    def __init__(self, partitions: OwnedPartitions) -> None:
        self._partitions = partitions

    async def on_started(self, worker_id: str, started: list[worker_pb2.Started]) -> None:
        for s in started:
            partition = self._partitions.of_execution(s.execution_id)
            if partition is not None:
                partition.started(worker_id, s)

    async def on_heartbeats(
        self, worker_id: str, heartbeats: list[worker_pb2.Heartbeat]
    ) -> list[str]:
        # One not of this node's partitions (any more) is its owner's to judge: handed over,
        # the new owner's probe adopts it under a new token, and a cancel from here would
        # race that probe and have it run again.
        groups = self._group(heartbeats)
        stale = await asyncio.gather(
            *(p.heartbeats(worker_id, beats) for p, beats in groups.values())
        )
        return [eid for part in stale for eid in part]

    def on_reported(self, results: list[worker_pb2.Result]) -> None:
        for partition, group in self._group(results).values():
            partition.reported(group)

    async def on_results(
        self, worker_id: str, results: list[worker_pb2.Result]
    ) -> list[worker_pb2.ResultAck]:
        acks: dict[int, worker_pb2.ResultAck] = {}
        groups: dict[int, tuple[Partition, list[tuple[int, worker_pb2.Result]]]] = {}
        for n, r in enumerate(results):
            partition = self._partitions.of_execution(r.execution_id)
            if partition is None:
                acks[n] = ack(r, Verdict.NOT_WRITTEN, NOT_OWNED)
                continue
            groups.setdefault(partition.partition, (partition, []))[1].append((n, r))
        judged: list[list[Judged]] = await asyncio.gather(
            *(partition.settle(group, worker_id) for partition, group in groups.values())
        )
        for part in judged:
            for n, verdict, message in part:
                acks[n] = ack(results[n], verdict, message)
        return [acks[n] for n in range(len(results))]

    async def on_lost(self, lost: list[InFlight], reason: str) -> None:
        """A worker vanished or let a lease run out: each is handed out again by its partition
        with a new, larger token."""
        by_partition: dict[int, tuple[Partition, list[Live]]] = {}
        for inflight in lost:
            d = inflight.dispatch
            partition = self._partitions.of_execution(d.execution_id)
            live = partition.live.get(d.execution_id) if partition else None
            if partition is None or live is None or live.ex.fencing_token != d.fencing_token:
                continue
            by_partition.setdefault(partition.partition, (partition, []))[1].append(live)
        for partition, lives in by_partition.values():
            await partition.lost(lives, reason)

    def _group(self, reports: Sequence[R]) -> dict[int, tuple[Partition, list[R]]]:
        """Reports by the partition here that owns their execution (others are left out)."""
        groups: dict[int, tuple[Partition, list[R]]] = {}
        for r in reports:
            partition = self._partitions.of_execution(r.execution_id)
            if partition is not None:
                groups.setdefault(partition.partition, (partition, []))[1].append(r)
        return groups


def ack(r: worker_pb2.Result, verdict: Verdict, message: str) -> worker_pb2.ResultAck:
    """The wire's answer to one result."""
    if verdict is Verdict.ACCEPTED:  # code and message are their defaults
        return worker_pb2.ResultAck(
            execution_id=r.execution_id, fencing_token=r.fencing_token, accepted=True
        )
    return worker_pb2.ResultAck(
        execution_id=r.execution_id,
        fencing_token=r.fencing_token,
        accepted=False,
        code=CODES[verdict].value[0],
        message=message,
    )
