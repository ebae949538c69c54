"""Executions sent ahead of their instant: held by the worker, started by its own timer."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import grpc.aio

from integration.test_worker_stream import (  # the stream tests' node and worker fixtures
    Node,
    NodeFactory,
    WorkerFactory,
    make_node,
    start_worker,
    wait_for,
)
from schedd import ManualClock
from schedd.dispatch import REASON_DISCONNECTED, DispatchConfig
from schedd.v1 import worker_pb2, worker_pb2_grpc
from schedd.worker import Context, Worker

__all__ = ["make_node", "start_worker"]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _held(node: Node, eid: str, start_at_ms: int, **kw: Any) -> worker_pb2.Dispatch:
    d = worker_pb2.Dispatch(
        execution_id=eid,
        job_id=f"job-{eid}",
        handler=kw.pop("handler", "rec"),
        queue="default",
        tenant="t",
        attempt=1,
        fencing_token=kw.pop("fencing_token", 1),
        start_at_ms=start_at_ms,
        **kw,
    )
    node.authority.tokens[eid] = d.fencing_token
    return d


def _recording(starts: dict[str, int], delay_s: float = 0.0) -> Any:
    def setup(w: Worker) -> None:
        async def rec(ctx: Context, payload: Any) -> None:
            starts[ctx.execution_id] = time.time_ns() // 1_000_000
            if delay_s:
                await asyncio.sleep(delay_s)

        w.add_handler("rec", rec)

    return setup


async def _holding(
    node: Node, start_worker: WorkerFactory, prefetch: int, delay_s: float = 0.0, **kw: Any
) -> tuple[dict[str, int], Any]:
    """A recording worker that asked for ``prefetch``, once its hold credits reached the node."""
    starts: dict[str, int] = {}
    run = await start_worker(node, setup=_recording(starts, delay_s), prefetch=prefetch, **kw)
    await wait_for(lambda: _session(node).hold_credits == prefetch, "credits")
    return starts, run


async def test_a_held_execution_starts_at_its_instant_not_when_it_arrives(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    starts, _ = await _holding(node, start_worker, 8)
    await wait_for(lambda: node.dispatcher.workers()[0].prefetch == 8, "hello")
    at = _now_ms() + 400
    refused = node.dispatcher.hold([_held(node, "e1", at), _held(node, "e2", at + 100)])
    assert refused == []
    await wait_for(lambda: node.dispatcher.workers()[0].held == 2, "two held")
    await asyncio.sleep(0.2)
    assert starts == {}  # arrived long ago, instant not yet come
    await wait_for(lambda: len(starts) == 2, "both started", timeout=5)
    assert at <= starts["e1"] <= at + 150
    assert at + 100 <= starts["e2"] <= at + 250
    await wait_for(lambda: len(node.authority.results) == 2, "results")
    assert {r.outcome for _, r in node.authority.results} == {worker_pb2.OUTCOME_SUCCEEDED}
    # the prefetch credits came back; the lease ran from the instant, nothing was lost
    await wait_for(lambda: _session(node).hold_credits == 8, "credits back")
    assert node.authority.lost == []


async def test_hold_is_refused_without_prefetch_credits(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    starts: dict[str, int] = {}
    at = _now_ms() + 60_000
    assert node.dispatcher.hold([_held(node, "none", at)]) != []  # no worker at all
    await start_worker(node, setup=_recording(starts), prefetch=0)
    assert [d.execution_id for d in node.dispatcher.hold([_held(node, "p0", at)])] == ["p0"]
    await start_worker(node, setup=_recording(starts), prefetch=2)
    await wait_for(lambda: _session(node, prefetch=2).hold_credits == 2, "credits")
    refused = node.dispatcher.hold([_held(node, f"x{i}", at) for i in range(3)])
    assert [d.execution_id for d in refused] == ["x2"]  # two credits, two held
    assert set(_session(node, prefetch=2).in_flight) == {"x0", "x1"}


async def test_a_cancelled_held_execution_never_runs_and_gives_its_credit_back(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    starts, _ = await _holding(node, start_worker, 4)
    at = _now_ms() + 300
    node.dispatcher.hold([_held(node, "c1", at), _held(node, "c2", at)])
    await wait_for(lambda: node.dispatcher.workers()[0].held == 2, "held")
    assert node.dispatcher.cancel("c1", 1, "job paused")
    node.dispatcher.forget(["c2"])  # the partition moved: the worker is told too
    await wait_for(lambda: len(node.authority.results) == 2, "two answers")
    assert {r.execution_id: r.outcome for _, r in node.authority.results} == {
        "c1": worker_pb2.OUTCOME_CANCELLED,
        "c2": worker_pb2.OUTCOME_CANCELLED,
    }
    await asyncio.sleep(max(0.0, (at - _now_ms()) / 1000) + 0.1)
    assert starts == {}
    await wait_for(lambda: _session(node).hold_credits == 4, "credits back")


async def test_held_executions_of_a_stream_that_ends_are_dropped_unstarted(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    starts, run = await _holding(node, start_worker, 4)
    at = _now_ms() + 400
    node.dispatcher.hold([_held(node, "s1", at)])
    await wait_for(lambda: node.dispatcher.workers()[0].held == 1, "held")
    node.dispatcher.close_session(_session(node))  # the node ends the stream
    await wait_for(lambda: len(node.authority.lost) == 1, "lost")
    assert node.authority.lost[0][1] == REASON_DISCONNECTED
    await wait_for(lambda: run.worker.held_count == 0, "dropped")
    await asyncio.sleep(max(0.0, (at - _now_ms()) / 1000) + 0.1)
    assert starts == {}  # the node hands it out again under a new token; never run here
    await wait_for(lambda: run.worker.holds.free + _conn_hold(run) == 4, "slots back")


async def test_held_executions_start_only_while_fewer_than_capacity_run(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    starts, _ = await _holding(node, start_worker, 8, delay_s=0.2, capacity=2)
    at = _now_ms() + 200
    node.dispatcher.hold([_held(node, f"k{i}", at) for i in range(6)])
    await wait_for(lambda: len(node.authority.results) == 6, "all done", timeout=10)
    order = sorted(starts.values())
    assert len(order) == 6
    # two at a time, 0.2 s each: three waves
    assert order[1] - order[0] < 100
    assert order[2] - order[0] >= 180
    assert order[4] - order[2] >= 180


async def test_shutdown_gives_held_executions_back_as_cancelled(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    starts, run = await _holding(node, start_worker, 4)
    node.dispatcher.hold([_held(node, "g1", _now_ms() + 60_000)])
    await wait_for(lambda: run.worker.held_count == 1, "held")
    await run.worker.stop()
    await wait_for(lambda: len(node.authority.results) == 1, "given back")
    r = node.authority.results[0][1]
    assert (r.execution_id, r.outcome) == ("g1", worker_pb2.OUTCOME_CANCELLED)
    assert starts == {}


async def test_held_executions_start_on_the_nodes_clock(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    """The node's clock is 10 minutes ahead of the worker's: the instant is the node's."""
    ahead_ms = 600_000
    clock = ManualClock(_now_ms() + ahead_ms)
    node = await make_node(clock=clock)
    starts, _ = await _holding(node, start_worker, 2)
    sent = _now_ms()
    node.dispatcher.hold([_held(node, "o1", clock.now_ms() + 300)])
    await wait_for(lambda: "o1" in starts, "started", timeout=5)
    assert 250 <= starts["o1"] - sent <= 600  # ~300 ms after, not 10 min early or late


async def test_bad_prefetch_fields_are_refused_with_invalid_argument(
    make_node: NodeFactory,
) -> None:
    node = await make_node()
    for msg in (
        worker_pb2.WorkerMessage(
            hello=worker_pb2.Hello(worker_id="x", queues=["q"], capacity=1, prefetch=-1)
        ),
        None,  # a prefetch grant from a worker that asked for none
    ):
        async with grpc.aio.insecure_channel(node.address) as ch:
            call = worker_pb2_grpc.WorkerStub(ch).Connect()
            if msg is not None:
                await call.write(msg)
                field = "hello.prefetch"
            else:
                hello = worker_pb2.Hello(worker_id="y", queues=["q"], capacity=1)
                await call.write(worker_pb2.WorkerMessage(hello=hello))
                await call.read()
                grant = worker_pb2.WorkerBatch(prefetch_credits=3)
                await call.write(worker_pb2.WorkerMessage(batch=grant))
                field = "batch.prefetch_credits"
            try:
                while True:
                    if await call.read() is grpc.aio.EOF:
                        break
            except grpc.aio.AioRpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert field in (e.details() or "")
            else:
                raise AssertionError("stream was not aborted")
            assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert node.dispatcher.workers() == []


def _session(node: Node, prefetch: int | None = None) -> Any:
    sessions = [
        s
        for s in node.dispatcher._sessions.values()
        if not s.closed and (prefetch is None or s.hello.prefetch == prefetch)
    ]
    assert len(sessions) == 1, sessions
    return sessions[0]


def _conn_hold(run: Any) -> int:
    return sum(c.hold_unused for c in run.worker._conns.values())


_ = DispatchConfig


async def test_a_held_execution_starts_only_within_its_nodes_latest_promise(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    """A node promises to hold its partitions until an instant and renews the promise while it
    is sure of its lease. One that stopped renewing (frozen, cut off from etcd) must not have
    its held work start after its promise: the worker gives it back unstarted."""
    node = await make_node()
    starts, _ = await _holding(node, start_worker, 4)
    promise = _now_ms() + 700  # the node's last promise; it renews no further
    node.dispatcher.live_until_ms = lambda: promise
    await asyncio.sleep(0.4)  # a reaper tick carries the promise to the worker
    inside, beyond = promise - 200, promise + 200
    node.dispatcher.hold([_held(node, "inside", inside), _held(node, "beyond", beyond)])
    await wait_for(lambda: len(node.authority.results) == 2, "two answers", timeout=5)
    outcomes = {r.execution_id: (r.outcome, r.error) for _, r in node.authority.results}
    assert outcomes["inside"][0] == worker_pb2.OUTCOME_SUCCEEDED
    assert outcomes["beyond"][0] == worker_pb2.OUTCOME_CANCELLED
    assert "no longer vouched" in outcomes["beyond"][1]
    assert set(starts) == {"inside"}
    await wait_for(lambda: _session(node).hold_credits == 4, "credits back")
