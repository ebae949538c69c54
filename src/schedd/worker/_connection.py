"""One worker stream to one node, and the credit pool the worker's streams share."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from schedd.v1 import worker_pb2, worker_pb2_grpc

if TYPE_CHECKING:
    from schedd.worker._worker import Worker

log = logging.getLogger(__name__)

#: Client keepalive: ping every 25 s, also while idle (nodes permit it, see LIBRARIES.md).
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", 25_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # A node coalesces what accumulates while a send is in flight into one message.
    ("grpc.max_receive_message_length", 64 << 20),
)
_FLUSH_S = 0.002
_MAX_BATCH = 512
#: An outgoing WorkerBatch is sealed (and the next one started) at this many items, or once
#: its results carry this many bytes of output and errors: a node's default receive limit is
#: 4 MiB, and a burst's results pile up while a write is in flight.
MAX_ITEMS = 4096
MAX_RESULT_BYTES = 3 << 20
_BACKOFF_MIN_S = 0.1
_BACKOFF_MAX_S = 5.0


class CreditPool:
    """Slots for ``capacity`` concurrent executions, granted out to live streams.

    Invariant: free + (credits granted and unused, over all streams) + (executions holding a
    slot) == capacity. A freed slot goes to the live stream with the fewest outstanding
    (unused + running), so a node that joins later gets its share as work finishes.

    With ``hold=True`` the pool counts prefetch credits instead: slots for executions sent
    ahead of their instant (a stream's ``hold_unused`` and ``held``, granted as
    ``prefetch_credits``).
    """

    def __init__(self, capacity: int, *, hold: bool = False) -> None:
        self.capacity = capacity
        self.free = capacity
        self.accepting = True
        self.hold = hold
        self._conns: list[NodeConnection] = []
        self._held = 0

    def attach(self, conn: NodeConnection) -> None:
        self._conns.append(conn)
        self.distribute()

    def detach(self, conn: NodeConnection) -> None:
        if conn in self._conns:
            self._conns.remove(conn)
        if self.hold:
            self.free += conn.hold_unused
            conn.hold_unused = 0
        else:
            self.free += conn.unused
            conn.unused = 0
        self.distribute()

    def release(self, n: int = 1) -> None:
        """Executions (or unused dispatch credits) gave their slots back."""
        self.free += n
        if not self._held:
            self.distribute()

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Collect the slots released inside the block and grant them once, at its end (a
        NodeBatch of executions that finish at once gives one credit grant, not one each)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held:
                self.distribute()

    def _outstanding(self, conn: NodeConnection) -> int:
        return conn.hold_unused + conn.held if self.hold else conn.unused + conn.running

    def _grant(self, conn: NodeConnection, n: int) -> None:
        if self.hold:
            conn.grant_hold(n)
        else:
            conn.grant(n)

    def distribute(self) -> None:
        if not (self.accepting and self.free > 0 and self._conns):
            return
        if len(self._conns) == 1:
            self._grant(self._conns[0], self.free)
            self.free = 0
            return
        while self.free > 0:
            conn = min(self._conns, key=self._outstanding)
            self._grant(conn, 1)
            self.free -= 1


class NodeConnection:
    """Keeps a stream to one node open (reconnecting with backoff and jitter) until stopped.

    Outgoing items are buffered into one WorkerBatch and written at most ~2 ms after the first
    item; the ledger is flushed before each write, so no Result leaves before it is recorded.
    """

    def __init__(self, worker: Worker, endpoint: str) -> None:
        self.endpoint = endpoint
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
        #: The node's clock minus the worker's, measured at the Welcome (ms).
        self.clock_offset_ms = 0
        self.messages_received = 0
        self._worker = worker
        self._message, self._batch = _new_message()
        self._items = 0
        self._bytes = 0
        self._sealed: deque[worker_pb2.WorkerMessage] = deque()
        # Started notices not yet written: execution id -> (token, started ms). One whose
        # Result leaves in the same batch is dropped (the Result says all it would).
        self._started: dict[str, tuple[int, int]] = {}
        self._wake = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._closing = asyncio.Event()

    # ---- buffering ----------------------------------------------------------------------------

    def grant(self, n: int) -> None:
        self.unused += n
        self._batch.credits += n
        self._added()

    def grant_hold(self, n: int) -> None:
        self.hold_unused += n
        self._batch.prefetch_credits += n
        self._added()

    def add_started(self, execution_id: str, token: int, started_ms: int) -> None:
        if not self.live:
            return
        self._started[execution_id] = (token, started_ms)
        self._added()

    def add_heartbeat(self, execution_id: str, token: int, checkpoint: bytes | None) -> None:
        hb = self._batch.heartbeats.add(execution_id=execution_id, fencing_token=token)
        if checkpoint is not None:
            hb.checkpoint = checkpoint
            hb.has_checkpoint = True
        self._added()

    def new_result(self) -> worker_pb2.Result:
        """A Result to fill in: already queued in the outgoing batch when the stream is live
        (built in place, never copied), else a loose one (it stays in the ledger only)."""
        if not self.live:
            return worker_pb2.Result()
        result = self._batch.results.add()
        self._added()  # may seal the batch it is in: it is still filled in place
        return result

    def add_result(self, result: worker_pb2.Result) -> None:
        if not self.live:
            log.debug(
                "stream to %s is down; result %s stays in the ledger only",
                self.endpoint,
                result.execution_id,
            )
            return
        self._batch.results.append(result)
        self._added()

    def result_bytes(self, n: int) -> None:
        """The result just queued carries ``n`` bytes of output and error."""
        self._bytes += n
        if self._bytes >= MAX_RESULT_BYTES and self.live:
            self._seal()

    def _added(self) -> None:
        if not self.live:
            return
        self._items += 1
        if self._items >= _MAX_BATCH:
            if self._items >= MAX_ITEMS:
                self._seal()
            self._wake.set()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(_FLUSH_S, self._wake.set)

    def _seal(self) -> None:
        """Close the current batch as a message of its own; the writer sends it next."""
        msg = self._detach()
        if msg is not None:
            self._sealed.append(msg)
        self._wake.set()

    def _take(self) -> worker_pb2.WorkerMessage | None:
        if self._sealed:
            return self._sealed.popleft()
        return self._detach()

    def _detach(self) -> worker_pb2.WorkerMessage | None:
        """The current batch as a message (its Started notices added), replaced by a new one."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._items and not self._batch.credits and not self._batch.prefetch_credits:
            return None
        started = self._started
        if started:
            batch = self._batch
            if batch.results:
                for r in batch.results:
                    started.pop(r.execution_id, None)
            add = batch.started.add
            for eid, (token, ms) in started.items():
                add(execution_id=eid, fencing_token=token, started_ms=ms)
            started.clear()
        msg = self._message
        self._message, self._batch = _new_message()
        self._items = self._bytes = 0
        return msg

    # ---- the stream ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, serve, and reconnect until :meth:`close` (or cancellation)."""
        attempt = 0
        while not self._closing.is_set():
            try:
                welcomed = await self._serve_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("stream to %s failed: %s", self.endpoint, _describe(e))
                welcomed = False
            if self._closing.is_set():
                return
            attempt = 0 if welcomed else attempt + 1
            delay = random.uniform(0, min(_BACKOFF_MAX_S, _BACKOFF_MIN_S * 2**attempt))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), timeout=delay)

    async def close(self) -> None:
        """End the stream after writing what is buffered (the node then ends its side)."""
        self._closing.set()
        self._wake.set()

    async def _serve_once(self) -> bool:
        async with grpc.aio.insecure_channel(self.endpoint, options=CHANNEL_OPTIONS) as channel:
            call = worker_pb2_grpc.WorkerStub(channel).Connect()
            await call.write(worker_pb2.WorkerMessage(hello=self._worker.hello()))
            first = await call.read()
            if not isinstance(first, worker_pb2.NodeMessage) or not first.HasField("welcome"):
                raise ConnectionError(f"{self.endpoint} did not answer Hello with Welcome")
            self.welcome = first.welcome
            if first.welcome.now_ms:
                self.clock_offset_ms = first.welcome.now_ms - self._worker.clock_ms()
            log.info("connected to node %s at %s", first.welcome.node_id, self.endpoint)
            self.live = True
            self._worker.pool.attach(self)
            self._worker.holds.attach(self)
            writer = asyncio.create_task(self._write_loop(call))
            try:
                await self._read_loop(call)
            finally:
                self.live = False
                self._worker.pool.detach(self)
                self._worker.holds.detach(self)
                self._worker.stream_ended(self)
                writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)
                self._message, self._batch = _new_message()
                self._items = self._bytes = 0
                self._sealed.clear()
                self._started.clear()
                call.cancel()
            return True

    async def _read_loop(self, call: Any) -> None:
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                return
            self.messages_received += 1
            kind = msg.WhichOneof("kind")
            if kind == "batch":
                self._worker.on_node_batch(self, msg.batch)
            elif kind == "welcome":
                self.welcome = msg.welcome
            else:
                raise ConnectionError(f"unknown NodeMessage kind {kind!r} from {self.endpoint}")

    async def _write_loop(self, call: Any) -> None:
        while True:
            await self._wake.wait()
            await self._worker.starting()  # a burst of held starts goes first
            self._wake.clear()
            while True:  # sealed batches first, then the current one
                self._worker.ledger.flush()
                msg = self._take()
                if msg is None:
                    break
                await call.write(msg)
            if self._closing.is_set():
                await call.done_writing()
                return


def _new_message() -> tuple[worker_pb2.WorkerMessage, worker_pb2.WorkerBatch]:
    """A WorkerMessage and its batch, filled in place (wrapping it later would copy it)."""
    msg = worker_pb2.WorkerMessage()
    batch = msg.batch
    batch.SetInParent()
    return msg, batch


def _describe(e: BaseException) -> str:
    if isinstance(e, grpc.aio.AioRpcError):
        return f"{e.code().name}: {e.details()}"
    return f"{type(e).__name__}: {e}"
