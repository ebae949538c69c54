"""A real :class:`~schedd.node._partition.Partition` on the memory store, for unit tests: its
port to the workers is an :class:`Outbox` that records what it is handed, and what it tells its
node is kept in :class:`Events`. Nothing runs on its own: tests call its methods."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from schedd._clock import ManualClock
from schedd.history import History
from schedd.node._config import NodeConfig
from schedd.node._fire_policy import FirePolicy
from schedd.node._live import Live
from schedd.node._partition import Partition
from schedd.obs import MetricsRecorder
from schedd.store import Fence, Keys, MemoryKV, PartitionStore
from schedd.v1 import execution_pb2, worker_pb2

KEYS = Keys(b"/t/")


def copy_dispatch(d: worker_pb2.Dispatch) -> worker_pb2.Dispatch:
    out = worker_pb2.Dispatch()
    out.CopyFrom(d)
    return out


class Outbox:
    """The partition's outbound port: keeps copies of what it submits and holds (holding
    as many as it has ``hold_credits`` for, refusing the rest), the cancels, and answers
    probes "not taken" (or as ``taken`` says)."""

    def __init__(self, hold_credits: int = 0, taken: Callable[[str], bool] | None = None) -> None:
        self.hold_credits = hold_credits
        self.taken = taken or (lambda _eid: False)
        self.submitted: list[worker_pb2.Dispatch] = []
        self.held: list[worker_pb2.Dispatch] = []
        self.cancelled: list[tuple[str, int, str]] = []
        self.probed: list[str] = []

    @property
    def sent(self) -> list[str]:
        """The execution ids submitted, in order."""
        return [d.execution_id for d in self.submitted]

    def submit(self, dispatches: Sequence[worker_pb2.Dispatch]) -> None:
        self.submitted.extend(copy_dispatch(d) for d in dispatches)

    def hold(self, dispatches: Sequence[worker_pb2.Dispatch]) -> list[worker_pb2.Dispatch]:
        take = list(dispatches[: self.hold_credits])
        self.hold_credits -= len(take)
        self.held.extend(copy_dispatch(d) for d in take)
        return list(dispatches[len(take) :])

    def probe(
        self, dispatches: Sequence[worker_pb2.Dispatch], answer: Callable[[str, bool], None]
    ) -> None:
        for d in dispatches:
            self.probed.append(d.execution_id)
            answer(d.execution_id, self.taken(d.execution_id))

    def cancel(self, execution_id: str, token: int, reason: str) -> bool:
        self.cancelled.append((execution_id, token, reason))
        return True

    def pending_count(self) -> int:
        return 0


class Events:
    """What the partition tells its node, kept."""

    def __init__(self) -> None:
        self.lost: list[str] = []
        self.failed: list[str] = []

    def partition_lost(self, partition: int, reason: str) -> None:
        self.lost.append(reason)

    def partition_failed(self, partition: int, reason: str) -> None:
        self.failed.append(reason)


def config(tmp_path: Path | None = None, **kwargs: Any) -> NodeConfig:
    kwargs.setdefault("partitions", 1)
    return NodeConfig(node_id="n", data_dir=tmp_path or Path("/nonexistent"), **kwargs)


async def own(
    kv: MemoryKV,
    clock: ManualClock,
    history: History | Any,
    cfg: NodeConfig,
    *,
    partition: int = 0,
    policy: FirePolicy | None = None,
    outbound: Outbox | None = None,
    store: PartitionStore | None = None,
    recorder: MetricsRecorder | None = None,
    cls: type[Partition] = Partition,
    **kwargs: Any,
) -> Partition:
    """A partition owned under a fresh fence (nothing loaded: the test puts what it needs)."""
    if store is None:
        owner = KEYS.owner_key(partition)
        store = PartitionStore(kv, KEYS, Fence(partition, owner, await kv.put(owner, b"n")))
    return cls(
        store, cfg, clock, history, policy or FirePolicy(cfg, clock), outbound or Outbox(),
        Events(), recorder=recorder, **kwargs,
    )  # fmt: skip


def live(part: Partition, eid: str, *, due_ms: int = 0, token: int = 7, **fields: Any) -> Live:
    """A live execution ``eid`` (``job@sched``) of ``part``, its message built, not armed."""
    job_id = eid.split("@", maxsplit=1)[0]
    ex = execution_pb2.Execution(
        id=eid, job_id=job_id, fencing_token=token, due_ms=due_ms, scheduled_ms=due_ms, **fields
    )
    lv = part.live[eid] = Live(ex)
    part.prepare(lv)
    return lv
