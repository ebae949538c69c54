"""Store calls that fail, or whose outcome is unknown, never drop the work they carried.

A real etcd, a real node and a real worker; the node's store calls fail at random: some
before the request leaves (nothing applied), some after etcd applied it (the answer is
lost: the outcome is unknown to the node). Every due fire must still run, exactly once.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from integration.cluster_harness import Harness, eventually, node_config
from schedd._clock import SystemClock
from schedd._errors import Unavailable
from schedd.dev import EtcdCluster, EtcdProcess, free_port
from schedd.node import Node
from schedd.store import EtcdConfig, FaultPlan, MemoryKV, partition_of

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


class EtcdFaults:
    """Fails calls at random: ``before`` raises without sending, ``after`` sends, then raises."""

    def __init__(self, seed: int, before: float, after: float) -> None:
        self.rng = random.Random(seed)
        self.before = before
        self.after = after
        self.enabled = False
        self.counts: Counter[str] = Counter()

    def wrap(self, name: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def faulty(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return await call(*args, **kwargs)
            roll = self.rng.random()
            if roll < self.before:
                self.counts[f"{name} failed before"] += 1
                raise Unavailable(f"injected: etcd {name} failed before sending")
            result = await call(*args, **kwargs)
            if roll < self.before + self.after:
                self.counts[f"{name} lost answer"] += 1
                raise Unavailable(f"injected: etcd {name} answer lost (outcome unknown)")
            return result

        return faulty


def inject(node: Node, plan: EtcdFaults) -> None:
    """Every transaction and range the node sends to etcd goes through ``plan``."""
    kv: Any = node.kv
    for name in ("txn", "range"):
        setattr(kv, name, plan.wrap(name, getattr(kv, name)))


async def test_random_store_faults_lose_and_double_nothing(h: Harness) -> None:
    node = await h.start_node()
    await h.wait_all_owned(node)
    effects, jobs = await _record_every_second(h, 12)
    first = await _first_fires(effects, jobs)
    plan = EtcdFaults(seed=20261204, before=0.15, after=0.15)
    inject(node, plan)
    plan.enabled = True
    await asyncio.sleep(8.0)
    plan.enabled = False
    assert sum(plan.counts.values()) >= 8, plan.counts
    assert plan.counts["txn lost answer"] >= 3, plan.counts
    await _every_fire_once(effects, jobs, first, node.clock.now_ms())
    # The node kept every partition and serves: nothing was silently dropped on the way.
    assert len(node.partitions) == node.config.partitions


async def test_a_crashed_claim_loop_releases_its_partition(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    node = await h.start_node()
    await h.wait_all_owned(node)
    await h.start_worker()
    client = await h.connect()
    job = (await client.create_job("steady", schedule="* * * * * *", handler="echo")).job
    p = partition_of(job.id, node.config.partitions)
    await eventually(lambda: asyncio.sleep(0, result=h.calls.get("echo", [])), bool)
    runner = node.partitions[p]
    epoch = runner.store.fence.epoch

    async def crash() -> None:
        raise RuntimeError("injected bug in the claim round")

    runner._claim_round = crash  # type: ignore[method-assign]
    runner._wake.set()
    crashed_ms = node.clock.now_ms()

    def replaced() -> bool:
        new = node.partitions.get(p)
        return new is not None and new is not runner and new.store.fence.epoch > epoch

    await eventually(lambda: asyncio.sleep(0, result=replaced()), bool, what="a fresh runner")
    assert runner.stopped.is_set()
    assert f"claim-{p} crashed" in caplog.text

    def fired_after() -> list[int]:
        times = [int(eid.rpartition("@")[2]) for eid, _, _ in h.calls.get("echo", [])]
        return [t for t in times if t > crashed_ms + 1000]

    await eventually(lambda: asyncio.sleep(0, result=fired_after()), bool, what="fires resume")


async def test_losing_the_etcd_leader_loses_and_doubles_no_fire(tmp_path: Path) -> None:
    """The fault runs' finding: one member of three SIGKILLed (the raft leader) and restarted
    6 s later made claim rounds fail once, and most jobs never fired again."""
    cluster = EtcdCluster(tmp_path / "etcd", 3)
    await asyncio.to_thread(cluster.start)
    h = Harness(",".join(cluster.endpoints), b"/schedd-leader-kill/", tmp_path)
    try:
        node = await h.start_node(
            store=EtcdConfig(endpoints=cluster.endpoints, timeout_s=2.0), session_ttl_s=5
        )
        await h.wait_all_owned(node)
        effects, jobs = await _record_every_second(h, 16)
        first = await _first_fires(effects, jobs)
        leader = await asyncio.to_thread(cluster.leader)
        cluster.kill(leader)
        await asyncio.sleep(6.0)
        await asyncio.to_thread(cluster.restart, leader)
        await asyncio.sleep(4.0)
        end_ms = node.clock.now_ms()
        await _every_fire_once(effects, jobs, first, end_ms)
    finally:
        await h.close()
        await asyncio.to_thread(cluster.stop)


async def _record_every_second(
    h: Harness, count: int, *, started: list[float] | None = None, **worker_args: Any
) -> tuple[list[tuple[str, int]], list[str]]:
    """A worker whose handler records (job, scheduled time), and its start time in ``started``
    if given; ``count`` per-second jobs."""
    worker = h.new_worker("w1", **worker_args)
    effects: list[tuple[str, int]] = []

    @worker.handler("record")
    async def record(ctx: Any, payload: Any) -> None:
        effects.append((ctx.job_id, ctx.scheduled_ms))
        if started is not None:
            started.append(time.time())

    h.workers.append((worker, asyncio.create_task(worker.run())))
    client = await h.connect()
    jobs = []
    for i in range(count):
        created = await client.create_job(
            f"every-second-{i}",
            schedule="* * * * * *",
            handler="record",
            misfire="catch_up",
            catch_up_limit=100,
        )
        jobs.append(created.job.id)
    return effects, jobs


async def _first_fires(effects: list[tuple[str, int]], jobs: list[str]) -> dict[str, int]:
    first: dict[str, int] = {}

    def all_fired() -> bool:
        for job_id, sched in effects:
            first.setdefault(job_id, sched)
        return len(first) == len(jobs)

    await eventually(lambda: asyncio.sleep(0, result=all_fired()), bool, what="first fires")
    return first


async def _every_fire_once(
    effects: list[tuple[str, int]], jobs: list[str], first: dict[str, int], end_ms: int
) -> None:
    """Every second of every job from its first fire to ``end_ms`` runs, none twice."""

    def missing() -> list[tuple[str, int]]:
        seen = set(effects)
        return [
            (job_id, t)
            for job_id in jobs
            for t in range(first[job_id], end_ms - 1000, 1000)
            if (job_id, t) not in seen
        ]

    await eventually(
        lambda: asyncio.sleep(0, result=missing()),
        lambda m: not m,
        timeout=30,
        what="every fire to run",
    )
    await asyncio.sleep(1.5)  # results of the last fires are settled; nothing runs twice
    doubled = {k: n for k, n in Counter(effects).items() if n > 1}
    assert not doubled, f"fires run more than once: {doubled}"


async def test_memory_store_faults_on_every_call_lose_and_double_nothing(tmp_path: Path) -> None:
    """The same check on the memory backend, whose seeded fault plan also fails reads: window
    loads, job fetches, re-reads of doubted jobs, and the coordination's own calls."""
    kv = MemoryKV(clock=SystemClock())
    h = Harness("unused:1", b"/schedd-memory-faults/", tmp_path)
    try:
        node = Node(node_config(h.endpoint, h.prefix, tmp_path / "node"), kv=kv)
        await node.start()
        h.nodes.append(node)
        await h.wait_all_owned(node)
        effects, jobs = await _record_every_second(h, 12)
        first = await _first_fires(effects, jobs)
        kv.faults = FaultPlan(random.Random(7), fail_before=0.1, fail_after=0.1, fail_reads=0.1)
        await asyncio.sleep(8.0)
        kv.faults = None
        await _every_fire_once(effects, jobs, first, node.clock.now_ms())
        assert len(node.partitions) == node.config.partitions
    finally:
        await h.close()


async def test_a_node_cut_off_from_its_lease_fences_itself_before_it_expires(
    h: Harness,
) -> None:
    """Keep-alives hang (etcd unreachable for the node) and no new session can be had: the node
    starts nothing ``margin`` before its lease could expire, and catches up once etcd is back.

    The worker holds nothing ahead (prefetch 0): what a worker already holds still starts on
    its own timer, a window of up to ``hold_ms`` documented in docs/guarantees.md.
    """
    node = await h.start_node(session_ttl_s=2)  # self-fences 0.5 s before the 2 s TTL
    await h.wait_all_owned(node)
    started: list[float] = []
    effects, jobs = await _record_every_second(h, 6, started=started, prefetch=0)
    first = await _first_fires(effects, jobs)
    kv: Any = node.kv
    real_keepalive, real_grant = kv.keepalive_once, kv.grant
    cut = asyncio.Event()

    async def hang(lease_id: int) -> int:
        await cut.wait()
        return int(await real_keepalive(lease_id))

    async def refuse(ttl_s: int) -> int:
        raise Unavailable("injected: etcd unreachable")

    kv.keepalive_once, kv.grant = hang, refuse
    cut_at = time.time()
    await asyncio.sleep(4.0)
    back_at = time.time()
    kv.keepalive_once, kv.grant = real_keepalive, real_grant
    cut.set()
    quiet_from = cut_at + 2 - 0.5 + 0.3  # the fence instant at the latest, plus dispatch slack
    during = [t - cut_at for t in started if quiet_from < t < back_at]
    assert not during, f"started while the node could not prove its lease: {during}"
    await h.wait_all_owned(node)
    await _every_fire_once(effects, jobs, first, node.clock.now_ms())


async def test_a_node_resumed_after_a_pause_past_its_lease_hands_out_nothing_stale(
    h: Harness,
) -> None:
    """The whole process pauses (like SIGSTOP) past its lease. On resume the wheel is full of
    overdue fires claimed under the old epoch; none may start with a token of that epoch: the
    node must first learn it lost its lease, and a new owner (here itself, with a new session)
    re-tokens them."""
    node = await h.start_node(session_ttl_s=2)
    await h.wait_all_owned(node)
    tokens: list[tuple[float, int]] = []
    worker = h.new_worker("w1", prefetch=0)

    @worker.handler("record")
    async def record(ctx: Any, payload: Any) -> None:
        tokens.append((time.time(), ctx.fencing_token))

    h.workers.append((worker, asyncio.create_task(worker.run())))
    client = await h.connect()
    for i in range(8):
        await client.create_job(f"paused-{i}", schedule="* * * * * *", handler="record",
                                misfire="catch_up", catch_up_limit=100)  # fmt: skip
    await eventually(lambda: asyncio.sleep(0, result=len(tokens)), lambda n: n >= 16)
    _, revision, _ = await node.kv.range(b"\x00", b"\x00", limit=1)
    time.sleep(3.0)
    resumed = time.time()
    await asyncio.sleep(3.0)
    stale = [tok for at, tok in tokens if at >= resumed and tok <= revision]
    assert not stale, f"started after the pause under tokens of the lost epoch: {stale}"
    assert any(at >= resumed for at, _ in tokens), "fires resume under the new session"


async def test_a_node_on_a_data_dir_still_held_says_so_in_one_line(
    etcd_server: EtcdProcess, etcd_prefix: bytes, tmp_path: Path
) -> None:
    """The second `schedd node` on a data dir the first still holds exits with a clear line
    (before, RocksDB's LOCK error came out as a traceback)."""
    schedd = str(Path(sys.executable).parent / "schedd")
    data = tmp_path / "shared-data"
    args = ["--etcd", etcd_server.endpoint, "--prefix", etcd_prefix.decode(),
            "--data-dir", str(data), "--partitions", "2"]  # fmt: skip
    first = await asyncio.create_subprocess_exec(
        schedd, "node", "--listen", f"127.0.0.1:{free_port()}", "--node-id", "a", *args,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert first.stderr is not None
        line = await asyncio.wait_for(first.stderr.readline(), 30)
        while b"listening" not in line:
            line = await asyncio.wait_for(first.stderr.readline(), 30)
        second = await asyncio.create_subprocess_exec(
            schedd, "node", "--listen", f"127.0.0.1:{free_port()}", "--node-id", "b", *args,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(second.communicate(), 30)
        text = err.decode().strip()
        assert second.returncode not in (0, None)
        assert "Traceback" not in text and len(text.splitlines()) == 1, text
        assert "in use by another process" in text and str(data) in text
    finally:
        first.terminate()
        await asyncio.wait_for(first.wait(), 30)
