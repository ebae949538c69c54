"""The worker stream end to end: a real grpc.aio server with a Dispatcher, real Workers."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from schedd import ManualClock
from schedd.dispatch import (
    KEEPALIVE_SERVER_OPTIONS,
    REASON_DISCONNECTED,
    REASON_LEASE_EXPIRED,
    DispatchConfig,
    Dispatcher,
    InFlight,
)
from schedd.v1 import job_pb2, worker_pb2, worker_pb2_grpc
from schedd.worker import Context, PermanentError, Worker

FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]


async def wait_for(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll ``cond`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


@dataclass
class MemoryAuthority:
    """Tokens in a dict: a result is accepted iff its token is the current one."""

    tokens: dict[str, int] = field(default_factory=dict)
    started: list[worker_pb2.Started] = field(default_factory=list)
    heartbeats: list[worker_pb2.Heartbeat] = field(default_factory=list)
    results: list[tuple[str, worker_pb2.Result]] = field(default_factory=list)
    lost: list[tuple[InFlight, str]] = field(default_factory=list)

    async def on_started(self, worker_id: str, started: list[worker_pb2.Started]) -> None:
        self.started.extend(started)

    async def on_heartbeats(
        self, worker_id: str, heartbeats: list[worker_pb2.Heartbeat]
    ) -> list[str]:
        self.heartbeats.extend(heartbeats)
        return [
            h.execution_id for h in heartbeats if self.tokens.get(h.execution_id) != h.fencing_token
        ]

    async def on_results(
        self, worker_id: str, results: list[worker_pb2.Result]
    ) -> list[worker_pb2.ResultAck]:
        acks = []
        for r in results:
            self.results.append((worker_id, r))
            ok = self.tokens.get(r.execution_id) == r.fencing_token
            acks.append(
                worker_pb2.ResultAck(
                    execution_id=r.execution_id,
                    fencing_token=r.fencing_token,
                    accepted=ok,
                    code=0 if ok else FAILED_PRECONDITION,
                    message="" if ok else "stale token",
                )
            )
        return acks

    def on_reported(self, results: list[worker_pb2.Result]) -> None:
        pass

    async def on_lost(self, lost: list[InFlight], reason: str) -> None:
        self.lost.extend((f, reason) for f in lost)

    def results_for(self, eid: str) -> list[worker_pb2.Result]:
        return [r for _, r in self.results if r.execution_id == eid]


@dataclass
class Node:
    dispatcher: Dispatcher
    authority: MemoryAuthority
    address: str

    def submit(
        self, eid: str, handler: str = "echo", payload: Any = None, **kw: Any
    ) -> worker_pb2.Dispatch:
        kw.setdefault("fencing_token", 1)
        kw.setdefault("attempt", 1)
        kw.setdefault("queue", "default")
        kw.setdefault("tenant", "t")
        d = worker_pb2.Dispatch(
            execution_id=eid,
            job_id=f"job-{eid}",
            handler=handler,
            payload=b"" if payload is None else json.dumps(payload).encode(),
            **kw,
        )
        self.authority.tokens[eid] = d.fencing_token
        self.dispatcher.submit([d])
        return d


NodeFactory = Callable[..., Awaitable[Node]]


@pytest.fixture
async def make_node() -> AsyncIterator[NodeFactory]:
    made: list[tuple[grpc.aio.Server, Dispatcher]] = []

    async def make(config: DispatchConfig | None = None, clock: Any = None) -> Node:
        authority = MemoryAuthority()
        server = grpc.aio.server(options=KEEPALIVE_SERVER_OPTIONS)
        dispatcher = Dispatcher("node-1", authority, config=config or DispatchConfig(), clock=clock)
        dispatcher.add_to_server(server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        await dispatcher.start()
        made.append((server, dispatcher))
        return Node(dispatcher, authority, f"127.0.0.1:{port}")

    yield make
    for server, dispatcher in made:
        await dispatcher.stop()
        await server.stop(grace=0.5)


@dataclass
class Running:
    worker: Worker
    task: asyncio.Task[None]


WorkerFactory = Callable[..., Awaitable[Running]]


@pytest.fixture
async def start_worker(tmp_path: Path) -> AsyncIterator[WorkerFactory]:
    running: list[Running] = []

    async def start(
        node: Node, *, setup: Callable[[Worker], None] | None = None, wait: bool = True, **kw: Any
    ) -> Running:
        kw.setdefault("data_dir", tmp_path / f"w{len(running)}")
        kw.setdefault("worker_id", f"w{len(running)}")
        worker = Worker(node.address, **kw)
        if setup is not None:
            setup(worker)
        else:
            worker.add_handler("echo", _echo)
        task = asyncio.create_task(worker.run())
        r = Running(worker, task)
        running.append(r)
        if wait:
            wid = worker.worker_id
            await wait_for(
                lambda: any(s.worker_id == wid for s in node.dispatcher.workers()), "worker"
            )
        return r

    yield start
    for r in running:
        if not r.task.done():
            await r.worker.stop(graceful=False)
            await asyncio.wait({r.task}, timeout=10)
            r.task.cancel()
        await asyncio.gather(r.task, return_exceptions=True)


async def _echo(ctx: Context, payload: Any) -> Any:
    return payload


# ---- protocol -------------------------------------------------------------------------------


async def test_hello_is_answered_with_welcome(make_node: NodeFactory) -> None:
    clock = ManualClock(1_000_000)
    node = await make_node(
        DispatchConfig(heartbeat_interval_ms=1500, lease_timeout_ms=7000), clock=clock
    )
    async with grpc.aio.insecure_channel(node.address) as ch:
        call = worker_pb2_grpc.WorkerStub(ch).Connect()
        await call.write(
            worker_pb2.WorkerMessage(
                hello=worker_pb2.Hello(worker_id="x", queues=["default"], capacity=1)
            )
        )
        msg = await call.read()
        assert isinstance(msg, worker_pb2.NodeMessage)
        assert msg.welcome == worker_pb2.Welcome(
            node_id="node-1",
            heartbeat_interval_ms=1500,
            lease_timeout_ms=7000,
            now_ms=1_000_000,
            live_until_ms=1_000_000 + 365 * 86_400_000,  # a dispatcher with no session: no limit
        )
        await wait_for(lambda: len(node.dispatcher.workers()) == 1, "session")
        status = node.dispatcher.workers()[0]
        assert (status.worker_id, status.node_id, status.capacity) == ("x", "node-1", 1)
        call.cancel()


@pytest.mark.parametrize(
    ("first", "field_name"),
    [
        (worker_pb2.WorkerMessage(batch=worker_pb2.WorkerBatch(credits=1)), "hello"),
        (
            worker_pb2.WorkerMessage(hello=worker_pb2.Hello(queues=["q"], capacity=1)),
            "hello.worker_id",
        ),
        (
            worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id="w", queues=["q"])),
            "hello.capacity",
        ),
    ],
)
async def test_bad_first_message_aborts_with_invalid_argument(
    make_node: NodeFactory, first: worker_pb2.WorkerMessage, field_name: str
) -> None:
    node = await make_node()
    async with grpc.aio.insecure_channel(node.address) as ch:
        call = worker_pb2_grpc.WorkerStub(ch).Connect()
        await call.write(first)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call.read()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (err.value.details() or "").startswith(field_name)


async def test_unknown_message_kind_aborts_the_stream(make_node: NodeFactory) -> None:
    node = await make_node()
    async with grpc.aio.insecure_channel(node.address) as ch:
        call = worker_pb2_grpc.WorkerStub(ch).Connect()
        await call.write(
            worker_pb2.WorkerMessage(
                hello=worker_pb2.Hello(worker_id="x", queues=["q"], capacity=1)
            )
        )
        await call.read()
        await call.write(worker_pb2.WorkerMessage())
        with pytest.raises(grpc.aio.AioRpcError) as err:
            while True:
                await call.read()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "kind" in (err.value.details() or "")


# ---- the happy path, credits, batching, routing ---------------------------------------------


async def test_dispatch_runs_handler_and_result_is_acked(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    await start_worker(node)
    node.submit("e1", payload={"hello": "world"}, fencing_token=5)
    await wait_for(lambda: node.authority.results_for("e1"), "result")
    (r,) = node.authority.results_for("e1")
    assert r.outcome == worker_pb2.OUTCOME_SUCCEEDED
    assert json.loads(r.output) == {"hello": "world"}
    assert r.fencing_token == 5 and not r.from_ledger
    assert node.authority.started == []  # finished within one batch: folded into the Result
    assert node.dispatcher.in_flight() == {}
    await wait_for(lambda: node.dispatcher.stats.results_answered == 1, "answer")
    assert node.dispatcher.stats.acks_sent == 0  # accepted: nothing to tell the worker


async def test_credits_are_never_exceeded(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    active = 0
    peak = 0
    peak_in_flight = 0

    async def work(ctx: Context, payload: Any) -> int:
        nonlocal active, peak, peak_in_flight
        active += 1
        peak = max(peak, active)
        peak_in_flight = max(peak_in_flight, len(node.dispatcher.in_flight()))
        await asyncio.sleep(0.02)  # the handler's work, not a wait for a condition
        active -= 1
        return ctx.attempt

    await start_worker(node, setup=lambda w: w.add_handler("work", work), capacity=2)
    for i in range(10):
        node.submit(f"e{i}", handler="work")
    await wait_for(lambda: len(node.authority.results) == 10, "10 results")
    assert peak == 2
    assert peak_in_flight <= 2
    assert all(r.outcome == worker_pb2.OUTCOME_SUCCEEDED for _, r in node.authority.results)


async def test_many_dispatches_travel_in_one_message(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    for i in range(300):
        node.submit(f"e{i}")
    assert node.dispatcher.pending_count() == 300
    await start_worker(node, capacity=300)
    await wait_for(lambda: len(node.authority.results) == 300, "300 results")
    stats = node.dispatcher.stats
    assert stats.dispatches_sent == 300
    # 300 dispatches and 300 acks: far fewer messages than items, both ways.
    assert stats.node_messages_sent <= 30, stats
    assert stats.worker_batches_received <= 60, stats


async def test_routing_by_queue_and_handler(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()

    def only(name: str) -> Callable[[Worker], None]:
        return lambda w: w.add_handler(name, _echo)

    await start_worker(node, worker_id="qa", queues=["a"], setup=only("echo"))
    await start_worker(node, worker_id="qb", queues=["b"], setup=only("echo"))
    await start_worker(node, worker_id="qb-other", queues=["b"], setup=only("other"))
    for i in range(4):
        node.submit(f"a{i}", queue="a")
        node.submit(f"b{i}", queue="b")
    node.submit("o1", handler="other", queue="b")
    node.submit("nobody", handler="missing", queue="a")
    http = job_pb2.Job()
    http.http.SetInParent()
    node.dispatcher.submit(
        [worker_pb2.Dispatch(execution_id="h1", queue="a", target=http.SerializeToString())]
    )
    await wait_for(lambda: len(node.authority.results) == 9, "9 results")
    where = {r.execution_id: wid for wid, r in node.authority.results}
    assert {where[f"a{i}"] for i in range(4)} == {"qa"}
    assert {where[f"b{i}"] for i in range(4)} == {"qb"}
    assert where["o1"] == "qb-other"
    assert node.dispatcher.pending_count() == 2  # "missing" handler and the http job wait


async def test_tenants_take_turns_on_one_worker(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    for i in range(6):
        node.submit(f"big{i}", tenant="big")
    node.submit("small0", tenant="small")
    order: list[str] = []

    async def record(ctx: Context, payload: Any) -> None:
        order.append(ctx.execution_id)

    await start_worker(node, setup=lambda w: w.add_handler("echo", record), capacity=1)
    await wait_for(lambda: len(order) == 7, "7 runs")
    assert order.index("small0") == 1


# ---- failures: disconnect, leases, stale tokens ---------------------------------------------


async def _blocker(release: asyncio.Event) -> Callable[[Context, Any], Awaitable[str]]:
    async def block(ctx: Context, payload: Any) -> str:
        await release.wait()
        return "released"

    return block


async def test_worker_disconnect_reports_in_flight_lost(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    release = asyncio.Event()
    block = await _blocker(release)
    r = await start_worker(node, setup=lambda w: w.add_handler("block", block))
    node.submit("e1", handler="block")
    node.submit("e2", handler="block")
    await wait_for(lambda: len(node.authority.started) == 2, "started")
    r.task.cancel()  # abrupt: no results, the stream breaks
    await wait_for(lambda: len(node.authority.lost) == 2, "on_lost")
    assert {f.dispatch.execution_id for f, _ in node.authority.lost} == {"e1", "e2"}
    assert {reason for _, reason in node.authority.lost} == {REASON_DISCONNECTED}
    assert node.dispatcher.in_flight() == {}
    assert node.authority.results == []


async def test_lease_expiry_without_heartbeats_is_lost_and_cancelled(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    clock = ManualClock(1_000_000)
    node = await make_node(DispatchConfig(lease_timeout_ms=10_000), clock=clock)

    async def forever(ctx: Context, payload: Any) -> None:
        await asyncio.sleep(3600)

    await start_worker(
        node, setup=lambda w: w.add_handler("forever", forever), heartbeat_interval_s=3600
    )
    node.submit("e1", handler="forever")
    await wait_for(lambda: len(node.authority.started) == 1, "started")
    clock.advance(9.0)
    assert node.authority.lost == []
    clock.advance(2.0)
    await wait_for(lambda: len(node.authority.lost) == 1, "on_lost")
    flight, reason = node.authority.lost[0]
    assert reason == REASON_LEASE_EXPIRED and flight.dispatch.execution_id == "e1"
    assert node.dispatcher.stats.cancels_sent == 1
    await wait_for(lambda: node.authority.results_for("e1"), "cancelled result")
    assert node.authority.results_for("e1")[0].outcome == worker_pb2.OUTCOME_CANCELLED


async def test_heartbeats_extend_the_lease_of_a_long_job(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    clock = ManualClock(1_000_000)
    node = await make_node(DispatchConfig(lease_timeout_ms=10_000), clock=clock)
    release = asyncio.Event()
    block = await _blocker(release)
    await start_worker(
        node, setup=lambda w: w.add_handler("block", block), heartbeat_interval_s=0.05
    )
    node.submit("e1", handler="block")
    await wait_for(lambda: len(node.authority.started) == 1, "started")
    for _ in range(6):  # 30 s of lease time, three leases' worth
        seen = len(node.authority.heartbeats)
        clock.advance(5.0)
        await wait_for(lambda s=seen: len(node.authority.heartbeats) > s + 1, "heartbeat")
    assert node.authority.lost == []
    release.set()
    await wait_for(lambda: node.authority.results_for("e1"), "result")
    assert node.authority.results_for("e1")[0].outcome == worker_pb2.OUTCOME_SUCCEEDED


async def test_stale_token_result_is_refused_and_not_retried(
    make_node: NodeFactory, start_worker: WorkerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    node = await make_node()
    await start_worker(node)
    caplog.set_level(logging.WARNING, logger="schedd.worker")
    node.submit("e1", fencing_token=3)
    node.authority.tokens["e1"] = 4  # the node re-tokened it meanwhile
    await wait_for(lambda: "refused result of e1" in caplog.text, "refusal logged")
    node.submit("e2")  # the stream goes on; e1 is not sent again
    await wait_for(lambda: node.authority.results_for("e2"), "e2")
    assert len(node.authority.results_for("e1")) == 1


async def test_stale_heartbeat_gets_a_cancel(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()

    async def forever(ctx: Context, payload: Any) -> None:
        await asyncio.sleep(3600)

    await start_worker(
        node, setup=lambda w: w.add_handler("forever", forever), heartbeat_interval_s=0.05
    )
    node.submit("e1", handler="forever", fencing_token=1)
    await wait_for(lambda: len(node.authority.started) == 1, "started")
    node.authority.tokens["e1"] = 2
    await wait_for(lambda: node.authority.results_for("e1"), "cancelled result")
    assert node.authority.results_for("e1")[0].outcome == worker_pb2.OUTCOME_CANCELLED


# ---- the ledger --------------------------------------------------------------------------------


async def test_redelivery_after_success_is_answered_from_the_ledger(
    make_node: NodeFactory, start_worker: WorkerFactory, tmp_path: Path
) -> None:
    node = await make_node()
    calls = 0

    async def count(ctx: Context, payload: Any) -> dict[str, int]:
        nonlocal calls
        calls += 1
        return {"n": calls}

    data_dir = tmp_path / "stable"
    r = await start_worker(
        node, setup=lambda w: w.add_handler("count", count), data_dir=data_dir, worker_id="w"
    )
    node.submit("e1", handler="count", fencing_token=1)
    await wait_for(lambda: len(node.authority.results_for("e1")) == 1, "first result")
    node.submit("e1", handler="count", fencing_token=2)
    await wait_for(lambda: len(node.authority.results_for("e1")) == 2, "ledger answer")
    second = node.authority.results_for("e1")[1]
    assert second.from_ledger and second.fencing_token == 2
    assert json.loads(second.output) == {"n": 1}
    assert calls == 1
    # across a restart on the same data_dir
    await r.worker.stop()
    await asyncio.wait_for(r.task, 10)
    await start_worker(
        node, setup=lambda w: w.add_handler("count", count), data_dir=data_dir, worker_id="w"
    )
    node.submit("e1", handler="count", fencing_token=3)
    await wait_for(
        lambda: len(node.authority.results_for("e1")) == 3, "ledger answer after restart"
    )
    third = node.authority.results_for("e1")[2]
    assert (
        third.from_ledger
        and third.fencing_token == 3
        and third.outcome == worker_pb2.OUTCOME_SUCCEEDED
    )
    assert node.authority.tokens["e1"] == 3 and calls == 1


async def test_failed_attempt_runs_again_as_a_new_attempt(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    from schedd.dev import demo_handlers

    node = await make_node()
    await start_worker(node, setup=demo_handlers.register)
    node.submit("e1", handler="flaky", payload={"failures": 1}, attempt=1, fencing_token=1)
    await wait_for(lambda: node.authority.results_for("e1"), "attempt 1")
    node.submit("e1", handler="flaky", payload={"failures": 1}, attempt=1, fencing_token=2)
    await wait_for(lambda: len(node.authority.results_for("e1")) == 2, "same attempt again")
    node.submit("e1", handler="flaky", payload={"failures": 1}, attempt=2, fencing_token=3)
    await wait_for(lambda: len(node.authority.results_for("e1")) == 3, "attempt 2")
    first, again, second = node.authority.results_for("e1")
    assert first.outcome == worker_pb2.OUTCOME_FAILED and "RuntimeError: flaky" in first.error
    assert again.from_ledger and again.outcome == worker_pb2.OUTCOME_FAILED
    assert second.outcome == worker_pb2.OUTCOME_SUCCEEDED and not second.from_ledger
    assert json.loads(second.output) == {"attempt": 2}


# ---- handlers: sync, errors, timeouts, checkpoints ---------------------------------------------


async def test_sync_handler_runs_in_the_thread_pool(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    threads: list[str] = []

    def blocking(ctx: Context, payload: Any) -> dict[str, Any]:
        threads.append(threading.current_thread().name)
        time.sleep(0.05)  # blocking work is what the pool is for
        return {"job": ctx.job_id, "tenant": ctx.tenant, "year": ctx.scheduled_time.year}

    await start_worker(node, setup=lambda w: w.add_handler("blocking", blocking))
    node.submit("e1", handler="blocking", tenant="acme", scheduled_ms=1_700_000_000_000)
    await wait_for(lambda: node.authority.results_for("e1"), "result")
    r = node.authority.results_for("e1")[0]
    assert json.loads(r.output) == {"job": "job-e1", "tenant": "acme", "year": 2023}
    assert threads and threads[0].startswith("schedd-h")


async def test_errors_map_to_outcomes(make_node: NodeFactory, start_worker: WorkerFactory) -> None:
    node = await make_node()

    async def perm(ctx: Context, payload: Any) -> None:
        raise PermanentError("bad input")

    async def unjsonable(ctx: Context, payload: Any) -> object:
        return object()

    def setup(w: Worker) -> None:
        w.add_handler("perm", perm)
        w.add_handler("unjsonable", unjsonable)
        w.add_handler("echo", _echo)

    await start_worker(node, setup=setup)
    node.submit("p", handler="perm")
    node.submit("u", handler="unjsonable")
    node.dispatcher.submit(
        [
            worker_pb2.Dispatch(
                execution_id="raw", handler="echo", queue="default", payload=b"\xff\x00"
            )
        ]
    )
    await wait_for(lambda: len(node.authority.results) == 3, "results")
    assert node.authority.results_for("p")[0].outcome == worker_pb2.OUTCOME_FAILED_PERMANENT
    assert node.authority.results_for("p")[0].error == "PermanentError: bad input"
    assert node.authority.results_for("u")[0].outcome == worker_pb2.OUTCOME_FAILED
    assert node.authority.results_for("raw")[0].output == b"\xff\x00"  # bytes in, bytes out


async def test_deadline_times_out_the_handler(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    cancelled = asyncio.Event()

    async def slow(ctx: Context, payload: Any) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await start_worker(node, setup=lambda w: w.add_handler("slow", slow))
    node.submit("e1", handler="slow", deadline_ms=int(time.time() * 1000) + 200)
    await wait_for(lambda: node.authority.results_for("e1"), "result")
    assert node.authority.results_for("e1")[0].outcome == worker_pb2.OUTCOME_TIMED_OUT
    assert cancelled.is_set()


async def test_checkpoint_travels_with_heartbeat_and_is_loaded_on_redelivery(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    loaded: list[Any] = []

    async def resumable(ctx: Context, payload: Any) -> Any:
        loaded.append(ctx.load_checkpoint())
        ctx.save_checkpoint({"done": 3})
        await ctx.heartbeat()
        await asyncio.sleep(3600)  # cancelled by the node below

    await start_worker(node, setup=lambda w: w.add_handler("resumable", resumable))
    node.submit("e1", handler="resumable", checkpoint=b'{"done": 1}', has_checkpoint=True)
    await wait_for(
        lambda: any(h.has_checkpoint for h in node.authority.heartbeats), "checkpoint heartbeat"
    )
    hb = next(h for h in node.authority.heartbeats if h.has_checkpoint)
    assert json.loads(hb.checkpoint) == {"done": 3}
    assert loaded == [{"done": 1}]
    assert node.dispatcher.cancel("e1", 0, "test")
    await wait_for(lambda: node.authority.results_for("e1"), "cancelled")
    node.submit("e1", handler="resumable", fencing_token=2)  # no checkpoint from the node
    await wait_for(lambda: len(loaded) == 2, "second run")
    assert loaded[1] == {"done": 3}  # from the local store


# ---- shutdown ----------------------------------------------------------------------------------


async def test_graceful_stop_drains_running_handlers(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    release = asyncio.Event()
    block = await _blocker(release)
    r = await start_worker(node, setup=lambda w: w.add_handler("block", block))
    node.submit("e1", handler="block")
    await wait_for(lambda: len(node.authority.started) == 1, "started")
    stopping = asyncio.create_task(r.worker.stop(graceful=True))
    await wait_for(lambda: not r.worker.pool.accepting, "stop begun")
    node.submit("late", handler="block")  # refused without running: the worker is stopping
    await wait_for(lambda: node.authority.results_for("late"), "late refused")
    assert node.authority.results_for("late")[0].outcome == worker_pb2.OUTCOME_CANCELLED
    assert not stopping.done()
    release.set()
    await asyncio.wait_for(stopping, 10)
    await asyncio.wait_for(r.task, 10)
    assert node.authority.results_for("e1")[0].outcome == worker_pb2.OUTCOME_SUCCEEDED
    assert node.authority.lost == []


async def test_stop_past_the_timeout_cancels_the_rest(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()

    async def forever(ctx: Context, payload: Any) -> None:
        await asyncio.sleep(3600)

    r = await start_worker(
        node, setup=lambda w: w.add_handler("forever", forever), shutdown_timeout_s=0.2
    )
    node.submit("e1", handler="forever")
    await wait_for(lambda: len(node.authority.started) == 1, "started")
    await r.worker.stop(graceful=True)
    await asyncio.wait_for(r.task, 10)
    assert node.authority.results_for("e1")[0].outcome == worker_pb2.OUTCOME_CANCELLED
    assert node.authority.lost == []


# ---- a real worker process -----------------------------------------------------------------------

_WORKER_SCRIPT = textwrap.dedent(
    """
    import sys
    from schedd.worker import Worker
    from schedd.dev import demo_handlers
    w = Worker(sys.argv[1], worker_id="proc", data_dir=sys.argv[2])
    demo_handlers.register(w)
    w.run_sync()
    """
)


async def test_sigkill_of_a_worker_process_reports_lost(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = await make_node()
    proc = subprocess.Popen(
        [sys.executable, "-c", _WORKER_SCRIPT, node.address, str(tmp_path / "proc")],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        await wait_for(
            lambda: any(s.worker_id == "proc" for s in node.dispatcher.workers()),
            "process worker",
            20,
        )
        node.submit("e1", handler="sleep", payload={"seconds": 60})
        await wait_for(lambda: len(node.authority.started) == 1, "started")
        proc.send_signal(signal.SIGKILL)
        await wait_for(lambda: len(node.authority.lost) == 1, "on_lost", 15)
        assert node.authority.lost[0][0].dispatch.execution_id == "e1"
        assert node.authority.lost[0][1] == REASON_DISCONNECTED
    finally:
        proc.kill()
        proc.wait(10)
