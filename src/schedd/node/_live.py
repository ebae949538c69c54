"""What a node holds in memory about executions between their claim and their result.

:class:`Live` is one claimed, unfinished execution and :class:`RunningIndex` which executions
of each job are out on workers (both owned by their :class:`~._partition.Partition`; the
overlap policies read the index); :class:`OwnedPartitions` is the table of the partitions this
node runs, with the lookup from an execution id to its partition.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedd.store import parse_execution_id, partition_of
from schedd.v1 import execution_pb2, worker_pb2

if TYPE_CHECKING:
    from schedd.node._partition import Partition


@dataclass
class Live:
    """An execution this node holds: claimed, maybe dispatched, not finished."""

    ex: execution_pb2.Execution
    timer: Any = None
    dispatched: bool = False
    cancelling: bool = False
    buffered: bool = False
    # Fired ahead of its instant once and no worker could hold it: fire it at the instant.
    hold_refused: bool = False
    # Built when the claim lands (seconds before the fire), so firing only hands it over.
    message: worker_pb2.Dispatch | None = None
    # Its tenant's limits gave it this slot for the due time ``gate_due`` (-1: not gated).
    slot_ms: int = 0
    gate_due: int = -1

    def instant(self) -> int:
        """When it may start: its due time, or the later slot its tenant's limits gave it."""
        due = self.ex.due_ms
        return self.slot_ms if self.gate_due == due and self.slot_ms > due else due


class Doubts:
    """Jobs whose durable state memory may no longer match (a store call that carried their
    work failed, or its outcome is unknown), and *orphans*: executions memory still lists but
    nothing has in flight any more (their result or redelivery was not written).

    Doubts may be deferred (:meth:`add_later`): recorded now, taken only once their time has
    come (work the store refused, tried again with backoff).
    """

    def __init__(self) -> None:
        self.jobs: set[str] = set()
        self.orphans: set[str] = set()
        self._later: list[tuple[int, str, str]] = []  # heap of (at_ms, job_id, orphan or "")

    def __bool__(self) -> bool:
        """Whether any doubt is ready now (deferred ones: see :meth:`ripen`)."""
        return bool(self.jobs or self.orphans)

    def add(self, job_ids: Iterable[str], orphans: Iterable[str] = ()) -> bool:
        """Records them; returns whether anything new was recorded."""
        before = len(self.jobs) + len(self.orphans)
        self.jobs.update(job_ids)
        self.orphans.update(orphans)
        return len(self.jobs) + len(self.orphans) > before

    def add_later(self, at_ms: int, job_id: str, orphan: str = "") -> None:
        """Records a doubt of ``job_id`` (and the orphan ``orphan``) ready at ``at_ms``."""
        heapq.heappush(self._later, (at_ms, job_id, orphan))

    def ripen(self, now_ms: int) -> bool:
        """Makes the deferred doubts due by ``now_ms`` ready; returns whether any is ready."""
        later = self._later
        while later and later[0][0] <= now_ms:
            _, job_id, orphan = heapq.heappop(later)
            self.jobs.add(job_id)
            if orphan:
                self.orphans.add(orphan)
        return bool(self)

    def next_later_ms(self) -> int | None:
        """When the first deferred doubt comes due (None: there is none)."""
        return self._later[0][0] if self._later else None

    def take(self) -> tuple[set[str], set[str]]:
        """Everything ready (the orphans' jobs included), forgotten until :meth:`add`."""
        jobs, orphans = self.jobs, self.orphans
        self.jobs, self.orphans = set(), set()
        return jobs | {parse_execution_id(eid)[0] for eid in orphans}, orphans


class RunningIndex:
    """The dispatched, unfinished executions of each job, and the one fire a BUFFER_ONE job
    keeps waiting.

    A job with one running execution maps to its id (a plain ``str``: no container allocated
    per fire); several map to a set.
    """

    def __init__(self, on_discard: Callable[[str], None] | None = None) -> None:
        self.by_job: dict[str, str | set[str]] = {}
        self.buffered: dict[str, Live] = {}  # job id -> the one fire waiting (BUFFER_ONE)
        #: Told of every execution that ends or leaves (the tenant limits' running counts).
        self.on_discard = on_discard

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.by_job

    def add(self, job_id: str, execution_id: str) -> None:
        ids = self.by_job.get(job_id)
        if ids is None or ids == execution_id:
            self.by_job[job_id] = execution_id
        elif isinstance(ids, str):
            self.by_job[job_id] = {ids, execution_id}
        else:
            ids.add(execution_id)

    def discard(self, job_id: str, execution_id: str) -> None:
        """Forgets a dispatched execution of a job (and the job, when it has none left)."""
        if self.on_discard is not None:
            self.on_discard(execution_id)
        ids = self.by_job.get(job_id)
        if ids is None:
            return
        if isinstance(ids, str):
            if ids == execution_id:
                del self.by_job[job_id]
            return
        ids.discard(execution_id)
        if len(ids) == 1:
            self.by_job[job_id] = next(iter(ids))
        elif not ids:
            del self.by_job[job_id]

    def ids(self, job_id: str) -> list[str]:
        """The dispatched, unfinished executions of a job."""
        ids = self.by_job.get(job_id)
        if ids is None:
            return []
        return [ids] if isinstance(ids, str) else list(ids)


class OwnedPartitions:
    """The partitions this node runs, by number, and which one an execution belongs to."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._by_number: dict[int, Partition] = {}
        self._partition_of: dict[str, int] = {}  # job id -> partition (a SHA-1 each, else)

    def __len__(self) -> int:
        return len(self._by_number)

    def __contains__(self, partition: int) -> bool:
        return partition in self._by_number

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._by_number))

    def __getitem__(self, partition: int) -> Partition:
        return self._by_number[partition]

    def get(self, partition: int) -> Partition | None:
        return self._by_number.get(partition)

    def values(self) -> list[Partition]:
        return list(self._by_number.values())

    def add(self, partition: Partition) -> None:
        self._by_number[partition.partition] = partition
        self._share_claim_rate()

    def remove(self, partition: int) -> Partition | None:
        out = self._by_number.pop(partition, None)
        self._share_claim_rate()
        return out

    def is_current(self, partition: Partition) -> bool:
        """Whether ``partition`` still runs here (it may have moved while a caller waited)."""
        return self._by_number.get(partition.partition) is partition

    def of_job(self, job_id: str) -> Partition | None:
        p = self._partition_of.get(job_id)
        if p is None:
            if len(self._partition_of) >= 1 << 17:
                self._partition_of.clear()
            p = self._partition_of[job_id] = partition_of(job_id, self.count)
        return self._by_number.get(p)

    def of_execution(self, execution_id: str) -> Partition | None:
        return self.of_job(parse_execution_id(execution_id)[0])

    def holds(self, execution_id: str) -> bool:
        """Whether a partition here holds this execution in memory (claimed, unfinished)."""
        part = self.of_execution(execution_id)
        return part is not None and execution_id in part.live

    def _share_claim_rate(self) -> None:
        # The node's claim rate is shared by the partitions it runs.
        for part in self._by_number.values():
            part.pacer.partitions_owned = len(self._by_number)


def claims_to_give_back(lives: Iterable[Live]) -> dict[str, list[Live]]:
    """Per job, the claimed fires a graceful release gives back: plain schedule fires not
    dispatched, later than every fire of the job that stays claimed (dispatched, or not a
    plain schedule fire). Giving one back moves the job's cursor back to it; a later fire
    still holding its run could then never be claimed (its run exists) until that run ended,
    and then it would be created and run a second time."""
    givable: dict[str, list[Live]] = {}
    kept: dict[str, int] = {}  # job -> its latest fire that stays claimed
    for live in lives:
        ex = live.ex
        if not live.dispatched and ex.trigger == execution_pb2.TRIGGER_SCHEDULE:
            givable.setdefault(ex.job_id, []).append(live)
        else:
            kept[ex.job_id] = max(kept.get(ex.job_id, ex.scheduled_ms), ex.scheduled_ms)
    out: dict[str, list[Live]] = {}
    for job_id, candidates in givable.items():
        last = kept.get(job_id)
        later = [lv for lv in candidates if last is None or lv.ex.scheduled_ms > last]
        if later:
            out[job_id] = later
    return out
