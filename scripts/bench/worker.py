#!/usr/bin/env python3
"""Micro-benchmark of the worker's per-execution cost, over a real gRPC stream.

Usage: ``.venv/bin/python scripts/bench/worker.py [--sizes 10000,100000] [--repeat 1]``

The parent process is a stand-in node: a grpc.aio server on 127.0.0.1 (a free port) that
implements ``Worker.Connect`` the way ``schedd.dispatch`` speaks it (Hello -> Welcome; credits
arrive in WorkerBatch; NodeBatch messages of up to 512 items, dispatches first, then one
ResultAck per result). All N dispatches are due at once and built before the clock starts (the
real node builds them at claim time); the node sends them as fast as the worker's credits allow.

The worker runs in a child process (this file with ``--child``), so node and worker each get a
core. Variants:

* ``async``: a real :class:`schedd.worker.Worker` with a no-op ``async def`` handler;
* ``suspend``: an async handler that suspends once (``await asyncio.sleep(0)``), so its
  deadline, heartbeats and cancellation are armed as for any handler that awaits I/O;
* ``sync``: the same with a no-op plain ``def`` handler (run in the worker's thread pool);
* ``held``: the async no-op, but every dispatch is sent ahead of its instant with prefetch
  credits (``start_at_ms`` = the instant, ``HELD_LEAD_S`` after the worker connected, the
  worker's prefetch window N): the worker holds them and starts them from its own timer, as
  it does for a burst the node sent ahead. Start lag counts from the instant;
* ``echo``: the floor, a bare grpc.aio client that answers each NodeBatch with one WorkerBatch
  carrying a Started and a Result per dispatch plus the credits back, no handler, no ledger.

Each handler (and the echo client, per batch) records ``time.time_ns()`` at its start; the
child writes them to a file when it exits. Figures per (variant, N):

* ``dispatch_per_s``: N / (last dispatch written - first dispatch written), on the node;
* ``starts_per_s``: N / (last handler start - first handler start);
* ``all_results_s``: first dispatch written (for ``held``: the instant) -> last result read;
* ``start_lag_ms_p50/p99/max``: handler start minus the first dispatch written (all N are due
  then, so this is the latency the end-to-end benchmark measures, less the node's own part;
  for ``held``, minus the instant);
* ``vs_echo``: all_results_s of the echo floor / this variant's (1.0 = as cheap as the stream).

With ``--repeat R`` each case runs R times and the median (by all_results_s) is reported.
The human table goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from schedd.v1 import worker_pb2, worker_pb2_grpc

MAX_BATCH = 512
VARIANTS = ("echo", "async", "suspend", "sync", "held")
#: For ``held``: the instant is this long after the worker connected (all N are sent by then).
HELD_LEAD_S = 3.0


# ---- the node side (parent) ---------------------------------------------------------------------


@dataclass
class Run:
    """One measurement: the dispatches to send and what the node saw."""

    dispatches: list[worker_pb2.Dispatch]
    credits: int = 0
    #: For ``held``: the instant every dispatch starts at (0: sent due now, with run credits).
    start_at_ms: int = 0
    next_index: int = 0
    results: int = 0
    acks: list[worker_pb2.ResultAck] = field(default_factory=list)
    first_sent_ns: int = 0
    last_sent_ns: int = 0
    last_result_ns: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    connected: asyncio.Event = field(default_factory=asyncio.Event)


class BenchNode(worker_pb2_grpc.WorkerServicer):
    """Serves one :class:`Run` to whichever worker connects."""

    def __init__(self) -> None:
        self.run: Run | None = None

    async def Connect(
        self,
        request_iterator: AsyncIterator[worker_pb2.WorkerMessage],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[worker_pb2.NodeMessage]:
        run = self.run
        assert run is not None
        first = await request_iterator.__anext__()
        assert first.WhichOneof("kind") == "hello", first
        yield worker_pb2.NodeMessage(
            welcome=worker_pb2.Welcome(
                node_id="bench-node",
                heartbeat_interval_ms=2000,
                lease_timeout_ms=10_000,
                now_ms=time.time_ns() // 1_000_000,
                live_until_ms=time.time_ns() // 1_000_000 + 3_600_000,  # held starts allowed
            )
        )
        if run.start_at_ms:
            run.start_at_ms = time.time_ns() // 1_000_000 + int(HELD_LEAD_S * 1000)
            for d in run.dispatches:
                d.start_at_ms = run.start_at_ms
        run.connected.set()
        reader = asyncio.create_task(self._read(run, request_iterator))
        try:
            while not reader.done():
                await run.wake.wait()
                run.wake.clear()
                while (msg := self._next_message(run)) is not None:
                    yield msg
        finally:
            reader.cancel()

    @staticmethod
    def _next_message(run: Run) -> worker_pb2.NodeMessage | None:
        n = min(run.credits, MAX_BATCH, len(run.dispatches) - run.next_index)
        n_acks = min(len(run.acks), MAX_BATCH - max(n, 0))
        if n <= 0 and not n_acks:
            return None
        batch = worker_pb2.NodeBatch()
        if n > 0:
            i = run.next_index
            batch.dispatches.extend(run.dispatches[i : i + n])
            run.next_index += n
            run.credits -= n
        if n_acks:
            batch.acks.extend(run.acks[:n_acks])
            del run.acks[:n_acks]
        if n > 0:
            now = time.time_ns()
            run.first_sent_ns = run.first_sent_ns or now
            run.last_sent_ns = now
        run.messages_sent += 1
        return worker_pb2.NodeMessage(batch=batch)

    @staticmethod
    async def _read(run: Run, it: AsyncIterator[worker_pb2.WorkerMessage]) -> None:
        try:
            async for msg in it:
                run.messages_received += 1
                b = msg.batch
                run.credits += b.prefetch_credits if run.start_at_ms else b.credits
                for r in b.results:
                    run.acks.append(
                        worker_pb2.ResultAck(
                            execution_id=r.execution_id,
                            fencing_token=r.fencing_token,
                            accepted=True,
                        )
                    )
                if b.results:
                    run.results += len(b.results)
                    run.last_result_ns = time.time_ns()
                    if run.results >= len(run.dispatches):
                        run.done.set()
                run.wake.set()
        finally:
            run.wake.set()


def make_dispatches(n: int, tag: str) -> list[worker_pb2.Dispatch]:
    """N dispatches shaped like the node's (deadline, payload, max attempts), all due now."""
    now_ms = int(time.time() * 1000)
    sched = (now_ms // 1000) * 1000
    return [
        worker_pb2.Dispatch(
            execution_id=f"{tag}-job{i:06d}:{sched}",
            job_id=f"{tag}-job{i:06d}",
            tenant="bench",
            scheduled_ms=sched,
            attempt=1,
            fencing_token=1000 + i,
            queue="default",
            handler="noop",
            payload=b'{"i":%d}' % i,
            deadline_ms=now_ms + 300_000,
            max_attempts=3,
        )
        for i in range(n)
    ]


@dataclass
class Figures:
    variant: str
    n: int
    dispatch_per_s: float
    starts_per_s: float
    all_results_s: float
    start_lag_ms_p50: float
    start_lag_ms_p99: float
    start_lag_ms_max: float
    node_messages: int
    worker_messages: int


async def run_case(
    variant: str, n: int, capacity: int, tag: str, spy: str | None, tune_gc: bool
) -> Figures:
    node = BenchNode()
    server = grpc.aio.server()
    worker_pb2_grpc.add_WorkerServicer_to_server(node, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    run = Run(make_dispatches(n, tag), start_at_ms=1 if variant == "held" else 0)
    node.run = run
    with tempfile.TemporaryDirectory(prefix="schedd-bench-worker-") as tmp:
        out = Path(tmp) / "starts.json"
        cmd = [
            sys.executable,
            __file__,
            "--child",
            variant,
            "--address",
            f"127.0.0.1:{port}",
            "--capacity",
            str(capacity),
            "--prefetch",
            str(n if variant == "held" else 0),
            "--out",
            str(out),
            "--data-dir",
            str(Path(tmp) / "worker"),
            *(["--tune-gc"] if tune_gc else []),
        ]
        proc = subprocess.Popen(cmd)
        spying = None
        if spy:  # py-spy attaches to the child and ends when it exits
            spying = subprocess.Popen(
                [_py_spy(), "record", "-r", "250", "-f", "raw", "-o", spy, "-p", str(proc.pid)],
                stdout=subprocess.DEVNULL,
            )
        try:
            await asyncio.wait_for(run.connected.wait(), 60)
            await asyncio.wait_for(run.done.wait(), 600)
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            await server.stop(grace=0.5)
            if spying is not None:
                await asyncio.to_thread(spying.wait, 60)
        starts = sorted(json.loads(out.read_text()))
    return _figures(variant, n, run, starts)


def _py_spy() -> str:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else "py-spy"


def _figures(variant: str, n: int, run: Run, starts: list[int]) -> Figures:
    assert len(starts) == n, (variant, len(starts), n)
    origin_ns = run.start_at_ms * 1_000_000 if run.start_at_ms else run.first_sent_ns
    lags = [(s - origin_ns) / 1e6 for s in starts]
    start_span = max(1, starts[-1] - starts[0]) / 1e9
    send_span = max(1, run.last_sent_ns - run.first_sent_ns) / 1e9
    return Figures(
        variant=variant,
        n=n,
        dispatch_per_s=round(n / send_span),
        starts_per_s=round(n / start_span),
        all_results_s=round((run.last_result_ns - origin_ns) / 1e9, 4),
        start_lag_ms_p50=round(lags[len(lags) // 2], 1),
        start_lag_ms_p99=round(lags[min(len(lags) - 1, int(len(lags) * 0.99))], 1),
        start_lag_ms_max=round(lags[-1], 1),
        node_messages=run.messages_sent,
        worker_messages=run.messages_received,
    )


async def main_parent(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in args.sizes.split(",")]
    variants = args.variants.split(",")
    table: list[Figures] = []
    for n in sizes:
        for variant in variants:
            reps = []
            for r in range(args.repeat):
                spy = args.py_spy if variant != "echo" else None
                reps.append(
                    await run_case(variant, n, args.capacity, f"{variant}{r}", spy, args.tune_gc)
                )
            reps.sort(key=lambda f: f.all_results_s)
            table.append(reps[len(reps) // 2])
            f = table[-1]
            print(
                f"{f.variant:>6} n={f.n:>7}  dispatch/s {f.dispatch_per_s:>8.0f}  "
                f"starts/s {f.starts_per_s:>8.0f}  all results {f.all_results_s:7.3f} s  "
                f"start lag p50/p99/max {f.start_lag_ms_p50:.0f}/{f.start_lag_ms_p99:.0f}/"
                f"{f.start_lag_ms_max:.0f} ms  msgs {f.node_messages}/{f.worker_messages}",
                file=sys.stderr,
            )
    floor = {f.n: f.all_results_s for f in table if f.variant == "echo"}
    rows = []
    for f in table:
        row = dict(f.__dict__)
        if f.n in floor and f.all_results_s > 0:
            row["vs_echo"] = round(floor[f.n] / f.all_results_s, 3)
        rows.append(row)
    return {
        "bench": "worker",
        "capacity": args.capacity,
        "repeat": args.repeat,
        "tune_gc": args.tune_gc,
        "results": rows,
    }


# ---- the worker side (child) ------------------------------------------------------------------


def child_worker(args: argparse.Namespace) -> None:
    from schedd.worker import Context, Worker

    starts: list[int] = []
    record = starts.append
    now_ns = time.time_ns
    worker = Worker(
        args.address,
        worker_id="bench",
        capacity=args.capacity,
        prefetch=args.prefetch,
        data_dir=args.data_dir,
    )
    if args.child in ("async", "held"):

        async def noop(ctx: Context, payload: Any) -> None:
            record(now_ns())
            _ = ctx.execution_id

        worker.add_handler("noop", noop)
    elif args.child == "suspend":

        async def suspends(ctx: Context, payload: Any) -> None:
            record(now_ns())
            await asyncio.sleep(0)
            _ = ctx.execution_id

        worker.add_handler("noop", suspends)
    else:

        def noop_sync(ctx: Context, payload: Any) -> None:
            record(now_ns())  # list.append is atomic: safe from the pool's threads
            _ = ctx.execution_id

        worker.add_handler("noop", noop_sync)
    if args.tune_gc:
        from schedd._gc import tune_gc

        tune_gc()  # what `schedd worker` does at start
    profile = os.environ.get("BENCH_WORKER_CPROFILE")
    if profile:
        import cProfile

        with cProfile.Profile() as prof:
            worker.run_sync()
        prof.dump_stats(profile)
    else:
        worker.run_sync()
    Path(args.out).write_text(json.dumps(starts))


async def child_echo(args: argparse.Namespace) -> None:
    starts: list[int] = []
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with grpc.aio.insecure_channel(args.address) as channel:
        call = worker_pb2_grpc.WorkerStub(channel).Connect()
        hello = worker_pb2.Hello(
            worker_id="echo", queues=["default"], handlers=["noop"], capacity=args.capacity
        )
        await call.write(worker_pb2.WorkerMessage(hello=hello))
        await call.read()
        await call.write(
            worker_pb2.WorkerMessage(batch=worker_pb2.WorkerBatch(credits=args.capacity))
        )
        reading = asyncio.ensure_future(_echo_loop(call, starts))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
        reading.cancel()
        stopping.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await reading
        call.cancel()
    Path(args.out).write_text(json.dumps(starts))


async def _echo_loop(call: Any, starts: list[int]) -> None:
    succeeded = worker_pb2.OUTCOME_SUCCEEDED
    while True:
        msg = await call.read()
        if msg is grpc.aio.EOF:
            return
        ds = msg.batch.dispatches
        if not ds:
            continue
        now = time.time_ns()
        starts.extend([now] * len(ds))
        now_ms = now // 1_000_000
        out = worker_pb2.WorkerBatch(credits=len(ds))
        for d in ds:
            out.started.add(
                execution_id=d.execution_id, fencing_token=d.fencing_token, started_ms=now_ms
            )
            out.results.add(
                execution_id=d.execution_id,
                fencing_token=d.fencing_token,
                attempt=d.attempt,
                outcome=succeeded,
                output=b"null",
                started_ms=now_ms,
                finished_ms=now_ms,
            )
        await call.write(worker_pb2.WorkerMessage(batch=out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--capacity", type=int, default=4096, help="the worker's capacity")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--tune-gc", action="store_true", help="the worker child tunes its GC as `schedd worker`"
    )
    ap.add_argument("--py-spy", help="record the worker child with py-spy (raw) to this file")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--address", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--prefetch", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "echo":
        asyncio.run(child_echo(args))
    elif args.child is not None:
        child_worker(args)
    else:
        summary = asyncio.run(main_parent(args))
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
