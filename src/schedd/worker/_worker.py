"""The worker: handler registry, one stream per node, executions, graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import schedd
from schedd._clock import Clock, SystemClock
from schedd._metadata import AUTHORIZATION
from schedd.obs import (
    MetricsRecorder,
    MetricsServer,
    NoopRecorder,
    PrometheusRecorder,
    metrics_server,
)
from schedd.v1 import worker_pb2
from schedd.worker._attempts import Attempts
from schedd.worker._config import WorkerConfig, check_tls_files
from schedd.worker._connection import NodeConnection
from schedd.worker._credits import CreditPool
from schedd.worker._executor import EXECUTOR_KINDS, Executor, Runtime
from schedd.worker._handler import Handler, HandlerExecutor
from schedd.worker._ledger import Ledger
from schedd.worker._streams import Streams
from schedd.worker._threads import ThreadBridge

log = logging.getLogger(__name__)
_H = TypeVar("_H", bound=Handler)


class Worker:
    """Runs registered handlers for the executions schedd nodes dispatch to it.

    :meth:`start` opens one stream to *every* endpoint (each node dispatches its own
    partitions) and keeps them open, reconnecting with exponential backoff and full jitter,
    until :meth:`stop`. With ``discover`` (the default) it also asks the nodes for the live
    members and keeps a stream to each of them, nodes that join later included (see
    ``schedd.worker._discovery``), so one address of the cluster is enough. At most
    ``capacity`` executions run at once across all streams.

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

    An attempt runs on an :class:`~schedd.worker._executor.Executor`: the handler registered
    under its name, else the executor added for its target's kind (http, shell).

    Example::

        worker = Worker("127.0.0.1:7070", queues=["default"], data_dir="/var/lib/schedd-w1")
        # or: Worker(WorkerConfig(endpoints=("127.0.0.1:7070",), data_dir=Path(...)))

        @worker.handler("send_report")
        async def send_report(ctx: Context, payload: dict) -> dict:
            return {"sent": payload["to"]}

        worker.run_sync()

    Lifecycle: :meth:`run_sync` (its own event loop, until SIGINT or SIGTERM), :meth:`run`
    (until :meth:`stop`), or :meth:`start` and :meth:`stop` (``graceful``, ``timeout``) by
    hand, or ``async with Worker(...) as worker:`` (started on entry, stopped on exit). A
    worker runs once: a stopped worker is not started again (make a new one).
    """

    def __init__(
        self,
        config: WorkerConfig | str | Sequence[str],
        /,
        *,
        clock: Clock | None = None,
        recorder: MetricsRecorder | None = None,
        **options: Any,
    ) -> None:
        """Args:
        config: A :class:`WorkerConfig`, or (a convenience) the node endpoints, with the
            other fields of WorkerConfig as keyword ``options``.
        clock: Time for the ledger, held starts and results (default: the system clock).
        recorder: Where metrics go (default: nowhere).
        options: WorkerConfig fields, when ``config`` is not one.

        Raises:
            ValueError: A config value out of range, or a TLS file that cannot be used
                (naming it: ``tls.cert_file: cannot read ...``).
            TypeError: An unknown option, or options beside a WorkerConfig.
        """
        if isinstance(config, WorkerConfig):
            if options:
                raise TypeError(f"give a WorkerConfig or options, not both: {sorted(options)}")
        else:
            config = WorkerConfig(tuple([config] if isinstance(config, str) else config), **options)
        self.config = config
        check_tls_files(config)
        self.capacity = config.capacity
        self.prefetch = config.prefetch
        #: Resolved at start when the config leaves them out (a kept id, a temporary dir).
        self.worker_id = config.worker_id
        self.data_dir = config.data_dir
        self._clock: Clock = clock or SystemClock()
        if recorder is None and config.metrics_listen:
            recorder = PrometheusRecorder(("worker",))
        #: Where metrics go; the worker's gauges are registered on it at start.
        self._recorder: MetricsRecorder = recorder or NoopRecorder()
        #: Serves ``config.metrics_listen`` when the recorder is one that can be scraped.
        self._metrics_server: MetricsServer | None = None
        #: Executors by handler name, and by target kind (http, shell).
        self._handlers: dict[str, Executor] = {}
        self._kinds: dict[str, Executor] = {}
        #: The streams to the nodes: the given endpoints' and discovery's.
        self._streams = Streams(self, config, lambda: self._stopping)
        self._stopped: asyncio.Event | None = None
        self._stopping = False
        self._sync_loop: asyncio.AbstractEventLoop | None = None  # run_sync's, while it runs
        self._stop_task: asyncio.Future[None] | None = None
        self._pool_threads: ThreadPoolExecutor | None = None
        self.pool = CreditPool(self.capacity)
        self.holds = CreditPool(self.prefetch, hold=True)
        #: The attempts of the current run (made by start()).
        self._attempts: Attempts | None = None
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
        """Register ``fn`` under ``name`` (ValueError if empty or taken)."""
        if not name:
            raise ValueError("handler name must not be empty")
        if name in self._handlers:
            raise ValueError(f"a handler named {name!r} is already registered")
        self._handlers[name] = HandlerExecutor(fn)

    def add_executor(self, kind: str, executor: Executor) -> None:
        """Run jobs whose target is of ``kind`` (``"http"`` or ``"shell"``) on ``executor``;
        the worker then tells the nodes it accepts them. Add executors before :meth:`start`.

        Raises:
            ValueError: An unknown kind, or one that has an executor already.
        """
        if kind not in EXECUTOR_KINDS:
            raise ValueError(f"executor kind must be one of {', '.join(EXECUTOR_KINDS)}: {kind!r}")
        if kind in self._kinds:
            raise ValueError(f"an executor for {kind} jobs is already added")
        self._kinds[kind] = executor

    @property
    def handler_names(self) -> list[str]:
        """The registered handlers' names, sorted (what Hello tells the nodes)."""
        return sorted(self._handlers)

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        """The worker's token as call metadata (nothing without one)."""
        token = self.config.token
        return ((AUTHORIZATION, f"Bearer {token.strip()}"),) if token else ()

    def hello(self) -> worker_pb2.Hello:
        """What this worker tells a node when a stream opens: id, queues, what it runs."""
        return worker_pb2.Hello(
            worker_id=self.worker_id or "",
            queues=self.config.queues,
            handlers=self.handler_names,
            capacity=self.capacity,
            version=schedd.__version__,
            prefetch=self.prefetch,
            accepts_http="http" in self._kinds,
            accepts_shell="shell" in self._kinds,
        )

    def clock_ms(self) -> int:
        """The worker's clock (ms since the epoch)."""
        return self._clock.now_ms()

    async def starting(self) -> None:
        """Returns once no burst of held executions is starting (see HoldQueue.starting)."""
        if self._attempts is not None:
            await self._attempts.hold.starting()

    def flush_ledger(self) -> None:
        """Make every recorded result durable (the streams call it before each write)."""
        self.ledger.flush()

    def _register_gauges(self) -> None:
        attempts = self._attempts
        assert attempts is not None
        # A recorder written before MetricsRecorder.gauge existed has none: it gets no gauges.
        gauge = getattr(self._recorder, "gauge", None)
        if gauge is None:
            return
        gauge(
            "schedd_worker_slots_free",
            "Executions this worker may still start (capacity minus running)",
            lambda: self.capacity - attempts.active,
        )
        gauge(
            "schedd_worker_in_flight", "Executions running on this worker", lambda: attempts.active
        )
        # Per queue, for autoscaling on (summed over workers); a worker of several queues
        # counts in each.
        queues = self.config.queues
        gauge(
            "schedd_queue_free_slots",
            "Executions this worker may still start, per queue it consumes",
            lambda: {(q,): float(self.capacity - attempts.active) for q in queues},
            ["queue"],
        )
        gauge(
            "schedd_queue_slots",
            "This worker's capacity, per queue it consumes",
            lambda: {(q,): float(self.capacity) for q in queues},
            ["queue"],
        )
        gauge(
            "schedd_worker_held",
            "Executions held on this worker for a later instant",
            lambda: self.held_count,
        )
        gauge(
            "schedd_worker_streams",
            "Streams to nodes that are connected",
            lambda: sum(1 for c in self._streams.all() if c.live),
        )

    @property
    def held_count(self) -> int:
        """Executions held for their instant (not started yet)."""
        return len(self._attempts.hold) if self._attempts is not None else 0

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the ledger and start one stream per endpoint; returns at once (the streams
        connect, and reconnect, in the background). A worker starts once.

        Raises:
            RuntimeError: Started before.
        """
        if self._stopped is not None:
            raise RuntimeError("this worker was started before: make a new one")
        self._open()
        loop = asyncio.get_running_loop()
        assert self._pool_threads is not None
        self._attempts = Attempts(
            capacity=self.capacity,
            pool=self.pool,
            holds=self.holds,
            ledger=self.ledger,
            clock=self._clock,
            recorder=self._recorder,
            handlers=self._handlers,
            kinds=self._kinds,
            runtime=Runtime(loop, ThreadBridge(loop, self._pool_threads)),
            beat_interval=self._beat_interval,
        )
        self._stopped = asyncio.Event()
        cfg = self.config
        self._register_gauges()
        self._metrics_server = metrics_server(self._recorder, cfg.metrics_listen, tls=cfg.tls)
        if self._metrics_server is not None:
            await self._metrics_server.start()
        self._streams.start(self.call_metadata(), self._clock.monotonic)

    async def run(self) -> None:
        """:meth:`start`, then serve until :meth:`stop` has finished. Cancelled, it cancels
        everything running without results (the nodes see the streams break)."""
        await self.start()
        assert self._stopped is not None
        try:
            await self._stopped.wait()
        finally:
            if not self._stopping:  # cancelled, not stopped
                self._stopping = True
                await self._streams.stop(graceful=False)
                self._shut_down()

    async def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stop taking work and shut down; returns once stopped (a second call waits too).

        Held executions are answered CANCELLED at once (the node hands them out again). With
        ``graceful``, running attempts may finish for up to ``timeout`` seconds (default:
        ``config.shutdown_timeout_s``); then the rest are cancelled (reported as
        OUTCOME_CANCELLED, waited for up to ``config.cancel_timeout_s``), the results are
        written and the streams closed (``config.stream_close_timeout_s`` each).
        """
        self.pool.accepting = False
        self.holds.accepting = False
        if self._stopped is None:  # never started
            return
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        assert self._attempts is not None
        grace = (
            (self.config.shutdown_timeout_s if timeout is None else timeout) if graceful else None
        )
        try:
            await self._streams.stop_discovery()
            await self._attempts.drain(grace, self.config.cancel_timeout_s)
            await self._streams.stop(graceful=True)
            await self._close_executors()
            if self._metrics_server is not None:
                await self._metrics_server.stop()
        finally:
            self._shut_down()

    async def __aenter__(self) -> Worker:
        r"""``async with Worker(...) as worker:`` :meth:`start`\ s it; the block runs while the
        streams connect and serve in the background."""
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stops the worker when the block ends: gracefully (running attempts get up to
        ``config.shutdown_timeout_s``) when it ends normally; at once (running attempts
        cancelled, reported OUTCOME_CANCELLED; the nodes hand them out again) when it ends by
        an exception, cancellation included. The exception propagates."""
        await self.stop(graceful=exc_type is None)

    async def _close_executors(self) -> None:
        """Executors that hold resources (the HTTP executor's connection pool) may define
        ``async aclose()``; it is awaited once the attempts are drained."""
        for executor in self._kinds.values():
            aclose = getattr(executor, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:
                    log.exception("closing the %s executor failed", type(executor).__name__)

    def run_sync(self) -> None:
        """Run on an event loop of its own until stopped, then stop gracefully: on the main
        thread by SIGINT or SIGTERM; on any thread by :meth:`stop_soon` (signals reach only
        the main thread, so none is installed elsewhere)."""

        async def main() -> None:
            loop = asyncio.get_running_loop()
            self._sync_loop = loop
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, self._stop_now)
            try:
                await self.run()
            finally:
                self._sync_loop = None

        asyncio.run(main())

    def stop_soon(self) -> None:
        """Asks a worker run by :meth:`run_sync` to stop gracefully; callable from any
        thread (a no-op when it is not running)."""
        loop = self._sync_loop
        if loop is not None:
            loop.call_soon_threadsafe(self._stop_now)

    def _stop_now(self) -> None:
        self._stop_task = asyncio.ensure_future(self.stop())  # kept: a task is held weakly

    # ---- the set of streams (given endpoints, and discovery's) ------------------------------

    @property
    def endpoints(self) -> list[str]:
        """The endpoints this worker keeps a stream to (given and discovered), sorted."""
        return self._streams.endpoints

    @property
    def live_endpoints(self) -> list[str]:
        """The endpoints whose stream is open and welcomed now, sorted."""
        return self._streams.live_endpoints

    @property
    def _conns(self) -> dict[str, NodeConnection]:
        """The streams by endpoint (see :class:`~schedd.worker._streams.Streams`)."""
        return self._streams.conns

    # ---- local state: the data directory, the ledger, the thread pool -------------------------

    def _open(self) -> None:
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="schedd-worker-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.worker_id is None:
            self.worker_id = _stable_worker_id(self.data_dir)
        self.ledger = Ledger(self.data_dir / "ledger")
        ttl = self.config.ledger_ttl_s
        pruned = self.ledger.prune(self._clock.now_ms(), ttl)
        if pruned:
            log.info("pruned %d ledger entries older than %.0f s", pruned, ttl)
        self._pool_threads = ThreadPoolExecutor(
            self.config.thread_pool_size, thread_name_prefix="schedd-h"
        )
        self.pool = CreditPool(self.capacity)
        self.holds = CreditPool(self.prefetch, hold=True)

    def _shut_down(self) -> None:
        """Drop what is left (no results), stop the timers, close the ledger and the pool."""
        if self._attempts is not None:
            self._attempts.close()
        self.ledger.close()
        if self._pool_threads is not None:
            self._pool_threads.shutdown(wait=False, cancel_futures=True)
        if self.config.data_dir is None and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
        if self._stopped is not None:
            self._stopped.set()

    # ---- what the streams call (StreamOwner) ------------------------------------------------

    def stream_opened(self, conn: NodeConnection) -> None:
        """``conn`` is live: it shares in the dispatch and prefetch credits from now on."""
        self.pool.attach(conn)
        self.holds.attach(conn)

    def stream_ended(self, conn: NodeConnection) -> None:
        """Its unused credits come back; what it held is dropped (see Attempts.drop_stream)."""
        self.pool.detach(conn)
        self.holds.detach(conn)
        if self._attempts is not None:
            self._attempts.drop_stream(conn)

    def on_node_batch(self, conn: NodeConnection, batch: worker_pb2.NodeBatch) -> None:
        """Apply what a node sent (see :meth:`Attempts.on_node_batch`)."""
        assert self._attempts is not None
        self._attempts.on_node_batch(conn, batch)
        if batch.HasField("returned"):  # after its dispatches, which used credits first
            self.pool.returned(conn, batch.returned.credits)
            self.holds.returned(conn, batch.returned.prefetch_credits)

    def _beat_interval(self) -> float:
        """``heartbeat_interval_s``, else the shortest interval a connected node asked for."""
        if self.config.heartbeat_interval_s is not None:
            return self.config.heartbeat_interval_s
        asked = [
            c.welcome.heartbeat_interval_ms for c in self._conns.values() if c.welcome is not None
        ]
        return (min(asked) if asked else 2000) / 1000.0


def _stable_worker_id(data_dir: Path) -> str:
    """The id kept in ``data_dir/worker_id``, created on first use (host-pid-random)."""
    path = data_dir / "worker_id"
    if path.exists():
        return path.read_text().strip()
    wid = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    path.write_text(wid + "\n")
    return wid
