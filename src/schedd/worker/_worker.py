"""The worker: handler registry, one stream per node, executions, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import schedd
from schedd._clock import Clock, SystemClock
from schedd._gc import freeze_survivors
from schedd.v1 import worker_pb2
from schedd.worker._connection import CreditPool, NodeConnection
from schedd.worker._context import Context, decode_payload
from schedd.worker._execution import Execution, Handler, Outcome, RegisteredHandler, begin
from schedd.worker._hold import Held, HoldQueue
from schedd.worker._ledger import DEFAULT_TTL_S, Ledger
from schedd.worker._threads import ThreadBridge
from schedd.worker._timers import DeadlineQueue, HeartbeatTicker

log = logging.getLogger(__name__)
_H = TypeVar("_H", bound=Handler)
_SHUTDOWN_REASON = "worker shutting down"
#: A NodeBatch holding at least this many executions for later freezes what is alive.
_FREEZE_AFTER = 256


class Worker:
    """Runs registered handlers for the executions schedd nodes dispatch to it.

    ``worker.run()`` opens one stream to *every* endpoint (each node dispatches its own
    partitions) and keeps them open, reconnecting with exponential backoff and full jitter,
    until :meth:`stop`. At most ``capacity`` executions run at once across all streams.

    With ``prefetch`` > 0 a node may also send up to that many executions ahead of their
    instant (a couple of seconds); the worker holds them and starts each at its instant by its
    own timer (see ``schedd.worker._hold``), while fewer than ``capacity`` run. A held
    execution that cannot start then waits for a slot; it is dropped unstarted if its stream
    ends first (the node hands it out again). Dispatches due on arrival are bounded by the
    credits the worker granted, which it cannot take back: when they arrive while held ones
    fill ``capacity``, up to twice ``capacity`` run for that moment (``prefetch=0`` keeps the
    bound strict).

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
        prefetch: int = 10_000,
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
        if prefetch < 0:
            raise ValueError(f"prefetch: must not be negative, got {prefetch}")
        if not queues:
            raise ValueError("queues: give at least one queue")
        self.endpoints = eps
        self.queues = list(queues)
        self.capacity = capacity
        self.prefetch = prefetch
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
        self.holds = CreditPool(prefetch, hold=True)
        self._hold: HoldQueue | None = None
        #: Executions started and not yet reported (held ones start only while < capacity).
        self._active = 0
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
            prefetch=self.prefetch,
        )

    def clock_ms(self) -> int:
        """The worker's clock (ms since the epoch)."""
        return self._clock.now_ms()

    async def starting(self) -> None:
        """Returns once no burst of held executions is starting (see HoldQueue.starting)."""
        if self._hold is not None:
            await self._hold.starting()

    @property
    def held_count(self) -> int:
        """Executions held for their instant (not started yet)."""
        return len(self._hold) if self._hold is not None else 0

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
        self._hold = HoldQueue(
            loop,
            self._clock.now_ms,
            lambda: self._active < self.capacity,
            self._start_held,
            self._holding,
        )
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
            self._hold.close()
            self._deadlines.close()
            self._beats.close()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._close()

    async def stop(self, graceful: bool = True) -> None:
        """Stop taking work; with ``graceful``, let running handlers finish for up to
        ``shutdown_timeout_s``, then cancel the rest (reported as OUTCOME_CANCELLED).
        :meth:`run` returns once the results are sent."""
        self.pool.accepting = False
        self.holds.accepting = False
        if self._hold is not None:  # not started: give them back for another worker
            for h in self._hold.take_all():
                h.conn.add_result(
                    self._result(h.dispatch, worker_pb2.OUTCOME_CANCELLED, error=_SHUTDOWN_REASON)
                )
                self._give_back(h.conn, held=True)
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
        self.holds = CreditPool(self.prefetch, hold=True)
        self._active = 0

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
        """Apply a NodeBatch: cancels, then acks, then dispatches, then the cancels that
        matched nothing before (a batch may carry a dispatch and its cancel together)."""
        unmatched = [c for c in batch.cancels if not self._cancel(c)]
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
            held = 0
            with self.pool.holding(), self.holds.holding():
                for d in dispatches:
                    if d.start_at_ms:
                        held += 1
                        conn.hold_unused -= 1
                        conn.held += 1
                        self._on_held(conn, d)
                    else:
                        conn.unused -= 1
                        self._on_dispatch(conn, d)
            if held >= _FREEZE_AFTER:
                # They live until their instant: keep the cycle collector from walking them
                # again at every older-generation collection (see schedd._gc).
                freeze_survivors()
        if dispatches and unmatched:
            for c in unmatched:
                self._cancel(c)

    def _cancel(self, c: worker_pb2.Cancel) -> bool:
        """Cancel what runs or is held under ``c``'s token; False if nothing matched."""
        ex = self._running.get(c.execution_id)
        if ex is not None and c.fencing_token in (0, ex.dispatch.fencing_token):
            log.info("execution %s cancelled by the node: %s", c.execution_id, c.reason)
            ex.ctx.cancel(c.reason or "cancelled by the node")
            return True
        return self._hold is not None and self._cancel_held(c)

    @contextlib.contextmanager
    def _holding(self) -> Iterator[None]:
        """Grant the slots freed inside the block once, at its end."""
        with self.pool.holding(), self.holds.holding():
            yield

    def _give_back(self, conn: NodeConnection, held: bool) -> None:
        """The slot a dispatch used (a prefetch one if ``held``) is free again."""
        if held:
            conn.held -= 1
            self.holds.release()
        else:
            self.pool.release()

    def _on_dispatch(
        self,
        conn: NodeConnection,
        d: worker_pb2.Dispatch,
        held: bool = False,
        checked: bool = False,
        prepared: Execution | None = None,
    ) -> None:
        if not self.pool.accepting:
            conn.add_result(self._result(d, worker_pb2.OUTCOME_CANCELLED, error=_SHUTDOWN_REASON))
            self._give_back(conn, held)
            return
        current = self._running.get(d.execution_id)
        if current is not None and self._reattach(current, conn, d):
            self._give_back(conn, held)
            return
        if not checked and self._answer_from_ledger(conn, d):
            self._give_back(conn, held)
            return
        self._start(conn, d, previous=current, held=held, prepared=prepared)

    def _answer_from_ledger(self, conn: NodeConnection, d: worker_pb2.Dispatch) -> bool:
        known = self.ledger.get(d.execution_id)
        if known is None or not (
            known.outcome == worker_pb2.OUTCOME_SUCCEEDED or known.attempt == d.attempt
        ):
            return False
        answer = worker_pb2.Result()
        answer.CopyFrom(known)
        answer.fencing_token = d.fencing_token
        answer.from_ledger = True
        conn.add_result(answer)
        return True

    def _on_held(self, conn: NodeConnection, d: worker_pb2.Dispatch) -> None:
        """A dispatch sent ahead of its instant: answer it now if we can, else hold it."""
        hold = self._hold
        if not self.pool.accepting or hold is None:
            conn.add_result(self._result(d, worker_pb2.OUTCOME_CANCELLED, error=_SHUTDOWN_REASON))
            self._give_back(conn, held=True)
            return
        if d.execution_id not in self._running and self._answer_from_ledger(conn, d):
            self._give_back(conn, held=True)
            return
        local_ms = d.start_at_ms - conn.clock_offset_ms
        if local_ms <= self._clock.now_ms() and self._active < self.capacity:
            self._on_dispatch(conn, d, held=True, checked=True)
            return
        old = hold.add(Held(conn, d, local_ms, self._prepare(conn, d, held=True)))
        if old is not None:  # the node sent it again (a new token): the old one is void
            self._give_back(old.conn, held=True)

    def _start_held(self, h: Held) -> None:
        """A held execution's instant came (and a slot is free): run it."""
        ex = h.ex
        if ex is not None and h.eid not in self._running and self.pool.accepting:
            self._active += 1  # the common case: what _on_dispatch and _start would do
            self._begin(ex)
            return
        self._on_dispatch(h.conn, h.dispatch, held=True, checked=True, prepared=ex)

    def _cancel_held(self, c: worker_pb2.Cancel) -> bool:
        assert self._hold is not None
        h = self._hold.by_id.get(c.execution_id)
        if h is None or c.fencing_token not in (0, h.dispatch.fencing_token):
            return False
        self._hold.take(c.execution_id)
        log.info("held execution %s cancelled by the node: %s", c.execution_id, c.reason)
        h.conn.add_result(
            self._result(
                h.dispatch, worker_pb2.OUTCOME_CANCELLED, error=c.reason or "cancelled by the node"
            )
        )
        self._give_back(h.conn, held=True)
        return True

    def stream_ended(self, conn: NodeConnection) -> None:
        """Held executions of a stream that ended are dropped unstarted: the node hands them
        out again under a new token, so starting them here would only run them twice."""
        if self._hold is None:
            return
        gone = self._hold.drop_stream(conn)
        if gone:
            log.info("stream to %s ended: dropped %d held executions", conn.endpoint, len(gone))
            conn.held -= len(gone)
            self.holds.release(len(gone))

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
        if ex.held:  # its slot moves with it to the stream its result now goes to
            ex.conn.held -= 1
            conn.held += 1
        else:
            ex.conn.running -= 1
            conn.running += 1
        ex.conn = conn
        conn.add_started(d.execution_id, d.fencing_token, ex.started_ms)
        return True

    def _start(
        self,
        conn: NodeConnection,
        d: worker_pb2.Dispatch,
        previous: Execution | None,
        held: bool = False,
        prepared: Execution | None = None,
    ) -> None:
        ex = prepared if prepared is not None else self._prepare(conn, d, held)
        self._active += 1
        if not held:
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

    def _prepare(self, conn: NodeConnection, d: worker_pb2.Dispatch, held: bool) -> Execution:
        ex = Execution(Context(d, self.ledger), conn, self._report)
        ex.ctx._beat = ex.beat
        ex.held = held
        if held:  # decoded while it waits, not at its instant
            ex.payload = decode_payload(d.payload)
        return ex

    def _begin(self, ex: Execution) -> None:
        """Run the handler's first step now; only a handler that suspends is watched."""
        if ex.done:  # aborted while waiting for an older attempt
            return
        d = ex.dispatch
        now = self._clock.now_ms()
        ex.started_ms = now
        if ex.ctx.cancelled:  # cancelled while waiting for an older attempt
            ex.finish(Outcome(worker_pb2.OUTCOME_CANCELLED, error=ex.ctx.cancel_reason))
            return
        loop = asyncio.get_running_loop()
        started = begin(self._handlers.get(d.handler), ex, now, loop, self._threads)
        if isinstance(started, Outcome):  # its Result says when it started: no Started
            ex.finish(started)
            return
        ex.conn.add_started(d.execution_id, d.fencing_token, now)
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
        if outcome.error or outcome.output:
            if outcome.error:
                result.error = outcome.error
            if outcome.output:
                result.output = outcome.output
            conn.result_bytes(len(outcome.output) + len(outcome.error))
        result.started_ms = ex.started_ms
        result.finished_ms = self._clock.now_ms()
        self.ledger.record(result)
        if not conn.live:
            self.ledger.flush()
        if self._running.get(eid) is ex:
            del self._running[eid]
        self._active -= 1
        if ex.held:
            self._give_back(conn, held=True)
        else:
            conn.running -= 1
            self.pool.release()
        hold = self._hold
        if hold is not None and not hold.draining:
            hold.kick()
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
