"""How the worker runs an attempt, end to end over real gRPC and a real RocksDB ledger:
handlers that finish on their first step, handlers that suspend, deadlines, cancels,
heartbeats and the ledger, for async and sync handlers."""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from typing import Any

from integration.test_worker_stream import (  # the stream tests' node and worker fixtures
    Node,
    NodeFactory,
    WorkerFactory,
    make_node,
    start_worker,
    wait_for,
)
from schedd.v1 import worker_pb2
from schedd.worker import Context, PermanentError, Worker
from schedd.worker._eager import EagerTask

__all__ = ["make_node", "start_worker"]  # fixtures, used by name

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _result(node: Node, eid: str) -> worker_pb2.Result:
    await wait_for(lambda: node.authority.results_for(eid), f"result of {eid}")
    return node.authority.results_for(eid)[0]


async def test_started_is_sent_while_a_handler_runs_and_folded_when_it_is_quick(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    gate = asyncio.Event()

    async def slow(ctx: Context, payload: Any) -> Any:
        await gate.wait()
        return "done"

    await start_worker(node, setup=lambda w: w.add_handler("slow", slow))
    node.submit("e1", handler="slow", deadline_ms=_now_ms() + 60_000)
    await wait_for(lambda: [s.execution_id for s in node.authority.started] == ["e1"], "Started")
    assert node.authority.results_for("e1") == []  # Started left on its own, while it runs
    gate.set()
    res = await _result(node, "e1")
    assert res.outcome == worker_pb2.OUTCOME_SUCCEEDED and res.started_ms > 0
    assert [s.execution_id for s in node.authority.started] == ["e1"]  # not sent twice


async def test_a_handler_that_never_suspends_is_settled_at_once(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    tasks: list[Any] = []

    async def quick(ctx: Context, payload: Any) -> Any:
        tasks.append(asyncio.current_task())
        return {"got": payload}

    r = await start_worker(
        node, setup=lambda w: w.add_handler("quick", quick), heartbeat_interval_s=0.05
    )
    node.submit("e1", handler="quick", payload=[1, 2], deadline_ms=_now_ms() + 60_000)
    res = await _result(node, "e1")
    assert res.outcome == worker_pb2.OUTCOME_SUCCEEDED and json.loads(res.output) == {"got": [1, 2]}
    assert res.started_ms > 0 and res.finished_ms >= res.started_ms
    # Its Started would have left in the same batch as its Result: folded into the Result.
    assert node.authority.started == []
    (task,) = tasks
    assert isinstance(task, EagerTask) and task.done()
    assert r.worker._attempts.running == {}
    await asyncio.sleep(0.2)  # five heartbeat intervals: none for a finished attempt
    assert node.authority.heartbeats == []


async def test_a_handler_that_suspends_then_finishes(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    release = asyncio.Event()
    tasks: list[Any] = []

    async def waits(ctx: Context, payload: Any) -> str:
        tasks.append(asyncio.current_task())
        VAR.set(ctx.execution_id)
        await release.wait()
        tasks.append(asyncio.current_task())
        return VAR.get()

    async def reads_var(ctx: Context, payload: Any) -> str:
        return VAR.get()

    def setup(w: Worker) -> None:
        w.add_handler("waits", waits)
        w.add_handler("reads_var", reads_var)

    r = await start_worker(node, setup=setup)
    node.submit("e1", handler="waits", deadline_ms=_now_ms() + 60_000)
    await wait_for(lambda: "e1" in r.worker._attempts.running, "e1 running")
    node.submit("e2", handler="reads_var")  # a context variable set by e1 does not leak
    assert json.loads((await _result(node, "e2")).output) == "unset"
    release.set()
    res = await _result(node, "e1")
    assert res.outcome == worker_pb2.OUTCOME_SUCCEEDED and json.loads(res.output) == "e1"
    assert tasks[0] is tasks[1]
    assert r.worker._attempts.running == {}


async def test_a_suspended_handler_past_its_deadline_times_out(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    unwound = asyncio.Event()

    async def slow(ctx: Context, payload: Any) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            unwound.set()
            return "swallowed the cancel"  # the decided outcome stands anyway
        return "not reached"

    def blocking(ctx: Context, payload: Any) -> None:
        time.sleep(0.5)  # blocking work past the deadline; its return value is discarded

    def setup(w: Worker) -> None:
        w.add_handler("slow", slow)
        w.add_handler("blocking", blocking)

    r = await start_worker(node, setup=setup)
    node.submit("a", handler="slow", deadline_ms=_now_ms() + 150)
    node.submit("s", handler="blocking", deadline_ms=_now_ms() + 150)
    res = await _result(node, "a")
    assert res.outcome == worker_pb2.OUTCOME_TIMED_OUT and res.error == "deadline passed"
    assert unwound.is_set()
    sync = await _result(node, "s")
    assert sync.outcome == worker_pb2.OUTCOME_TIMED_OUT
    assert r.worker.ledger.get("a") is not None  # TIMED_OUT is final: recorded


async def test_the_node_cancels_a_suspended_handler(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    waiting = asyncio.Event()

    async def waits_for_cancel(ctx: Context, payload: Any) -> str:
        waiting.set()
        await ctx.wait_cancelled()
        return f"saw {ctx.cancel_reason}"

    r = await start_worker(node, setup=lambda w: w.add_handler("w", waits_for_cancel))
    node.submit("e1", handler="w", fencing_token=4)
    await asyncio.wait_for(waiting.wait(), 10)
    assert node.dispatcher.cancel("e1", 4, "job replaced")
    res = await _result(node, "e1")
    assert res.outcome == worker_pb2.OUTCOME_CANCELLED and res.error == "job replaced"
    assert r.worker.ledger.get("e1") is None  # CANCELLED is not final: not recorded
    assert r.worker._attempts.running == {}


async def test_errors_on_the_first_step_and_after_suspending(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()

    async def raises_now(ctx: Context, payload: Any) -> None:
        raise ValueError(f"bad {payload}")

    async def permanent_now(ctx: Context, payload: Any) -> None:
        raise PermanentError("never retry")

    async def permanent_later(ctx: Context, payload: Any) -> None:
        await asyncio.sleep(0.01)
        raise PermanentError("after a while")

    async def wrong_signature(ctx: Context) -> None:  # called with (ctx, payload)
        pass

    def setup(w: Worker) -> None:
        w.add_handler("raises_now", raises_now)
        w.add_handler("permanent_now", permanent_now)
        w.add_handler("permanent_later", permanent_later)
        w.add_handler("wrong_signature", wrong_signature)  # type: ignore[arg-type]

    await start_worker(node, setup=setup)
    for name in ("raises_now", "permanent_now", "permanent_later", "wrong_signature"):
        node.submit(name, handler=name, payload=7)
    await wait_for(lambda: len(node.authority.results) == 4, "4 results")
    got = {r.execution_id: (r.outcome, r.error) for _, r in node.authority.results}
    assert got["raises_now"] == (worker_pb2.OUTCOME_FAILED, "ValueError: bad 7")
    assert got["permanent_now"] == (
        worker_pb2.OUTCOME_FAILED_PERMANENT,
        "PermanentError: never retry",
    )
    assert got["permanent_later"] == (
        worker_pb2.OUTCOME_FAILED_PERMANENT,
        "PermanentError: after a while",
    )
    assert got["wrong_signature"][0] == worker_pb2.OUTCOME_FAILED
    assert got["wrong_signature"][1].startswith("TypeError: ")


async def test_asyncio_timeout_in_a_handler_does_not_touch_the_stream(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()

    async def bounded(ctx: Context, payload: Any) -> None:
        async with asyncio.timeout(0.05):  # entered on the eager first step
            await asyncio.sleep(3600)

    await start_worker(node, setup=lambda w: w.add_handler("bounded", bounded))
    node.submit("e1", handler="bounded")
    res = await _result(node, "e1")
    assert res.outcome == worker_pb2.OUTCOME_FAILED and res.error.startswith("TimeoutError")
    node.submit("e2", handler="bounded", deadline_ms=_now_ms() + 20)  # the stream lives on
    assert (await _result(node, "e2")).outcome == worker_pb2.OUTCOME_TIMED_OUT


async def test_heartbeats_flow_only_while_a_handler_is_suspended(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    release = asyncio.Event()

    async def long(ctx: Context, payload: Any) -> None:
        await release.wait()

    def long_sync(ctx: Context, payload: Any) -> None:
        while not ctx.cancelled:
            time.sleep(0.01)  # blocking work until told to stop

    def setup(w: Worker) -> None:
        w.add_handler("long", long)
        w.add_handler("long_sync", long_sync)

    r = await start_worker(node, setup=setup, heartbeat_interval_s=0.05)
    node.submit("a", handler="long", fencing_token=3)
    node.submit("s", handler="long_sync", fencing_token=5)

    def beats(eid: str) -> list[worker_pb2.Heartbeat]:
        return [h for h in node.authority.heartbeats if h.execution_id == eid]

    await wait_for(lambda: len(beats("a")) >= 3 and len(beats("s")) >= 3, "heartbeats")
    assert {h.fencing_token for h in beats("a")} == {3}
    assert {h.fencing_token for h in beats("s")} == {5}
    release.set()
    await _result(node, "a")
    await r.worker.stop(graceful=False)
    assert (await _result(node, "s")).outcome == worker_pb2.OUTCOME_CANCELLED
    seen = len(beats("a"))
    await asyncio.sleep(0.2)
    assert len(beats("a")) == seen  # the timer stopped with the handler


async def test_the_ledger_answers_redeliveries_of_eager_and_suspended_attempts(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    calls: list[str] = []

    async def quick(ctx: Context, payload: Any) -> int:
        calls.append(ctx.execution_id)
        return len(calls)

    async def later(ctx: Context, payload: Any) -> int:
        await asyncio.sleep(0.01)
        calls.append(ctx.execution_id)
        return len(calls)

    def setup(w: Worker) -> None:
        w.add_handler("quick", quick)
        w.add_handler("later", later)

    await start_worker(node, setup=setup)
    node.submit("q", handler="quick", fencing_token=1)
    node.submit("l", handler="later", fencing_token=1)
    await wait_for(lambda: len(node.authority.results) == 2, "first results")
    node.submit("q", handler="quick", fencing_token=2)
    node.submit("l", handler="later", fencing_token=2)
    await wait_for(lambda: len(node.authority.results) == 4, "ledger answers")
    for eid in ("q", "l"):
        first, again = node.authority.results_for(eid)
        assert again.from_ledger and again.fencing_token == 2
        assert again.output == first.output and again.outcome == worker_pb2.OUTCOME_SUCCEEDED
    assert sorted(calls) == ["l", "q"]


async def test_credits_come_back_for_every_kind_of_end(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    """Eager successes and failures, suspended ones, unknown handlers, ledger answers: every
    end gives its slot back, so 200 attempts pass through a capacity of 3."""
    node = await make_node()

    async def mixed(ctx: Context, payload: Any) -> int:
        if payload % 3 == 0:
            await asyncio.sleep(0)
        if payload % 5 == 0:
            raise RuntimeError("five")
        return int(payload)

    r = await start_worker(node, setup=lambda w: w.add_handler("mixed", mixed), capacity=3)
    for i in range(200):
        node.submit(f"e{i}", handler="mixed", payload=i)
    await wait_for(lambda: len(node.authority.results) == 200, "200 results", timeout=20)
    for i in range(10):
        node.submit(f"e{i}", handler="mixed", payload=i, fencing_token=2)  # from the ledger
    await wait_for(lambda: len(node.authority.results) == 210, "210 results")
    pool = r.worker.pool
    await wait_for(
        lambda: pool.free + sum(c.unused for c in r.worker._conns.values()) == 3, "credits"
    )
    assert r.worker._attempts.running == {}


async def test_a_sync_handler_cancelled_while_queued_never_runs(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    ran: list[str] = []

    def blocking(ctx: Context, payload: Any) -> str:
        ran.append(ctx.execution_id)
        while payload == "hold" and not ctx.cancelled:
            time.sleep(0.01)  # blocking work until told to stop
        return ctx.execution_id

    r = await start_worker(node, setup=lambda w: w.add_handler("b", blocking), thread_pool_size=1)
    node.submit("first", handler="b", payload="hold", fencing_token=1)
    node.submit("queued", handler="b", payload="go", fencing_token=1)
    await wait_for(
        lambda: "queued" in r.worker._attempts.running and ran == ["first"], "both started"
    )
    assert node.dispatcher.cancel("queued", 1, "not needed")
    assert (await _result(node, "queued")).outcome == worker_pb2.OUTCOME_CANCELLED
    assert node.dispatcher.cancel("first", 1, "stop holding")
    assert (await _result(node, "first")).outcome == worker_pb2.OUTCOME_CANCELLED
    node.submit("after", handler="b", payload="go", fencing_token=1)
    assert (await _result(node, "after")).outcome == worker_pb2.OUTCOME_SUCCEEDED
    assert ran == ["first", "after"]


async def test_the_context_says_when_the_worker_started_the_attempt(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    seen: list[int] = []

    async def when(ctx: Context, payload: Any) -> None:
        seen.append(ctx.started_ms)

    await start_worker(node, setup=lambda w: w.add_handler("when", when))
    before = _now_ms()
    node.submit("e1", handler="when")
    res = await _result(node, "e1")
    assert seen == [res.started_ms] and before <= res.started_ms <= _now_ms()
