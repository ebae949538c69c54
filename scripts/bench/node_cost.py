"""Micro-benchmark: node CPU per execution on the claim path and the result path.

Run: ``.venv/bin/python scripts/bench/node_cost.py [--jobs 20000] [--rounds 3] [--profile]``.

Starts a real etcd, creates ``--jobs`` ``@every 1h`` jobs in one partition, takes the partition's
owner key, and drives a real :class:`PartitionStore` / :class:`Partition` claim path and
the :class:`ResultRouter` result path without workers: each round moves a manual clock to
L before the next fire, claims every due entry (batched fenced txns, as the claim loop does),
then settles one synthetic ``worker_pb2.Result`` per execution (``--result-batch`` a call, the
tokens the claims minted) as the dispatcher would. Timings are per execution, per stage: process
CPU (every thread of this process; etcd's own CPU is not counted) for the totals and the txns,
the wall clock for the plain calls in between (pure CPU, and ~10x cheaper to read)::

    plan        _plan_fire + the claim item (new_execution, compares and ops)
    claim_txn   PartitionStore.apply* during claims (request build, gRPC, response decode)
    claimed     _claimed minus prepare (arm: Live, wheel timer, next due entry)
    prepare     Partition.prepare (the dispatch message, built at claim time)
    fire        the fire instant: the wheel's callback for every execution (overlap check,
                running index, submit), the dispatcher's pump onto one worker stream with
                credits for all, and each outgoing NodeMessage serialized as gRPC would
    decide      the settle policy (the result's final record; its item is built after)
    result_txn  PartitionStore.apply* during results
    after       result_total minus the above and GC (grouping, token checks, items, what
                follows a written result, acks)
    history     History.record
    claim_total / result_total / total   whole-path CPU, instrumentation included
                (``--bare``: no stage timers, totals only)
    gc          wall time in the cyclic GC (it runs inside whichever stage allocates): left out
                of the stages, counted in the totals; gc_full: full collections in the round

The first round also reads every job (``fetch``, not in the totals: steady state caches jobs).
A table goes to stderr; the last stdout line is JSON (the median round per stage).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schedd._clock import ManualClock
from schedd.dev import EtcdProcess
from schedd.dispatch import Dispatcher
from schedd.dispatch._session import WorkerSession
from schedd.history import History
from schedd.model import validate_new_job
from schedd.node import _part_results
from schedd.node._config import NodeConfig
from schedd.node._fire_policy import FirePolicy
from schedd.node._live import OwnedPartitions
from schedd.node._partition import Partition
from schedd.node._settling import ResultRouter
from schedd.store import KV, EtcdConfig, Fence, JobStore, Keys, PartitionStore, connect_etcd
from schedd.v1 import job_pb2, worker_pb2

STAGES = (
    "plan",
    "claim_txn",
    "claimed",
    "prepare",
    "fire",
    "decide",
    "result_txn",
    "after",
    "history",
)


class GcMeter:
    """Wall time inside the cyclic garbage collector (it runs inside whichever stage allocates)."""

    def __init__(self) -> None:
        self.ns = 0
        self.full = 0
        self._t = 0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t = time.perf_counter_ns()
        else:
            self.ns += time.perf_counter_ns() - self._t
            self.full += info["generation"] == 2


class Meter:
    """Nanoseconds per stage, GC pauses left out (``gc`` has them); nested stages are
    subtracted from their parent."""

    def __init__(self, gcm: GcMeter) -> None:
        self.gcm = gcm
        self.ns: dict[str, int] = dict.fromkeys(STAGES, 0)
        self.phase = "claim"
        self._stack: list[list[int]] = []

    def wrap(self, obj: Any, name: str, stage: Callable[[], str] | str) -> None:
        """Times calls of ``obj.name``: process CPU for coroutines (they wait on etcd), the
        cheaper wall clock for plain calls (pure CPU; process_time costs ~0.5 us a call)."""
        fn = getattr(obj, name)
        meter = self

        def pick() -> str:
            return stage() if callable(stage) else stage

        if asyncio.iscoroutinefunction(fn):

            async def awrapped(*a: Any, **kw: Any) -> Any:
                meter._stack.append([0, meter.gcm.ns])
                t = time.process_time_ns()
                try:
                    return await fn(*a, **kw)
                finally:
                    meter._close(pick(), t, time.process_time_ns)

            setattr(obj, name, awrapped)
        else:

            def wrapped(*a: Any, **kw: Any) -> Any:
                meter._stack.append([0, meter.gcm.ns])
                t = time.perf_counter_ns()
                try:
                    return fn(*a, **kw)
                finally:
                    meter._close(pick(), t, time.perf_counter_ns)

            setattr(obj, name, wrapped)

    def _close(self, stage: str, t: int, now: Callable[[], int]) -> None:
        inner, gc_at_start = self._stack.pop()
        spent = now() - t - (self.gcm.ns - gc_at_start)
        self.ns[stage] += spent - inner
        if self._stack:
            self._stack[-1][0] += spent


async def _setup(etcd: KV, keys: Keys, n: int, now_ms: int, payload: bytes) -> tuple[Fence, int]:
    store = JobStore(etcd, keys, partitions=1)
    jobs = []
    for i in range(n):
        spec = job_pb2.Job(
            id=f"bench-{i:06d}",
            tenant="acme",
            name=f"report {i}",
            schedule=job_pb2.Schedule(expr="@every 1h", timezone="UTC"),
            handler=job_pb2.HandlerTarget(name="bench.noop", queue="bench"),
            payload=payload,
        )
        jobs.append(validate_new_job(spec, now_ms=now_ms, id_factory=lambda: ""))
    created = await store.create_jobs(jobs, now_ms)
    bad = [c for c in created if not isinstance(c, tuple)]
    if bad:
        raise RuntimeError(f"create failed: {bad[0]}")
    owner = keys.owner_key(0)
    resp = await etcd.txn([etcd.ops.cmp_create(owner, 0)], [etcd.ops.put(owner, b"bench-node")])
    assert resp.succeeded
    kv = await etcd.get(owner)
    assert kv is not None
    return Fence(0, owner, kv.create_revision), now_ms + 3_600_000


async def _fire_all(runner: Partition, session: WorkerSession, bucket: int) -> int:
    """Fires every live execution as the wheel would (``bucket`` per callback), lets the pump
    run, and serializes what the session has ready. Returns the process CPU it took (ns)."""
    session.credits = len(runner.live)
    ids = list(runner.live)
    wire = 0
    t = time.process_time_ns()
    for i in range(0, len(ids), bucket):
        await runner._on_timers(ids[i : i + bucket])
    await asyncio.sleep(0)  # the pump runs on the next loop pass
    while (msg := session.take()) is not None:
        wire += len(msg.SerializeToString())
    spent = time.process_time_ns() - t
    assert wire > 0
    return spent


class _Events:
    """A partition's events go nowhere here: nothing is lost or fails in this benchmark."""

    def partition_lost(self, partition: int, reason: str) -> None:
        raise AssertionError(f"partition {partition} lost: {reason}")

    def partition_failed(self, partition: int, reason: str) -> None:
        raise AssertionError(f"partition {partition} failed: {reason}")


async def _run(args: argparse.Namespace, endpoint: str, data: Path) -> list[dict[str, float]]:
    etcd = await connect_etcd(EtcdConfig(endpoints=(endpoint,)))
    keys = Keys(b"/bench/node_cost/")
    created_ms = 1_700_000_000_000
    fence, first_fire = await _setup(etcd, keys, args.jobs, created_ms, b'{"report":"daily"}')
    config = NodeConfig(node_id="bench", partitions=1, data_dir=data)
    clock = ManualClock(first_fire - config.lead_ms)
    history = History(data / "history")
    table = OwnedPartitions(1)
    router = ResultRouter(table)
    dispatcher = Dispatcher("bench", router, clock=clock)
    store = PartitionStore(etcd, keys, fence, max_items=config.txn_items)
    policy = FirePolicy(config, clock)
    runner = Partition(store, config, clock, history, policy, dispatcher, _Events())
    table.add(runner)
    session = dispatcher.open_session(
        worker_pb2.Hello(
            worker_id="bench-worker", queues=["bench"], handlers=["bench.noop"], capacity=1 << 30
        )
    )

    if args.gc_freeze:
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 10)
    gcm = GcMeter()
    meter = Meter(gcm)
    if not args.bare:
        meter.wrap(runner.planner, "_plan_fire", "plan")
        meter.wrap(runner, "_claimed", "claimed")
        meter.wrap(runner, "prepare", "prepare")
        meter.wrap(store, "apply", lambda: f"{meter.phase}_txn")
        meter.wrap(_part_results, "settle", "decide")
        meter.wrap(history, "record", "history")

    profiler = cProfile.Profile() if args.profile else None
    rounds: list[dict[str, float]] = []
    fire = first_fire
    for rnd in range(args.rounds):
        clock.set_ms(fire - config.lead_ms)
        entries, _ = await store.load_due(fire)
        assert len(entries) == args.jobs, (len(entries), args.jobs)
        fetch_us = 0.0
        if rnd == 0:
            t = time.process_time_ns()
            runner.jobs.update(await store.fetch_jobs([e.job_id for e in entries]))
            fetch_us = (time.process_time_ns() - t) / 1000 / args.jobs
        meter.ns = dict.fromkeys(STAGES, 0)
        gcm.ns = gcm.full = 0
        if profiler:
            profiler.enable()

        meter.phase = "claim"
        t0, w0 = time.process_time_ns(), time.perf_counter()
        for i in range(0, len(entries), config.claim_batch):
            failed = await runner._claim(entries[i : i + config.claim_batch])
            assert not failed, failed[:3]
        claim_ns, claim_wall = time.process_time_ns() - t0, time.perf_counter() - w0
        assert len(runner.live) == args.jobs

        clock.set_ms(fire)
        fire_ns = await _fire_all(runner, session, args.fire_bucket)
        assert dispatcher.stats.dispatches_sent == (rnd + 1) * args.jobs, dispatcher.stats

        results = [
            worker_pb2.Result(
                execution_id=live.ex.id,
                fencing_token=live.ex.fencing_token,
                attempt=live.ex.attempt,
                outcome=worker_pb2.OUTCOME_SUCCEEDED,
                started_ms=fire,
                finished_ms=fire + 5,
                output=b'{"ok":true}',
            )
            for live in runner.live.values()
        ]
        clock.set_ms(fire + 10)
        meter.phase = "result"
        gc_before_results = gcm.ns
        t1, w1 = time.process_time_ns(), time.perf_counter()
        accepted = 0
        for i in range(0, len(results), args.result_batch):
            acks = await router.on_results("bench-worker", results[i : i + args.result_batch])
            accepted += sum(a.accepted for a in acks)
        result_ns, result_wall = time.process_time_ns() - t1, time.perf_counter() - w1
        result_gc_ns = gcm.ns - gc_before_results
        if profiler:
            profiler.disable()
        assert accepted == args.jobs, accepted
        assert not runner.live

        n = args.jobs
        row = {k: v / 1000 / n for k, v in meter.ns.items()}
        row["fire"] = fire_ns / 1000 / n
        if not args.bare:
            # GC pauses of the result phase sit in the totals and in ``gc``, not in stages.
            inside = meter.ns["decide"] + meter.ns["result_txn"] + meter.ns["history"]
            row["after"] = (result_ns - result_gc_ns - inside) / 1000 / n
        row["gc"] = gcm.ns / 1000 / n
        row["gc_full"] = gcm.full
        row["claim_total"] = claim_ns / 1000 / n
        row["result_total"] = result_ns / 1000 / n
        row["total"] = row["claim_total"] + row["fire"] + row["result_total"]
        row["claim_wall_per_s"] = n / claim_wall
        row["result_wall_per_s"] = n / result_wall
        if fetch_us:
            row["fetch"] = fetch_us
        rounds.append(row)
        fire += 3_600_000

    history.close()
    await etcd.close()
    if profiler:
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(35)
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--result-batch", type=int, default=256)
    parser.add_argument(
        "--fire-bucket", type=int, default=2048, help="executions per wheel callback at the fire"
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() after setup and gen0 threshold 50k (what a node could do at start)",
    )
    parser.add_argument("--bare", action="store_true", help="totals only, no stage timers")
    parser.add_argument("--profile", action="store_true", help="cProfile the rounds (stderr)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="schedd-node-cost-") as tmp:
        etcd = EtcdProcess(Path(tmp) / "etcd", name="node-cost")
        etcd.start()
        try:
            rounds = asyncio.run(_run(args, etcd.endpoint, Path(tmp) / "node"))
        finally:
            etcd.stop()
    keys = [*STAGES, "claim_total", "result_total", "total", "gc", "gc_full"]
    print(f"{'stage':<14}" + "".join(f"{'round ' + str(i):>10}" for i in range(len(rounds))),
          file=sys.stderr)  # fmt: skip
    for k in [*keys, "claim_wall_per_s", "result_wall_per_s"]:
        cells = "".join(f"{r[k]:>10.1f}" for r in rounds)
        print(f"{k:<14}{cells}", file=sys.stderr)
    if "fetch" in rounds[0]:
        print(f"{'fetch (r0)':<14}{rounds[0]['fetch']:>10.1f}", file=sys.stderr)
    summary: dict[str, Any] = {"jobs": args.jobs, "rounds": args.rounds, "unit": "us/execution"}
    for k in [*keys, "claim_wall_per_s", "result_wall_per_s"]:
        summary[k] = round(statistics.median(r[k] for r in rounds), 2)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
