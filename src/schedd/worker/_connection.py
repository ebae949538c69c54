"""One worker stream to one node (the credit pool its streams share is in ``_credits``).

A connection knows the worker only through :class:`StreamOwner`, the few calls it makes
into it, so this module imports nothing else of the worker's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from typing import Any, Protocol

import grpc
import grpc.aio

from schedd._handshake import diagnose
from schedd._limits import message_size_options
from schedd._tls import TlsFiles
from schedd.v1 import worker_pb2, worker_pb2_grpc
from schedd.worker._outbox import Outbox

log = logging.getLogger(__name__)

#: Client keepalive: ping every 25 s, also while idle (nodes permit it, see LIBRARIES.md).
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", 25_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # A node coalesces what accumulates while a send is in flight into one message (sealed
    # at 3 MiB: dispatch/_session.py); the limit is explicit both ways.
    *message_size_options(),
    # A channel of its own for each attempt, with a fresh connection attempt: from the shared
    # (process-wide) subchannel pool a new channel inherits the failure backoff of an earlier
    # one to the same address (gRPC's own, 1 s growing 1.6x), and a node restarted on the same
    # port stayed unreached for seconds after it listened (a joining node then took its share
    # with no worker connected). The membership query's channel stays open across rounds:
    # its backoff is capped at the discovery interval's scale.
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
)
#: Failures a stream is expected to meet (the node went away, the network broke, the node
#: broke the protocol): logged as one line. Anything else is a bug and logged with its
#: traceback; either way the connection reconnects.
_EXPECTED_FAILURES = (grpc.RpcError, ConnectionError, OSError, TimeoutError)


def open_channel(
    endpoint: str, tls: TlsFiles | None, options: tuple[tuple[str, Any], ...] = CHANNEL_OPTIONS
) -> grpc.aio.Channel:
    """A channel to a node: plaintext, or TLS with ``tls``'s CA, certificate and name."""
    if tls is None:
        return grpc.aio.insecure_channel(endpoint, options=options)
    opts = [*options, *tls.channel_options()]
    return grpc.aio.secure_channel(endpoint, tls.channel_credentials(), opts)


class StreamOwner(Protocol):
    """What a :class:`NodeConnection` needs from the worker it serves (the worker is one)."""

    def hello(self) -> worker_pb2.Hello:
        """The Hello that opens every stream."""
        ...

    def clock_ms(self) -> int:
        """The worker's clock (ms since the epoch), to measure the node's against."""
        ...

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        """Metadata every stream opens with (its token, on clusters with auth on)."""
        ...

    def stream_opened(self, conn: NodeConnection) -> None:
        """``conn`` is live: it may be granted credits."""

    def on_node_batch(self, conn: NodeConnection, batch: worker_pb2.NodeBatch) -> None:
        """Apply what a node sent (cancels, acks, dispatches)."""

    def stream_ended(self, conn: NodeConnection) -> None:
        """``conn``'s stream ended: take back its credits and what it held."""

    async def starting(self) -> None:
        """Returns once no burst of held executions is starting (writes wait for it)."""

    def flush_ledger(self) -> None:
        """Make every recorded result durable (called before each write)."""


class NodeConnection:
    """Keeps a stream to one node open (reconnecting with backoff and jitter) until stopped.

    Outgoing items are buffered into one WorkerBatch and written at most ~2 ms after the first
    item; the ledger is flushed before each write, so no Result leaves before it is recorded.
    """

    def __init__(
        self,
        owner: StreamOwner,
        endpoint: str,
        *,
        backoff: tuple[float, float] = (0.1, 5.0),
        close_timeout_s: float = 5.0,
        tls: TlsFiles | None = None,
    ) -> None:
        """Args:
        owner: The worker this stream serves.
        endpoint: The node's ``host:port``.
        backoff: The first and the longest reconnect delay, seconds (full jitter).
        close_timeout_s: What :meth:`stop` waits for a graceful close by default.
        tls: TLS to the node (None: plaintext).
        """
        self.endpoint = endpoint
        self.tls = tls
        self.welcome: worker_pb2.Welcome | None = None
        self.live = False
        #: Credits granted on the current stream and not yet used by a dispatch.
        self.unused = 0
        #: Executions holding a slot whose results go out on this connection.
        self.running = 0
        #: Prefetch credits granted on the current stream and not yet used, and executions
        #: this stream sent ahead of their instant that hold a prefetch slot.
        self.hold_unused = 0
        self.held = 0
        #: A revoke of dispatch (prefetch) credits was sent and not yet answered.
        self.revoking = False
        self.revoking_hold = False
        #: The node's latest promise that it holds its partitions until then (its clock, ms;
        #: ``NodeBatch.live_until_ms``): held executions start only before it.
        self.node_live_until_ms = 0
        #: The node's clock minus the worker's, measured at the Welcome (ms).
        self.clock_offset_ms = 0
        self.messages_received = 0
        self._owner = owner
        #: This worker's id, from the Hello that opened the latest stream (for log fields).
        self._worker_id = ""
        self._backoff = backoff
        self._close_timeout_s = close_timeout_s
        self._task: asyncio.Task[None] | None = None
        #: What the current stream has to say, batched (see ``schedd.worker._outbox``).
        self.outbox = Outbox()
        self._closing = asyncio.Event()
        self._retry = asyncio.Event()

    # ---- buffering ----------------------------------------------------------------------------

    def grant(self, n: int, *, soon: bool = True) -> None:
        """``n`` more dispatch credits for the node; ``soon``: it may be waiting for them
        (else they may linger with the results, see ``schedd.worker._outbox``)."""
        self.unused += n
        self.outbox.batch.credits += n
        self._added(soon=soon)

    def grant_hold(self, n: int, *, soon: bool = True) -> None:
        self.hold_unused += n
        self.outbox.batch.prefetch_credits += n
        self._added(soon=soon)

    def revoke(self, n: int, *, hold: bool) -> None:
        """Ask the node to give back up to ``n`` unused (prefetch) credits of this stream."""
        if not self.live:
            return
        if hold:
            self.revoking_hold = True
            self.outbox.batch.revoke.prefetch_credits += n
        else:
            self.revoking = True
            self.outbox.batch.revoke.credits += n
        self._added()

    def add_started(self, execution_id: str, token: int, started_ms: int) -> None:
        if not self.live:
            return
        self.outbox.add_started(execution_id, token, started_ms)

    def add_not_here(self, execution_id: str) -> None:
        """The answer to a probe for an execution neither running nor in the ledger here."""
        if not self.live:
            return
        self.outbox.batch.not_here.append(execution_id)
        self._added()

    def add_heartbeat(self, execution_id: str, token: int, checkpoint: bytes | None) -> None:
        hb = self.outbox.batch.heartbeats.add(execution_id=execution_id, fencing_token=token)
        if checkpoint is not None:
            hb.checkpoint = checkpoint
            hb.has_checkpoint = True
        self._added(soon=False)

    def new_result(self) -> worker_pb2.Result:
        """A Result to fill in: already queued in the outgoing batch when the stream is live
        (built in place, never copied), else a loose one (it stays in the ledger only)."""
        if not self.live:
            return worker_pb2.Result()
        result = self.outbox.batch.results.add()
        self._added(soon=False)  # may seal the batch it is in: it is still filled in place
        return result

    def add_result(self, result: worker_pb2.Result) -> None:
        if not self.live:
            log.debug(
                "stream to %s is down; result %s stays in the ledger only",
                self.endpoint,
                result.execution_id,
            )
            return
        self.outbox.batch.results.append(result)
        self._added(soon=False)

    def result_bytes(self, n: int) -> None:
        """The result just queued carries ``n`` bytes of output and error."""
        if self.live:
            self.outbox.result_bytes(n)

    def _added(self, *, soon: bool = True) -> None:
        if self.live:
            self.outbox.added(soon=soon)

    # ---- the stream ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start keeping the stream open, in a task of its own (returns at once)."""
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"schedd-worker-{self.endpoint}")
            self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        # run() turns every Exception into a reconnect: only a BaseException (SystemExit,
        # KeyboardInterrupt) ends it early. Say so rather than vanish.
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "stream to %s stopped for good", self.endpoint,
                exc_info=task.exception(), extra=self._log_fields(),
            )  # fmt: skip

    async def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """End the stream and its task.

        With ``graceful``, what is buffered is written and the node is given up to ``timeout``
        seconds (default: the ``close_timeout_s`` given at construction) to end its side;
        then, or at once without ``graceful``, the task is cancelled. Returns once it ended.
        """
        self._closing.set()
        self.outbox.wake.set()
        task = self._task
        if task is None:
            return
        if graceful:
            await asyncio.wait(
                {task}, timeout=self._close_timeout_s if timeout is None else timeout
            )
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        """Begin a graceful close: end the stream after writing what is buffered (the node
        then ends its side, and :meth:`run` returns)."""
        self._closing.set()
        self.outbox.wake.set()

    async def run(self) -> None:
        """Connect, serve, and reconnect until :meth:`close` (or cancellation).

        Every failure of a stream, expected (the node went away) or not (a bug: logged with
        its traceback), ends in a reconnect after a backoff with full jitter, starting again
        from the shortest delay once a stream was welcomed.
        """
        attempt = 0
        low, high = self._backoff
        while not self._closing.is_set():
            try:
                welcomed = await self._serve_once()
            except asyncio.CancelledError:
                raise
            except _EXPECTED_FAILURES as e:
                log.warning(
                    "stream to %s failed: %s; retrying", self.endpoint, await self._why(e),
                    extra=self._log_fields(),
                )  # fmt: skip
                welcomed = False
            except Exception:
                log.exception(
                    "stream to %s crashed; reconnecting", self.endpoint, extra=self._log_fields()
                )
                welcomed = False
            if self._closing.is_set():
                return
            attempt = 0 if welcomed else attempt + 1
            delay = reconnect_delay(attempt, low, high)
            if self._retry.is_set():
                log.debug(
                    "reconnecting to %s now (its node is live)", self.endpoint,
                    extra=self._log_fields(),
                )  # fmt: skip
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._pause_ends(), timeout=delay)

    async def _why(self, e: BaseException) -> str:
        """What went wrong, in words: TLS named as the reason when it is (gRPC only says
        "Socket closed" when a node refuses this worker's certificate)."""
        if _connect_failed(e):
            diagnosis = await diagnose(self.endpoint, self.tls)
            if diagnosis is not None:
                return f"TLS: {diagnosis}"
        return _describe(e)

    def _log_fields(self) -> dict[str, object]:
        """``extra=`` of this stream's log lines: the worker, and the node once it answered."""
        fields: dict[str, object] = {}
        if self.welcome is not None and self.welcome.node_id:
            fields["node"] = self.welcome.node_id
        if self._worker_id:
            fields["worker"] = self._worker_id
        return fields

    def retry_now(self) -> None:
        """Cut a reconnect pause short: discovery saw this endpoint's node live (restarted
        on the same address). Without it a worker could stay away from a node that was back
        for up to ``reconnect_max_s`` more; nothing happens while a stream is open."""
        if not self.live:
            self._retry.set()

    async def _pause_ends(self) -> None:
        closing = asyncio.ensure_future(self._closing.wait())
        retry = asyncio.ensure_future(self._retry.wait())
        try:
            await asyncio.wait((closing, retry), return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            retry.cancel()

    async def _serve_once(self) -> bool:
        self._retry.clear()
        async with open_channel(self.endpoint, self.tls) as channel:
            call = worker_pb2_grpc.WorkerStub(channel).Connect(
                metadata=self._owner.call_metadata() or None
            )
            hello = self._owner.hello()
            self._worker_id = hello.worker_id
            await call.write(worker_pb2.WorkerMessage(hello=hello))
            first = await call.read()
            if not isinstance(first, worker_pb2.NodeMessage) or not first.HasField("welcome"):
                raise ConnectionError(f"{self.endpoint} did not answer Hello with Welcome")
            self.welcome = first.welcome
            if first.welcome.now_ms:
                self.clock_offset_ms = first.welcome.now_ms - self._owner.clock_ms()
            self.node_live_until_ms = first.welcome.live_until_ms
            log.info(
                "connected to node %s at %s", first.welcome.node_id, self.endpoint,
                extra=self._log_fields(),
            )  # fmt: skip
            self.live = True
            self._owner.stream_opened(self)
            try:
                await self._serve(call)
            finally:
                self.live = False
                self._owner.stream_ended(self)
                self.outbox.reset()
                call.cancel()
            return True

    async def _serve(self, call: Any) -> None:
        """Read and write until the node ends the stream; a writer that fails ends it too
        (raising what the writer raised), so neither half is ever silently gone."""
        reader = asyncio.create_task(self._read_loop(call))
        writer = asyncio.create_task(self._write_loop(call))
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if writer.done() and not writer.cancelled() and writer.exception() is not None:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
                writer.result()  # raises the writer's failure
            await reader  # the writer ended cleanly (closing): read to the node's end
        finally:
            for t in (reader, writer):
                t.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)

    def _keepalive_s(self) -> float:
        """1 s, or the node's heartbeat interval (from its Welcome) if shorter: well under
        the node's ``silent_after_ms``."""
        ms = self.welcome.heartbeat_interval_ms if self.welcome is not None else 0
        return min(1.0, ms / 1000.0) if ms > 0 else 1.0

    async def _read_loop(self, call: Any) -> None:
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                return
            self.messages_received += 1
            kind = msg.WhichOneof("kind")
            if kind == "batch":
                if msg.batch.live_until_ms:
                    self.node_live_until_ms = msg.batch.live_until_ms
                self._owner.on_node_batch(self, msg.batch)
            elif kind == "welcome":
                self.welcome = msg.welcome
            else:
                raise ConnectionError(f"unknown NodeMessage kind {kind!r} from {self.endpoint}")

    async def _write_loop(self, call: Any) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            idle = self._keepalive_s() - (loop.time() - last)
            if idle > 0 and not self.outbox.wake.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.outbox.wake.wait(), idle)
            if not self.outbox.wake.is_set():
                # Nothing to say for a heartbeat interval: say so, or the node takes this
                # stream for a frozen worker's and hands what it holds to another.
                await call.write(worker_pb2.WorkerMessage(batch=worker_pb2.WorkerBatch()))
                last = loop.time()
                continue
            await self._owner.starting()  # a burst of held starts goes first
            self.outbox.wake.clear()
            while True:  # sealed batches first, then the current one
                self._owner.flush_ledger()
                msg = self.outbox.take()
                if msg is None:
                    break
                await call.write(msg)
                last = loop.time()
            if self._closing.is_set():
                await call.done_writing()
                return


def reconnect_delay(
    attempt: int, low: float, high: float, rng: random.Random | None = None
) -> float:
    """The pause before reconnect ``attempt`` (0 after a stream that was welcomed): uniform in
    ``[0, min(high, low * 2**attempt)]`` (full jitter, so workers that lost the same node do
    not all come back in the same instant).

    The exponent is capped: ``low * 2**attempt`` overflows a float after ~1,000 failures in a
    row (under an hour of a node down at the 5 s cap), which would end the stream for good.
    """
    ceiling = min(high, low * 2 ** min(attempt, 60))
    return (rng or _RNG).uniform(0, ceiling)


_RNG = random.Random()


def _connect_failed(e: BaseException) -> bool:
    """Whether ``e`` is gRPC failing to connect for a reason other than a refused connection
    (nothing listening): where TLS may be why."""
    if not isinstance(e, grpc.aio.AioRpcError) or e.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    details = e.details() or ""
    return "failed to connect" in details and "refused" not in details.lower()


def _describe(e: BaseException) -> str:
    if isinstance(e, grpc.aio.AioRpcError):
        return f"{e.code().name}: {e.details()}"
    return f"{type(e).__name__}: {e}"
