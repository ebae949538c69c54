"""The dispatcher's result settler: batches what queued, and lets a dispatch backlog go first."""

from __future__ import annotations

import asyncio
from typing import Any

from schedd.dispatch import DispatchConfig, Dispatcher
from schedd.v1 import worker_pb2


class Authority:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.called = asyncio.Event()
        self.reported: list[str] = []

    async def on_started(self, worker_id: str, started: Any) -> None:
        return None

    async def on_heartbeats(self, worker_id: str, heartbeats: Any) -> list[str]:
        return []

    def on_reported(self, results: list[worker_pb2.Result]) -> None:
        self.reported.extend(r.execution_id for r in results)

    async def on_results(
        self, worker_id: str, results: list[worker_pb2.Result]
    ) -> list[worker_pb2.ResultAck]:
        self.calls.append([r.execution_id for r in results])
        self.called.set()
        return [
            worker_pb2.ResultAck(
                execution_id=r.execution_id, fencing_token=r.fencing_token, accepted=True
            )
            for r in results
        ]

    async def on_lost(self, lost: Any, reason: str) -> None:
        return None


def _result(eid: str) -> worker_pb2.WorkerBatch:
    return worker_pb2.WorkerBatch(
        results=[worker_pb2.Result(execution_id=eid, fencing_token=1, attempt=1)]
    )


async def _dispatcher_with_worker(
    settle_defer_ms: int, queues: tuple[str, ...] = ("q",)
) -> tuple[Dispatcher, Any, Authority]:
    """A started dispatcher with one connected worker (no credits yet) on ``queues``."""
    auth = Authority()
    d = Dispatcher("n", auth, config=DispatchConfig(settle_defer_ms=settle_defer_ms))
    await d.start()
    hello = worker_pb2.Hello(worker_id="w", queues=list(queues), handlers=["h"], capacity=1)
    return d, d.open_session(hello), auth


def _dispatch(eid: str) -> worker_pb2.Dispatch:
    return worker_pb2.Dispatch(
        execution_id=eid, job_id="j", fencing_token=1, queue="q", handler="h", attempt=1
    )


async def test_results_wait_while_a_worker_can_take_waiting_dispatches() -> None:
    d, session, auth = await _dispatcher_with_worker(400)
    try:
        # No backlog: a result is settled at once (bounded by wait_for, not timed).
        await d.handle_batch(session, _result("a"))
        await asyncio.wait_for(auth.called.wait(), 5)
        assert auth.calls == [["a"]]
        auth.called.clear()
        # Two dispatches wait for this worker's credits: results are held back...
        d.submit([_dispatch("x"), _dispatch("y")])
        await asyncio.sleep(0)
        assert d.pending_count() == 2
        await d.handle_batch(session, _result("b"))
        await d.handle_batch(session, _result("c"))
        await asyncio.sleep(0.1)
        assert auth.calls == [["a"]]
        # ...until the backlog drains (credits arrive): then both settle in one round.
        await d.handle_batch(session, worker_pb2.WorkerBatch(credits=2))
        await asyncio.wait_for(auth.called.wait(), 5)
        assert auth.calls == [["a"], ["b", "c"]]
        assert d.pending_count() == 0
    finally:
        await d.stop()


async def test_results_wait_no_longer_than_settle_defer_ms() -> None:
    d, session, auth = await _dispatcher_with_worker(150)
    try:
        d.submit([_dispatch("x")])
        await d.handle_batch(session, _result("b"))
        await asyncio.wait_for(auth.called.wait(), 5)  # settled after the bound, not never
        assert auth.calls == [["b"]]
        assert d.pending_count() == 1
    finally:
        await d.stop()


async def test_an_unservable_backlog_does_not_hold_results() -> None:
    d, session, auth = await _dispatcher_with_worker(60_000, ("other",))
    try:
        d.submit([_dispatch("x")])  # queue "q": no connected worker consumes it
        await d.handle_batch(session, _result("b"))
        await asyncio.wait_for(auth.called.wait(), 5)
        assert auth.calls == [["b"]]
    finally:
        await d.stop()


async def test_a_result_is_reported_at_once_though_its_settling_waits() -> None:
    d, session, auth = await _dispatcher_with_worker(5000)
    try:
        await d.handle_batch(session, worker_pb2.WorkerBatch(credits=1))
        d.submit([_dispatch("r")])
        for _ in range(3):
            await asyncio.sleep(0)
        assert "r" in d.in_flight()
        d.submit([_dispatch("x")])  # waits for this worker's next credit: a backlog
        await asyncio.sleep(0)
        await d.handle_batch(session, _result("r"))
        await d.handle_batch(session, _result("stranger"))  # not in flight: not reported
        assert auth.reported == ["r"]  # the overlap policies see it ended...
        await asyncio.sleep(0.05)
        assert auth.calls == []  # ...while its settling waits behind the backlog
    finally:
        await d.stop()
