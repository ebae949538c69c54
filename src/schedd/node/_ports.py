"""The seams of a partition: where its executions go out, and what it tells its node.

A :class:`~._partition.Partition` is given both at construction: the node gives its
:class:`~schedd.dispatch.Dispatcher` as the :class:`Outbound` port and itself as the
:class:`PartitionEvents`; ``schedd.testing`` gives its in-process workers and a recorder of
problems.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from schedd.v1 import worker_pb2


class Outbound(Protocol):
    """Where a partition hands its executions to workers (the node's dispatcher)."""

    def submit(self, dispatches: Sequence[worker_pb2.Dispatch]) -> None:
        """Queues dispatches to start now; never blocks."""
        ...

    def hold(self, dispatches: Sequence[worker_pb2.Dispatch]) -> list[worker_pb2.Dispatch]:
        """Sends dispatches whose ``start_at_ms`` is ahead to workers that hold them until
        then; returns those no worker could hold."""
        ...

    def probe(
        self,
        dispatches: Sequence[worker_pb2.Dispatch],
        answer: Callable[[str, bool], None],
    ) -> None:
        """Asks the workers whether they already run or ran these; ``answer(execution_id,
        taken)`` says, for each, what came of it."""
        ...

    def cancel(self, execution_id: str, token: int, reason: str) -> bool:
        """Cancels an execution under ``token`` on whatever worker has it."""
        ...

    def pending_count(self) -> int:
        """Dispatches waiting for an eligible worker with credits."""
        ...


class PartitionEvents(Protocol):
    """What a partition tells its node about itself."""

    def partition_lost(self, partition: int, reason: str) -> None:
        """The fence no longer holds: stop using the partition."""
        ...

    def partition_failed(self, partition: int, reason: str) -> None:
        """A loop of the partition crashed: release it, so it is claimed afresh."""
        ...
