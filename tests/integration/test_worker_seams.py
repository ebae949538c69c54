"""The worker's seams over real gRPC and a real RocksDB ledger: executors chosen by the
dispatch's target, the metrics recorder, WorkerConfig, start()/stop(), and streams whose
loops fail and recover."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from integration.test_worker_stream import (  # the stream tests' node and worker fixtures
    Node,
    NodeFactory,
    WorkerFactory,
    make_node,
    start_worker,
    wait_for,
)
from schedd.v1 import job_pb2, worker_pb2
from schedd.worker import Context, Worker, WorkerConfig
from schedd.worker._executor import Outcome, Runtime

__all__ = ["make_node", "start_worker"]  # fixtures, used by name


async def _result(node: Node, eid: str) -> worker_pb2.Result:
    await wait_for(lambda: node.authority.results_for(eid), f"result of {eid}")
    return node.authority.results_for(eid)[0]


def _http_target(url: str) -> bytes:
    job = job_pb2.Job()
    job.http.url = url
    return job.SerializeToString()


async def _echo(ctx: Context, payload: Any) -> Any:
    return payload


@dataclass
class FakeHttp:
    """An http executor that records what it was given; suspends when ``gate`` is set."""

    seen: list[tuple[str, bytes, Any]] = field(default_factory=list)
    gate: asyncio.Event | None = None

    def begin(self, ctx: Context, payload: Any, runtime: Runtime) -> Outcome | asyncio.Future[Any]:
        target = job_pb2.Job.FromString(ctx._dispatch.target)
        self.seen.append((ctx.execution_id, ctx._dispatch.target, payload))
        if self.gate is None:
            return Outcome(worker_pb2.OUTCOME_SUCCEEDED, output=target.http.url.encode())
        gate = self.gate

        async def call() -> str:
            await gate.wait()
            return target.http.url

        return runtime.loop.create_task(call())


@dataclass
class CountingRecorder:
    """A MetricsRecorder that keeps what the worker reported."""

    finished: list[tuple[int, float]] = field(default_factory=list)

    def fire_lateness(self, ms: float) -> None: ...
    def missed(self, reason: str) -> None: ...
    def dead_lettered(self) -> None: ...
    def write_rejected(self, what: str) -> None: ...
    def partitions_owned(self, n: int) -> None: ...
    def ownership_changed(self) -> None: ...
    def store_request(self, op: str, seconds: float, ok: bool) -> None: ...
    def worker_slots(self, free: int, in_flight: int) -> None: ...

    def execution_finished(self, outcome: int, seconds: float) -> None:
        self.finished.append((outcome, seconds))


# ---- executors ------------------------------------------------------------------------------


async def test_an_http_dispatch_runs_on_the_http_executor(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    http = FakeHttp()

    def setup(w: Worker) -> None:
        w.add_handler("echo", _echo)
        w.add_executor("http", http)

    r = await start_worker(node, setup=setup)
    hello = r.worker.hello()
    assert hello.accepts_http and not hello.accepts_shell
    target = _http_target("https://example.test/hook")
    node.submit("h1", handler="", payload={"n": 1}, target=target)
    node.submit("e1", payload="plain")  # a handler job still runs on its handler
    res = await _result(node, "h1")
    assert res.outcome == worker_pb2.OUTCOME_SUCCEEDED
    assert res.output == b"https://example.test/hook"
    assert http.seen == [("h1", target, {"n": 1})]  # the decoded payload, the raw target
    assert json.loads((await _result(node, "e1")).output) == "plain"


async def test_an_executor_that_suspends_is_cancelled_by_the_deadline(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    http = FakeHttp(gate=asyncio.Event())
    r = await start_worker(node, setup=lambda w: w.add_executor("http", http))
    now = r.worker.clock_ms()
    node.submit("h1", handler="", target=_http_target("https://x.test"), deadline_ms=now + 200)
    await wait_for(lambda: [s.execution_id for s in node.authority.started] == ["h1"], "Started")
    res = await _result(node, "h1")
    assert res.outcome == worker_pb2.OUTCOME_TIMED_OUT


async def test_add_executor_rejects_unknown_and_duplicate_kinds(tmp_path: Path) -> None:
    w = Worker("127.0.0.1:1", data_dir=tmp_path)
    w.add_executor("shell", FakeHttp())
    with pytest.raises(ValueError, match="one of http, shell"):
        w.add_executor("ftp", FakeHttp())
    with pytest.raises(ValueError, match="already"):
        w.add_executor("shell", FakeHttp())
    assert w.hello().accepts_shell and not w.hello().accepts_http


# ---- the recorder ---------------------------------------------------------------------------


async def test_the_recorder_hears_of_every_attempt_the_worker_ran(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    recorder = CountingRecorder()

    async def boom(ctx: Context, payload: Any) -> Any:
        raise RuntimeError("no")

    def setup(w: Worker) -> None:
        w.add_handler("echo", _echo)
        w.add_handler("boom", boom)

    await start_worker(node, setup=setup, recorder=recorder)
    node.submit("ok", payload=1)
    node.submit("bad", handler="boom")
    await _result(node, "ok")
    await _result(node, "bad")
    outcomes = sorted(o for o, _ in recorder.finished)
    assert outcomes == sorted([worker_pb2.OUTCOME_SUCCEEDED, worker_pb2.OUTCOME_FAILED])
    assert all(s >= 0 for _, s in recorder.finished)


@dataclass
class GaugingRecorder(CountingRecorder):
    """A recorder that keeps the gauges registered on it, to read them as an exporter would."""

    gauges: dict[str, Callable[[], Any]] = field(default_factory=dict)

    def gauge(
        self, name: str, doc: str, read: Callable[[], Any], labels: Sequence[str] = ()
    ) -> None:
        self.gauges[name] = read


async def test_the_worker_registers_its_gauges_on_any_recorder_with_gauge(
    make_node: NodeFactory, start_worker: WorkerFactory
) -> None:
    node = await make_node()
    recorder = GaugingRecorder()
    r = await start_worker(node, recorder=recorder, capacity=5)
    assert set(recorder.gauges) == {
        "schedd_worker_slots_free",
        "schedd_worker_in_flight",
        "schedd_worker_held",
        "schedd_worker_streams",
        "schedd_queue_slots",
        "schedd_queue_free_slots",
    }
    assert recorder.gauges["schedd_worker_slots_free"]() == 5
    assert recorder.gauges["schedd_worker_in_flight"]() == 0
    assert recorder.gauges["schedd_worker_held"]() == 0
    assert recorder.gauges["schedd_worker_streams"]() == 1
    assert r.worker._metrics_server is None  # not a recorder that can be scraped


# ---- config ---------------------------------------------------------------------------------


def test_worker_config_normalizes_and_validates(tmp_path: Path) -> None:
    cfg = WorkerConfig(endpoints="n:1", queues=["a", "b"], data_dir=str(tmp_path))  # type: ignore[arg-type]
    assert cfg.endpoints == ("n:1",) and cfg.queues == ("a", "b") and cfg.data_dir == tmp_path
    for bad, what in (
        ({"endpoints": ()}, "endpoints"),
        ({"queues": ()}, "queues"),
        ({"capacity": 0}, "capacity"),
        ({"prefetch": -1}, "prefetch"),
        ({"thread_pool_size": 0}, "thread_pool_size"),
        ({"reconnect_min_s": 2.0, "reconnect_max_s": 1.0}, "reconnect"),
    ):
        kw: dict[str, Any] = {"endpoints": ("n:1",), **bad}
        with pytest.raises(ValueError, match=what):
            WorkerConfig(**kw)


def test_worker_takes_a_config_or_the_keyword_convenience(tmp_path: Path) -> None:
    w = Worker(WorkerConfig(endpoints=("n:1",), capacity=3, data_dir=tmp_path))
    assert (w.capacity, w.config.endpoints) == (3, ("n:1",))
    w = Worker(["n:1", "n:2"], capacity=4, queues=["q"])
    assert w.config == WorkerConfig(endpoints=("n:1", "n:2"), capacity=4, queues=("q",))
    with pytest.raises(TypeError, match="not both"):
        Worker(WorkerConfig(endpoints=("n:1",)), capacity=3)
    with pytest.raises(TypeError):
        Worker("n:1", no_such_option=1)


# ---- lifecycle ------------------------------------------------------------------------------


async def test_start_then_stop_with_a_timeout_cancels_what_still_runs(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = await make_node()
    never = asyncio.Event()

    async def stuck(ctx: Context, payload: Any) -> Any:
        await never.wait()

    w = Worker(WorkerConfig(endpoints=(node.address,), worker_id="w", data_dir=tmp_path))
    w.add_handler("stuck", stuck)
    await w.stop()  # not started: nothing to do
    await w.start()
    with pytest.raises(RuntimeError, match="started before"):
        await w.start()
    await wait_for(lambda: [s.worker_id for s in node.dispatcher.workers()] == ["w"], "worker")
    node.submit("e1", handler="stuck")
    await wait_for(lambda: [s.execution_id for s in node.authority.started] == ["e1"], "Started")
    await asyncio.wait_for(w.stop(graceful=True, timeout=0.05), 10)
    res = await _result(node, "e1")
    assert (res.outcome, res.error) == (worker_pb2.OUTCOME_CANCELLED, "worker shutting down")
    await w.stop()  # a second stop returns at once


async def test_async_with_starts_the_worker_and_stops_it_gracefully(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = await make_node()
    release = asyncio.Event()

    async def slow(ctx: Context, payload: Any) -> Any:
        await release.wait()
        return "done"

    w = Worker(WorkerConfig(endpoints=(node.address,), worker_id="w", data_dir=tmp_path))
    w.add_handler("slow", slow)
    async with w as entered:
        assert entered is w
        await wait_for(lambda: [s.worker_id for s in node.dispatcher.workers()] == ["w"], "w")
        node.submit("e1", handler="slow")
        await wait_for(lambda: [s.execution_id for s in node.authority.started] == ["e1"], "run")
        asyncio.get_running_loop().call_later(0.05, release.set)
    # graceful: the attempt that was running finished before the block's exit returned
    res = await _result(node, "e1")
    assert res.outcome == worker_pb2.OUTCOME_SUCCEEDED
    with pytest.raises(RuntimeError, match="started before"):
        await w.start()  # stopped for good


async def test_async_with_ended_by_an_exception_stops_at_once(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = await make_node()
    never = asyncio.Event()

    async def stuck(ctx: Context, payload: Any) -> Any:
        await never.wait()

    w = Worker(
        WorkerConfig(
            endpoints=(node.address,), worker_id="w", data_dir=tmp_path, shutdown_timeout_s=60
        )
    )
    w.add_handler("stuck", stuck)
    with pytest.raises(KeyError):
        async with w:
            await wait_for(lambda: [s.worker_id for s in node.dispatcher.workers()] == ["w"], "w")
            node.submit("e1", handler="stuck")
            await wait_for(lambda: len(node.authority.started) == 1, "Started")
            raise KeyError("the block failed")
    res = await _result(node, "e1")  # not the 60 s grace: cancelled at once
    assert res.outcome == worker_pb2.OUTCOME_CANCELLED


# ---- supervised streams ---------------------------------------------------------------------


def _crash_logged(caplog: pytest.LogCaptureFixture) -> bool:
    return any(
        "crashed; reconnecting" in r.getMessage() and r.exc_info is not None for r in caplog.records
    )


async def test_a_read_loop_that_crashes_is_logged_and_the_stream_reconnects(
    make_node: NodeFactory, start_worker: WorkerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="schedd.worker._connection")
    node = await make_node()
    r = await start_worker(node, reconnect_min_s=0.01, reconnect_max_s=0.05)
    worker = r.worker
    real = worker.on_node_batch
    crashes: list[str] = []

    def crash_once(conn: Any, batch: worker_pb2.NodeBatch) -> None:
        if not crashes:
            crashes.append(batch.dispatches[0].execution_id)
            raise RuntimeError("injected: a bug while applying a batch")
        real(conn, batch)

    worker.on_node_batch = crash_once  # type: ignore[method-assign]
    node.submit("lost")
    await wait_for(lambda: _crash_logged(caplog), "the crash, logged with its traceback")
    assert crashes == ["lost"]
    await wait_for(lambda: node.authority.lost, "the node saw the stream end")
    await wait_for(lambda: len(node.dispatcher.workers()) == 1, "reconnected")
    node.submit("after", payload="ok")
    res = await _result(node, "after")
    assert res.outcome == worker_pb2.OUTCOME_SUCCEEDED and json.loads(res.output) == "ok"


async def test_a_write_loop_that_crashes_ends_the_stream_and_it_reconnects(
    make_node: NodeFactory, start_worker: WorkerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="schedd.worker._connection")
    node = await make_node()
    failures: list[int] = []

    def setup(w: Worker) -> None:
        w.add_handler("echo", _echo)
        real = w.flush_ledger

        def flush_fails_once() -> None:  # the writer calls it before every write
            if not failures:
                failures.append(1)
                raise RuntimeError("injected: the ledger could not flush")
            real()

        w.flush_ledger = flush_fails_once  # type: ignore[method-assign]

    await start_worker(node, setup=setup, wait=False, reconnect_min_s=0.01, reconnect_max_s=0.05)
    await wait_for(lambda: _crash_logged(caplog), "the writer's crash, logged")
    node.submit("e1", payload=[1])
    res = await _result(node, "e1")  # credits came on the new stream
    assert res.outcome == worker_pb2.OUTCOME_SUCCEEDED and failures == [1]
