"""Settle batches whose executions retry at one instant, on the in-memory store (which refuses a
key written twice in one transaction, as etcd does).

A target that fails for a while (a circuit breaker's cool-down, a ``Retry-After`` date) tells
many executions of one job to retry at the same instant. Their retry timers used to share the
key ``due/{p}/{due_ms}/{job}``: in one settle transaction etcd refused the whole batch, every
result in it was refused and handed out again, and the cycle repeated at full speed. These
tests drive the real :class:`ResultRouter` and :class:`Partition` over :class:`MemoryKV` with a
manual clock: no etcd, no sleeps.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from unit.partition_kit import KEYS, config, own

from schedd._clock import ManualClock
from schedd.history import History
from schedd.model import validate_new_job
from schedd.node._live import OwnedPartitions
from schedd.node._partition import Partition
from schedd.node._settling import ResultRouter
from schedd.node._window import DueWindow
from schedd.obs import NoopRecorder
from schedd.store import (
    FIRE,
    RUN,
    DueEntry,
    Fence,
    Item,
    JobStore,
    MemoryKV,
    PartitionStore,
    TxnRejected,
    prefix_end,
)
from schedd.store.abc import Op
from schedd.v1 import execution_pb2, job_pb2, worker_pb2

NOW = 1_700_000_000_000
FAILED = worker_pb2.OUTCOME_FAILED


class Rejections(NoopRecorder):
    __slots__ = ("what",)

    def __init__(self) -> None:
        self.what: list[str] = []

    def write_rejected(self, what: str) -> None:
        self.what.append(what)


def _job(job_id: str) -> job_pb2.Job:
    spec = job_pb2.Job(
        id=job_id,
        name=job_id,
        schedule=job_pb2.Schedule(expr="@every 1h", timezone="UTC"),
        handler=job_pb2.HandlerTarget(name="noop", queue="q"),
        retry=job_pb2.RetryPolicy(
            max_attempts=10, initial_backoff_ms=100, max_backoff_ms=60_000, multiplier=2
        ),
    )
    return validate_new_job(spec, now_ms=NOW, id_factory=lambda: "")


class Node:
    """One partition of a node on the memory store: the real Partition and ResultRouter."""

    def __init__(self, kv: MemoryKV, clock: ManualClock, tmp_path: Path) -> None:
        self.cfg = config(tmp_path)
        self.kv, self.clock = kv, clock
        self.history = History(tmp_path / "history")
        self.recorder = Rejections()
        self.table = OwnedPartitions(1)
        self.router = ResultRouter(self.table)

    async def own(self, store: PartitionStore | None = None) -> Partition:
        partition = await own(
            self.kv, self.clock, self.history, self.cfg, store=store, recorder=self.recorder,
            rng=random.Random(1),
        )  # fmt: skip
        partition.window.end = NOW + 3_600_000
        self.table.add(partition)
        return partition


async def _running(
    partition: Partition, jobs: JobStore, job_id: str, scheduled: list[int]
) -> list[execution_pb2.Execution]:
    """Executions of ``job_id`` at these fire times, claimed by ``partition`` and out on a
    worker (the trigger's RUN entries consumed as the claim loop would)."""
    job = await jobs.get_job(job_id)
    await jobs.add_runs(job, scheduled, execution_pb2.TRIGGER_MANUAL, NOW)
    entries, _ = await partition.store.load_due(NOW + 1000)
    for e in entries:
        if e.kind == RUN and e.job_id == job_id:
            assert await partition._claim([e]) == []
    runs = [lv.ex for lv in partition.live.values() if lv.ex.job_id == job_id]
    for lv in partition.live.values():
        lv.dispatched = True
    assert sorted(ex.scheduled_ms for ex in runs) == sorted(scheduled)
    return runs


def _failed(ex: execution_pb2.Execution, retry_after_ms: int) -> worker_pb2.Result:
    return worker_pb2.Result(
        execution_id=ex.id,
        fencing_token=ex.fencing_token,
        attempt=ex.attempt,
        outcome=FAILED,
        error="503 Service Unavailable",
        retry_after_ms=retry_after_ms,
    )


@pytest.fixture
async def setup(tmp_path: Path) -> tuple[Node, JobStore]:
    clock = ManualClock(NOW)
    kv = MemoryKV(clock=clock)
    jobs = JobStore(kv, KEYS, partitions=1)
    await jobs.create_jobs([_job("j1"), _job("j2")], NOW)
    return Node(kv, clock, tmp_path), jobs


async def test_executions_told_to_retry_at_one_instant_all_settle(
    setup: tuple[Node, JobStore],
) -> None:
    node, jobs = setup
    partition = await node.own()
    runs = await _running(partition, jobs, "j1", [NOW - 3000, NOW - 2000, NOW - 1000])
    runs += await _running(partition, jobs, "j2", [NOW - 3000])
    # Every one is told "retry in 5 s" (the breaker's cool-down): one instant for all.
    acks = await node.router.on_results("w", [_failed(ex, 5000) for ex in runs])
    assert [a.accepted for a in acks] == [True] * 4, [a.message for a in acks]
    due_at = NOW + 5000
    for ex in runs:
        kv = await node.kv.get(KEYS.run_key(0, ex.job_id, ex.scheduled_ms))
        assert kv is not None
        stored = execution_pb2.Execution.FromString(kv.value)
        assert (stored.state, stored.attempt, stored.due_ms) == (
            execution_pb2.EXECUTION_RETRY_WAIT,
            2,
            due_at,
        )
        timer = await node.kv.get(KEYS.run_due_key(0, due_at, ex.job_id, ex.scheduled_ms))
        assert timer is not None and timer.value == DueEntry.encode_value(RUN, ex.scheduled_ms)
    # Every retry timer is in the window too, one entry per execution.
    waiting = [e for e in partition.window.entries.values() if e.kind == RUN]
    assert sorted((e.job_id, e.scheduled_ms) for e in waiting) == sorted(
        (ex.job_id, ex.scheduled_ms) for ex in runs
    )
    assert node.recorder.what == []


async def test_the_retry_timers_are_claimed_each_once(setup: tuple[Node, JobStore]) -> None:
    node, jobs = setup
    partition = await node.own()
    runs = await _running(partition, jobs, "j1", [NOW - 3000, NOW - 2000, NOW - 1000])
    await node.router.on_results("w", [_failed(ex, 5000) for ex in runs])
    partition.live.clear()
    node.clock.advance(5)
    # One claim per job per transaction, so three rounds, each claiming the next one.
    claimed: list[int] = []
    for _ in range(3):
        batch = partition.window.take(NOW + 5000, 100)
        assert len(batch) == 1
        assert await partition._claim(batch) == []
        claimed += [lv.ex.scheduled_ms for lv in partition.live.values()]
        partition.live.clear()
    assert sorted(claimed) == sorted(ex.scheduled_ms for ex in runs)
    assert partition.window.take(NOW + 5000, 100) == []
    start = KEYS.due_prefix(0)
    left, _ = await node.kv.range_all(start, prefix_end(start))
    assert all(DueEntry.decode(0, 0, "", kv.value, 0).kind == FIRE for kv in left)


def test_the_window_keeps_one_entry_per_execution() -> None:
    window = DueWindow()
    window.end = NOW + 10_000
    entries = [DueEntry(0, NOW + 5000, "j1", RUN, sched) for sched in (1, 2, 3)]
    fire = DueEntry(0, NOW + 5000, "j1", FIRE, NOW + 5000)
    for e in [*entries, fire]:
        assert window.put(e)
    assert len(window) == 4
    # A FIRE entry replaces the job's FIRE entry at that instant (one key), not its runs.
    assert window.put(DueEntry(0, NOW + 5000, "j1", FIRE, NOW + 5000, mod_revision=9))
    assert len(window) == 4
    taken = [window.take(NOW + 5000, 10) for _ in range(4)]
    assert all(len(t) == 1 for t in taken)
    assert len({(t[0].kind, t[0].scheduled_ms) for t in taken}) == 4


class OneBadItem(PartitionStore):
    """A store whose item ending one execution writes its run key twice: malformed."""

    bad = ""

    def finish_run(
        self,
        execution: execution_pb2.Execution,
        *,
        dead_record: execution_pb2.Execution | None = None,
        then: Sequence[Op] = (),
    ) -> Item:
        if execution.id != self.bad:
            return super().finish_run(execution, dead_record=dead_record, then=then)
        key = KEYS.run_key(0, execution.job_id, execution.scheduled_ms)
        o = self.kv.ops
        return Item(o.txn([], [o.delete(key), o.put(key, b"twice")]))


async def test_a_batch_isolates_the_item_the_store_refuses(setup: tuple[Node, JobStore]) -> None:
    node, _ = setup
    owner = KEYS.owner_key(0)
    store = PartitionStore(node.kv, KEYS, Fence(0, owner, await node.kv.put(owner, b"n")))
    o = node.kv.ops
    items = [Item(o.txn([], [o.put(b"/t/x/%d" % n, b"v")])) for n in range(7)]
    items.insert(3, Item(o.txn([], [o.put(b"/t/x/bad", b"1"), o.put(b"/t/x/bad", b"2")])))
    with pytest.raises(TxnRejected):  # the store itself refuses the whole transaction
        await node.kv.txn([], items)
    applied = await store.apply(items)
    assert applied.ok == [True] * 3 + [False] + [True] * 4
    assert list(applied.rejected) == [3] and "duplicate key" in applied.rejected[3]
    assert applied.revisions[3] == 0 and all(applied.revisions[n] for n in (0, 1, 2, 4, 7))
    assert await node.kv.count(b"/t/x/", prefix_end(b"/t/x/")) == 7
    assert await node.kv.get(b"/t/x/bad") is None


async def test_a_refused_result_leaves_the_rest_and_is_retried_with_backoff(
    setup: tuple[Node, JobStore],
) -> None:
    node, jobs = setup
    owner = KEYS.owner_key(0)
    store = OneBadItem(node.kv, KEYS, Fence(0, owner, await node.kv.put(owner, b"n")))
    partition = await node.own(store)
    runs = await _running(partition, jobs, "j1", [NOW - 3000, NOW - 2000, NOW - 1000])
    store.bad = runs[1].id
    ok = [
        worker_pb2.Result(
            execution_id=ex.id,
            fencing_token=ex.fencing_token,
            attempt=ex.attempt,
            outcome=worker_pb2.OUTCOME_SUCCEEDED,
        )
        for ex in runs
    ]
    acks = await node.router.on_results("w", ok)
    assert [a.accepted for a in acks] == [True, False, True]
    assert acks[1].code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert "refused" in acks[1].message and "duplicate key" in acks[1].message
    # The others ended; the refused one is as it was in the store, out of memory.
    assert await node.kv.get(KEYS.run_key(0, "j1", runs[0].scheduled_ms)) is None
    assert await node.kv.get(KEYS.run_key(0, "j1", runs[2].scheduled_ms)) is None
    assert await node.kv.get(KEYS.run_key(0, "j1", runs[1].scheduled_ms)) is not None
    assert runs[1].id not in partition.live
    assert node.recorder.what == ["result"]
    # Not re-read at once (that was the loop), but after a second, then 2 s, 4 s, ...
    doubts = partition._doubts
    assert not doubts.ripen(node.clock.now_ms())
    assert doubts.next_later_ms() == NOW + 1000
    node.clock.advance(1.0)
    assert doubts.ripen(node.clock.now_ms())
    assert doubts.take() == ({"j1"}, {runs[1].id})
    assert partition.refusals.record(runs[1].id, node.clock.now_ms()) == (2, NOW + 1000 + 2000)


async def test_a_retry_whose_timer_was_lost_is_adopted(setup: tuple[Node, JobStore]) -> None:
    """A node of key format 1 misreads a named RUN key (its job id would end in ``/{sched}``)
    and may drop it: the execution waits RETRY_WAIT with no timer. Reconciling the job finds
    it and adopts it, rather than leaving it to wait forever."""
    node, jobs = setup
    partition = await node.own()
    [ex] = await _running(partition, jobs, "j1", [NOW - 1000])
    await node.router.on_results("w", [_failed(ex, 5000)])
    assert ex.id not in partition.live
    due_at = NOW + 5000
    assert await node.kv.delete(KEYS.run_due_key(0, due_at, "j1", ex.scheduled_ms)) == 1
    partition.window.drop_jobs({"j1"})
    await partition.reconcile(["j1"])
    adopted = partition.live[ex.id].ex
    assert adopted.state == execution_pb2.EXECUTION_PENDING and adopted.attempt == 2
    kv = await node.kv.get(KEYS.run_key(0, "j1", ex.scheduled_ms))
    assert kv is not None and kv.mod_revision == adopted.fencing_token > ex.fencing_token


async def test_a_retry_timer_of_key_format_1_is_claimed_at_its_key(
    setup: tuple[Node, JobStore],
) -> None:
    """RUN keys written before they named their execution (``due/{p}/{ms}/{job}``) are read,
    claimed and consumed at the key they were read from."""
    node, jobs = setup
    partition = await node.own()
    [ex] = await _running(partition, jobs, "j1", [NOW - 1000])
    await node.router.on_results("w", [_failed(ex, 5000)])
    due_at = NOW + 5000
    named = KEYS.run_due_key(0, due_at, "j1", ex.scheduled_ms)
    legacy = KEYS.due_key(0, due_at, "j1")
    value = (await node.kv.get(named)).value  # type: ignore[union-attr]
    await node.kv.delete(named)
    await node.kv.put(legacy, value)
    partition.window.drop_jobs({"j1"})
    [entry] = [e for e in (await partition.store.load_due(due_at))[0] if e.kind == RUN]
    assert entry.legacy_key and entry.scheduled_ms == ex.scheduled_ms
    assert partition.store.entry_key(entry) == legacy
    node.clock.advance(5)
    assert await partition._claim([entry]) == []
    assert await node.kv.get(legacy) is None
    assert partition.live[ex.id].ex.attempt == 2


async def test_a_stale_result_does_not_shadow_the_current_one_in_its_batch(
    setup: tuple[Node, JobStore],
) -> None:
    """A worker answers a new owner's probe from its ledger (the result under the new token)
    in the batch that also carries the same result under the old token (refused stale): the
    current one must settle. It used to be refused as "a second result in one batch", and
    the execution stayed PENDING for ever with nothing in flight (its children never ran)."""
    node, jobs = setup
    partition = await node.own()
    (ex,) = await _running(partition, jobs, "j1", [NOW - 1000])
    old = worker_pb2.Result(
        execution_id=ex.id, fencing_token=ex.fencing_token - 1, attempt=ex.attempt,
        outcome=worker_pb2.OUTCOME_SUCCEEDED,
    )  # fmt: skip
    current = worker_pb2.Result()
    current.CopyFrom(old)
    current.fencing_token = ex.fencing_token
    current.from_ledger = True
    acks = await node.router.on_results("w", [old, current])
    assert [a.accepted for a in acks] == [False, True], [a.message for a in acks]
    assert "stale" in acks[0].message
    assert await node.kv.get(KEYS.run_key(0, ex.job_id, ex.scheduled_ms)) is None
    assert ex.id not in partition.live
    # Two current results in one batch: the first settles, the second is refused as such.
    (ex2,) = await _running(partition, jobs, "j1", [NOW - 500])
    twice = worker_pb2.Result(
        execution_id=ex2.id, fencing_token=ex2.fencing_token, attempt=ex2.attempt,
        outcome=worker_pb2.OUTCOME_SUCCEEDED,
    )  # fmt: skip
    acks = await node.router.on_results("w", [twice, twice])
    assert acks[0].accepted and not acks[1].accepted
    assert "second result" in acks[1].message
