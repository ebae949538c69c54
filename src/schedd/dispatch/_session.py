"""One worker stream on the node: what the worker said, its credits, and the outgoing batch."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping

from schedd._errors import InvalidArgument
from schedd.dispatch._config import DispatchStats, InFlight
from schedd.v1 import scheduler_pb2, worker_pb2

#: What :meth:`WorkerSession.next_message` returns when the stream is to end.
END = None
#: A NodeMessage is sealed at about this many bytes of payloads, checkpoints and targets, so
#: it stays under gRPC's default 4 MiB receive limit for any worker (one dispatch carries at
#: most 256 KiB of payload; schedd's own workers accept up to 64 MiB).
MAX_MESSAGE_BYTES = 3 << 20


def _new_message() -> tuple[worker_pb2.NodeMessage, worker_pb2.NodeBatch]:
    msg = worker_pb2.NodeMessage()
    return msg, msg.batch


class WorkerSession:
    """The node's view of one connected worker stream.

    Items go into one :class:`~schedd.v1.worker_pb2.NodeBatch`, which becomes *ready* when
    ``max_batch`` items are in it, ``flush_interval_ms`` after its first item, or on
    :meth:`flush`. The stream's writer takes the ready batch with :meth:`next_message`. While
    the writer is still sending the previous message, new items join the ready batch instead
    of queueing behind it as messages of their own: a stream sends one message at a time
    (each waits for its send to complete, a loop pass or more on a busy node), so in a burst
    one message of everything that accumulated goes out, not many of ``max_batch`` each.
    A batch is sealed (and the next one started) at ``max_message_bytes`` of payload, so a
    message stays under the worker's receive limit, and at half the worker's capacity (at
    least ``max_batch``, at most four times it).
    """

    def __init__(
        self,
        session_id: int,
        hello: worker_pb2.Hello,
        *,
        connected_ms: int,
        max_batch: int,
        flush_interval_ms: int,
        stats: DispatchStats,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        promise: Callable[[], int] | None = None,
    ) -> None:
        self.session_id = session_id
        self.hello = hello
        #: The tenants its token lets it be sent (None: any), and the token's id ("": none).
        self.tenants: frozenset[str] | None = None
        self.actor = ""
        #: The status the stream is aborted with when it ends with an error.
        self.error_code = "INVALID_ARGUMENT"
        self.worker_id = hello.worker_id
        self.connected_ms = connected_ms
        #: Credits granted and not yet used by a dispatch.
        self.credits = 0
        #: Prefetch credits granted and not yet used by a dispatch sent ahead of its instant
        #: (only a worker whose Hello asked for ``prefetch`` grants them).
        self.hold_credits = 0
        #: Execution ids in flight on this stream.
        self.in_flight: set[str] = set()
        self.closed = False
        #: When the worker last sent anything (dispatcher's clock): workers send at least a
        #: keepalive every heartbeat interval, so a long silence means a frozen worker.
        self.last_heard_ms = connected_ms
        #: Silent past the dispatcher's ``silent_after_ms``: it gets nothing more (no
        #: dispatch, hold, probe or promise) until it speaks again.
        self.silent = False
        #: The latest promise sent on this stream (``live_until_ms``, node clock): held work
        #: can start on the worker until then, so it is handed elsewhere only after it.
        self.promised_ms = 0
        #: Set by the reader when the worker broke the protocol; the stream aborts with it.
        self.error: str | None = None
        self._max_batch = max(1, max_batch)
        self._flush_s = max(0, flush_interval_ms) / 1000.0
        self._max_bytes = max_message_bytes
        # Coalescing stops at half the worker's capacity, so a burst is still spread
        # over several messages and the worker runs the first while the next is on its way
        # (one message of the whole credit window made node and worker take turns).
        self._max_items = max(self._max_batch, min(4 * self._max_batch, hello.capacity // 2))
        self._stats = stats
        # The node's promise to a worker that holds executions (see _vouch): every message
        # carries a fresh one, so held work never waits on the next periodic vouch.
        self._promise = promise
        self._message, self._batch = _new_message()
        self._items = 0
        self._bytes = 0
        self._ready = False
        self._sealed: deque[worker_pb2.NodeMessage] = deque()
        self._writer: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def load(self) -> float:
        """In-flight executions relative to capacity (lower: less loaded)."""
        return len(self.in_flight) / max(1, self.hello.capacity)

    def send_dispatch(self, dispatch: worker_pb2.Dispatch, held: bool = False) -> None:
        """Buffer a dispatch, using one credit (a prefetch credit if ``held``; the caller
        checked there was one)."""
        if held:
            self.hold_credits -= 1
        else:
            self.credits -= 1
        self.in_flight.add(dispatch.execution_id)
        size = len(dispatch.payload) + len(dispatch.checkpoint) + len(dispatch.target)
        if size > 4096 and self._items and self._bytes + size > self._max_bytes:
            self._seal()
        self._bytes += size
        self._batch.dispatches.append(dispatch)
        self._stats.dispatches_sent += 1
        self._added()

    def send_probe(self, dispatch: worker_pb2.Dispatch) -> None:
        """Buffer a probe (``Dispatch.probe``): no credit, not in flight (see ``_probes``)."""
        self._batch.dispatches.append(dispatch)
        self._added()

    def send_cancel(self, execution_id: str, token: int, reason: str) -> None:
        self._batch.cancels.add(execution_id=execution_id, fencing_token=token, reason=reason)
        self._stats.cancels_sent += 1
        self._added()

    def send_acks(self, acks: list[worker_pb2.ResultAck]) -> None:
        """The node's answers to this stream's results: only refusals are sent. A worker acts
        on no other (an accepted result needs nothing more from it), and at 1k fires/s the
        accepted ones made most of the node's messages."""
        self._stats.results_answered += len(acks)
        for ack in acks:
            if ack.accepted:
                continue
            self._batch.acks.append(ack)
            self._stats.acks_sent += 1
            self._added()

    def grant(self, batch: worker_pb2.WorkerBatch) -> bool:
        """Apply the credits of one of the worker's batches: granted, prefetch granted, and
        asked back (:meth:`give_back_credits`).

        Returns:
            Whether credits to dispatch were granted (a pump may send more now).

        Raises:
            InvalidArgument: a negative grant, or prefetch credits from a worker whose Hello
                asked for none.
        """
        if batch.credits < 0:
            raise InvalidArgument("batch.credits", f"must not be negative, got {batch.credits}")
        if batch.prefetch_credits < 0:
            raise InvalidArgument(
                "batch.prefetch_credits", f"must not be negative, got {batch.prefetch_credits}"
            )
        self.credits += batch.credits
        if batch.prefetch_credits:
            if self.hello.prefetch <= 0:
                raise InvalidArgument(
                    "batch.prefetch_credits", "granted by a worker whose Hello asked for none"
                )
            self.hold_credits += batch.prefetch_credits
        if batch.HasField("revoke"):
            self.give_back_credits(batch.revoke)
        return batch.credits > 0

    def give_back_credits(self, revoke: worker_pb2.Credits) -> None:
        """The worker asks for unused credits back (to grant them to another node): return
        up to what it asked of those not used yet, and say how many, now."""
        credits = min(max(0, revoke.credits), self.credits)
        prefetch = min(max(0, revoke.prefetch_credits), self.hold_credits)
        self.credits -= credits
        self.hold_credits -= prefetch
        returned = self._batch.returned
        returned.SetInParent()  # present even when nothing came back: the answer is the point
        returned.credits += credits
        returned.prefetch_credits += prefetch
        self._added()
        self.flush()

    def send_vouch(self, live_until_ms: int) -> None:
        """Promises the worker this node holds its fences until then (see ``_vouch``); sent now."""
        self._batch.live_until_ms = live_until_ms
        self._added()
        self.flush()

    def _added(self) -> None:
        self._items += 1
        if self._ready:
            if self._items >= self._max_items:
                self._seal()
            return  # joins the batch the writer takes next
        if self._items >= self._max_batch:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._flush_s, self.flush)

    def flush(self) -> None:
        """Make the buffered batch (if any) ready for the writer now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._items or self.closed:
            return
        self._ready = True
        self._wake_writer()

    def _seal(self) -> None:
        """Close the current batch as a message of its own (it reached a size cap)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._sealed.append(self._detach())
        self._wake_writer()

    def _detach(self) -> worker_pb2.NodeMessage:
        """The current message, replaced by a new empty one."""
        msg = self._message
        if self._promise is not None and not self.silent:
            msg.batch.live_until_ms = self._promise()
        self.promised_ms = max(self.promised_ms, msg.batch.live_until_ms)
        self._stats.node_messages_sent += 1
        self._message, self._batch = _new_message()
        self._items = self._bytes = 0
        self._ready = False
        return msg

    def _wake_writer(self) -> None:
        if self._writer is not None and not self._writer.done():
            self._writer.set_result(None)

    def take(self) -> worker_pb2.NodeMessage | None:
        """The next message to send, if one is ready (sealed ones first)."""
        if self._sealed:
            return self._sealed.popleft()
        if not self._ready or not self._items:
            return None
        return self._detach()

    async def next_message(self) -> worker_pb2.NodeMessage | None:
        """Waits for the next message to send; None once the session ended and all went."""
        while True:
            msg = self.take()
            if msg is not None:
                return msg
            if self.closed:
                return END
            self._writer = asyncio.get_running_loop().create_future()
            try:
                await self._writer
            finally:
                self._writer = None

    def end(self, error: str | None = None, code: str = "INVALID_ARGUMENT") -> None:
        """Flush and then end the stream (with ``error``: abort it with status ``code``)."""
        if self.closed:
            return
        if error is not None and self.error is None:
            self.error = error
            self.error_code = code
        self.flush()
        self.closed = True
        self._wake_writer()

    def held(self, in_flight: Mapping[str, InFlight], now_ms: int) -> int:
        """How many of its in-flight executions the worker holds for a later instant."""
        flights = [in_flight.get(eid) for eid in self.in_flight]
        return sum(1 for f in flights if f is not None and f.dispatch.start_at_ms > now_ms)

    def status(self, node_id: str, held: int = 0) -> scheduler_pb2.WorkerStatus:
        return scheduler_pb2.WorkerStatus(
            worker_id=self.worker_id,
            node_id=node_id,
            queues=list(self.hello.queues),
            handlers=list(self.hello.handlers),
            capacity=self.hello.capacity,
            in_flight=len(self.in_flight),
            connected_ms=self.connected_ms,
            prefetch=self.hello.prefetch,
            held=held,
            accepts_http=self.hello.accepts_http,
            accepts_shell=self.hello.accepts_shell,
        )


def check_hello(hello: worker_pb2.Hello) -> None:
    """Raises InvalidArgument, naming the field, for a Hello a stream cannot be opened with."""
    if not hello.worker_id:
        raise InvalidArgument("hello.worker_id", "must not be empty")
    if hello.capacity <= 0:
        raise InvalidArgument("hello.capacity", f"must be positive, got {hello.capacity}")
    if not hello.queues:
        raise InvalidArgument("hello.queues", "must name at least one queue")
    if hello.prefetch < 0:
        raise InvalidArgument("hello.prefetch", f"must not be negative, got {hello.prefetch}")


def least_loaded(sessions: list[WorkerSession]) -> WorkerSession | None:
    """The open session with credits and the lowest load (ties: most credits)."""
    best: WorkerSession | None = None
    for s in sessions:
        if s.closed or s.credits <= 0:
            continue
        if best is None or (s.load(), -s.credits) < (best.load(), -best.credits):
            best = s
    return best
