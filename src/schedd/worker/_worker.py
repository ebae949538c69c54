"""The worker: handler registry, one stream per node, executions, graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import tempfile
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import schedd
from schedd._clock import Clock, SystemClock
from schedd.v1 import worker_pb2
from schedd.worker._connection import CreditPool, NodeConnection
from schedd.worker._context import Context
from schedd.worker._execution import Execution, Handler, Outcome, RegisteredHandler, begin
from schedd.worker._ledger import DEFAULT_TTL_S, Ledger
from schedd.worker._threads import ThreadBridge
from schedd.worker._timers import DeadlineQueue, HeartbeatTicker

log = logging.getLogger(__name__)
_H = TypeVar("_H", bound=Handler)
_SHUTDOWN_REASON = "worker shutting down"


class Worker:
    """Runs registered handlers for the executions schedd nodes dispatch to it.

    ``worker.run()`` opens one stream to *every* endpoint (each node dispatches its own
    partitions) and keeps them open, reconnecting with exponential backoff and full jitter,
    until :meth:`stop`. At most ``capacity`` executions run at once across all streams.

    Every finished attempt is recorded in a RocksDB ledger at ``data_dir/ledger`` before its
    Result is sent; a redelivered execution the ledger has as SUCCEEDED (or whose same attempt
    already finished) is answered from the ledger with the new token, without running again.
    With ``data_dir=None`` a temporary directory is used and deleted at exit, so the ledger
    does not survive a restart: pass a ``data_dir`` in production.

    Example::

        worker = Worker("127.0.0.1:7070", queues=["default"], data_dir="/var/lib/schedd-w1")

        @worker.handler("send_report")
        async def send_report(ctx: Context, payload: dict) -> dict:
            return {"sent": payload["to"]}

        worker.run_sync()
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        *,
        queues: Sequence[str] = ("default",),
        worker_id: str | None = None,
        capacity: int = 16,
        data_dir: str | Path | None = None,
        heartbeat_interval_s: float | None = None,
        shutdown_timeout_s: float = 30.0,
        thread_pool_size: int = 8,
        ledger_ttl_s: float = DEFAULT_TTL_S,
        clock: Clock | None = None,
    ) -> None:
        eps = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        if not eps:
            raise ValueError("endpoints: give at least one node address")
        if capacity <= 0:
            raise ValueError(f"capacity: must be positive, got {capacity}")
        if not queues:
            raise ValueError("queues: give at least one queue")
        self.endpoints = eps
        self.queues = list(queues)
        self.capacity = capacity
        self.shutdown_timeout_s = shutdown_timeout_s
        self._explicit_data_dir = data_dir is not None
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.worker_id = worker_id
        self._heartbeat_interval_s = heartbeat_interval_s
        self._thread_pool_size = thread_pool_size
        self._ledger_ttl_s = ledger_ttl_s
        self._clock: Clock = clock or SystemClock()
        self._handlers: dict[str, RegisteredHandler] = {}
        self._running: dict[str, Execution] = {}
        self._conns: list[NodeConnection] = []
        self._stopped: asyncio.Event | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._threads: ThreadBridge
        self._deadlines: DeadlineQueue
        self._beats: HeartbeatTicker
        self.pool = CreditPool(capacity)
        self.ledger: Ledger

    # ---- registration -------------------------------------------------------------------------

    def handler(self, name: str) -> Callable[[_H], _H]:
        """Decorator: register ``async def f(ctx, payload)`` or a plain ``def f(ctx, payload)``
        (run in the thread pool) under ``name``."""

        def register(fn: _H) -> _H:
            self.add_handler(name, fn)
            return fn

        return register

    def add_handler(self, name: str, fn: Handler) -> None:
        if not name:
            raise ValueError("handler name must not be empty")
        if name in self._handlers:
            raise ValueError(f"a handler named {name!r} is already registered")
        self._handlers[name] = RegisteredHandler.of(fn)

    @property
    def handler_names(self) -> list[str]:
        return sorted(self._handlers)

    def hello(self) -> worker_pb2.Hello:
        return worker_pb2.Hello(
            worker_id=self.worker_id or "",
            queues=self.queues,
            handlers=self.handler_names,
            capacity=self.capacity,
            version=schedd.__version__,
        )

    # ---- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until :meth:`stop` has drained (or the task is cancelled: then everything
        running is cancelled without results, and the nodes see the streams break)."""
        self._open()
        loop = asyncio.get_running_loop()
        assert self._executor is not None
        self._threads = ThreadBridge(loop, self._executor)
        self._deadlines = DeadlineQueue(loop)
        self._beats = HeartbeatTicker(loop, self._beating, self._beat_interval)
        self._stopped = asyncio.Event()
        self._conns = [NodeConnection(self, ep) for ep in self.endpoints]
        tasks = [
            asyncio.create_task(c.run(), name=f"schedd-worker-{c.endpoint}") for c in self._conns
        ]
        try:
            await self._stopped.wait()
            await self._close_streams(tasks)
        finally:
            for t in tasks:
                t.cancel()
            for ex in list(self._running.values()):
                ex.abort()
            self._running.clear()
            self._deadlines.close()
            self._beats.close()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._close()

    async def stop(self, graceful: bool = True) -> None:
        """Stop taking work; with ``graceful``, let running handlers finish for up to
        ``shutdown_timeout_s``, then cancel the rest (reported as OUTCOME_CANCELLED).
        :meth:`run` returns once the results are sent."""
        self.pool.accepting = False
        if graceful and self._running:
            await asyncio.wait(self._finished_futures(), timeout=self.shutdown_timeout_s)
        for ex in list(self._running.values()):
            ex.ctx.cancel(_SHUTDOWN_REASON)
        left = self._finished_futures()
        if left:
            await asyncio.wait(left, timeout=10.0)
        if self._stopped is not None:
            self._stopped.set()

    def run_sync(self) -> None:
        """Run until SIGINT or SIGTERM, then stop gracefully."""

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, lambda: asyncio.ensure_future(self.stop()))
            await self.run()

        asyncio.run(main())

    def _open(self) -> None:
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="schedd-worker-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.worker_id is None:
            self.worker_id = _stable_worker_id(self.data_dir)
        self.ledger = Ledger(self.data_dir / "ledger")
        pruned = self.ledger.prune(self._clock.now_ms(), self._ledger_ttl_s)
        if pruned:
            log.info("pruned %d ledger entries older than %.0f s", pruned, self._ledger_ttl_s)
        self._executor = ThreadPoolExecutor(self._thread_pool_size, thread_name_prefix="schedd-h")
        self.pool = CreditPool(self.capacity)

    def _close(self) -> None:
        self.ledger.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if not self._explicit_data_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    async def _close_streams(self, tasks: list[asyncio.Task[None]]) -> None:
        for c in self._conns:
            await c.close()
        await asyncio.wait(tasks, timeout=5.0)

    # ---- node messages ------------------------------------------------------------------------

    def on_node_batch(self, conn: NodeConnection, batch: worker_pb2.NodeBatch) -> None:
        """Apply a NodeBatch: cancels, then acks, then dispatches."""
        for c in batch.cancels:
            ex = self._running.get(c.execution_id)
            if ex is not None and c.fencing_token in (0, ex.dispatch.fencing_token):
                log.info("execution %s cancelled by the node: %s", c.execution_id, c.reason)
                ex.ctx.cancel(c.reason or "cancelled by the node")
        for ack in batch.acks:
            if not ack.accepted:
                log.warning(
                    "node refused result of %s (token %d, code %d): %s; not retrying",
                    ack.execution_id,
                    ack.fencing_token,
                    ack.code,
                    ack.message,
                )
        dispatches = batch.dispatches
        if dispatches:
            conn.unused -= len(dispatches)
            with self.pool.holding():
                for d in dispatches:
                    self._on_dispatch(conn, d)

    def _on_dispatch(self, conn: NodeConnection, d: worker_pb2.Dispatch) -> None:
        if not self.pool.accepting:
            conn.add_result(self._result(d, worker_pb2.OUTCOME_CANCELLED, error=_SHUTDOWN_REASON))
            self.pool.release()
            return
        current = self._running.get(d.execution_id)
        if current is not None and self._reattach(current, conn, d):
            self.pool.release()
            return
        known = self.ledger.get(d.execution_id)
        if known is not None and (
            known.outcome == worker_pb2.OUTCOME_SUCCEEDED or known.attempt == d.attempt
        ):
            answer = worker_pb2.Result()
            answer.CopyFrom(known)
            answer.fencing_token = d.fencing_token
            answer.from_ledger = True
            conn.add_result(answer)
            self.pool.release()
            return
        self._start(conn, d, previous=current)

    def _reattach(self, ex: Execution, conn: NodeConnection, d: worker_pb2.Dispatch) -> bool:
        """A redelivery of what is still running here: adopt the new token instead of
        running twice. False when it cannot be adopted (another attempt, or cancelling)."""
        if ex.ctx.cancelled or d.attempt != ex.dispatch.attempt:
            if not ex.ctx.cancelled:
                ex.ctx.cancel("superseded by a newer attempt")
            return False
        if d.fencing_token < ex.dispatch.fencing_token:
            return True  # an older token: the newer one is already running
        old = ex.dispatch
        new = worker_pb2.Dispatch()
        new.CopyFrom(d)
        if not d.payload:
            new.payload = old.payload
        ex.ctx._dispatch = new
        ex.conn.running -= 1
        ex.conn = conn
        conn.running += 1
        conn.add_started(d.execution_id, d.fencing_token, ex.started_ms)
        return True

    def _start(
        self, conn: NodeConnection, d: worker_pb2.Dispatch, previous: Execution | None
    ) -> None:
        ex = Execution(Context(d, self.ledger), conn, self._report)
        ex.ctx._beat = ex.beat
        conn.running += 1
        if previous is None or previous.done:
            self._begin(ex)
            return
        # A newer attempt of what still runs here (superseded, so cancelled): start it once
        # the older one has reported, so the two never run at once.
        self._running[d.execution_id] = ex
        ex.finished = asyncio.get_running_loop().create_future()
        assert previous.finished is not None
        previous.finished.add_done_callback(lambda _: self._begin(ex))

    def _begin(self, ex: Execution) -> None:
        """Run the handler's first step now; only a handler that suspends is watched."""
        if ex.done:  # aborted while waiting for an older attempt
            return
        d = ex.dispatch
        now = self._clock.now_ms()
        ex.started_ms = now
        ex.conn.add_started(d.execution_id, d.fencing_token, now)
        if ex.ctx.cancelled:  # cancelled while waiting for an older attempt
            ex.finish(Outcome(worker_pb2.OUTCOME_CANCELLED, error=ex.ctx.cancel_reason))
            return
        loop = asyncio.get_running_loop()
        started = begin(self._handlers.get(d.handler), ex, now, loop, self._threads)
        if isinstance(started, Outcome):
            ex.finish(started)
            return
        self._running[d.execution_id] = ex
        if ex.finished is None:
            ex.finished = loop.create_future()
        ex.watch(started, now, self._deadlines)
        self._beats.wake()

    def _report(self, ex: Execution, outcome: Outcome) -> None:
        """Record the attempt's result in the ledger, then queue it on its stream."""
        conn = ex.conn
        d = ex.dispatch
        result = conn.new_result()
        result.execution_id = eid = d.execution_id
        result.fencing_token = d.fencing_token
        result.attempt = d.attempt
        result.outcome = outcome.code  # type: ignore[assignment]
        if outcome.error:
            result.error = outcome.error
        if outcome.output:
            result.output = outcome.output
        result.started_ms = ex.started_ms
        result.finished_ms = self._clock.now_ms()
        self.ledger.record(result)
        if not conn.live:
            self.ledger.flush()
        if self._running.get(eid) is ex:
            del self._running[eid]
        conn.running -= 1
        self.pool.release()
        if ex.finished is not None and not ex.finished.done():
            ex.finished.set_result(None)

    def _finished_futures(self) -> list[asyncio.Future[None]]:
        return [ex.finished for ex in self._running.values() if ex.finished is not None]

    def _beating(self) -> list[Callable[[], None]]:
        """The heartbeats due at a tick: one per attempt whose handler runs."""
        return [ex.beat for ex in self._running.values() if ex.future is not None]

    def _beat_interval(self) -> float:
        """``heartbeat_interval_s``, else the shortest interval a connected node asked for."""
        if self._heartbeat_interval_s is not None:
            return self._heartbeat_interval_s
        asked = [c.welcome.heartbeat_interval_ms for c in self._conns if c.welcome is not None]
        return (min(asked) if asked else 2000) / 1000.0

    def _result(
        self, d: worker_pb2.Dispatch, outcome: int, output: bytes = b"", error: str = ""
    ) -> worker_pb2.Result:
        return worker_pb2.Result(
            execution_id=d.execution_id,
            fencing_token=d.fencing_token,
            attempt=d.attempt,
            outcome=outcome,  # type: ignore[arg-type]
            error=error,
            output=output,
            finished_ms=self._clock.now_ms(),
        )


def _stable_worker_id(data_dir: Path) -> str:
    """The id kept in ``data_dir/worker_id``, created on first use (host-pid-random)."""
    path = data_dir / "worker_id"
    if path.exists():
        return path.read_text().strip()
    wid = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    path.write_text(wid + "\n")
    return wid
