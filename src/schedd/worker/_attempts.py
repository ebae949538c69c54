"""The attempts a worker runs and holds: what it does with each NodeBatch, and each result.

:class:`Attempts` is made by :meth:`Worker.start <schedd.worker.Worker.start>` and lives for
one run. It owns the running table, the held executions, the deadline queue and heartbeat
ticker, and decides for every dispatch: answer from the ledger, adopt a redelivery, hold it
for its instant, or start it on its executor; and every result goes to the ledger before it
is queued on its stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator

from schedd._clock import Clock
from schedd._gc import freeze_survivors
from schedd.obs import MetricsRecorder
from schedd.v1 import worker_pb2
from schedd.worker._connection import NodeConnection
from schedd.worker._context import Context, decode_payload
from schedd.worker._credits import CreditPool
from schedd.worker._execution import Execution, begin
from schedd.worker._executor import Executor, Outcome, Runtime, fit_result, target_kind
from schedd.worker._hold import Held, HoldQueue
from schedd.worker._ledger import Ledger
from schedd.worker._refusals import RefusalLog
from schedd.worker._timers import DeadlineQueue, HeartbeatTicker

log = logging.getLogger("schedd.worker._worker")
SHUTDOWN_REASON = "worker shutting down"
#: A NodeBatch holding at least this many executions for later freezes what is alive.
_FREEZE_AFTER = 256

#: Why a held execution was given back unstarted (see ``Attempts._unvouched``).
UNVOUCHED_REASON = "its node no longer vouched for its partitions at the start instant"


class Attempts:
    """Dispatches in, results out, for one run of a worker.

    Invariants: every dispatch received is answered exactly once (a Result on its stream, or
    dropped with its stream) and gives back the slot it used (a dispatch credit, or a
    prefetch credit if it was sent ahead); at most ``capacity`` attempts are started and
    unreported, except for dispatches due on arrival while held ones fill it (see
    :class:`~schedd.worker.Worker`); an attempt is recorded in the ledger before its Result
    is queued.
    """

    def __init__(
        self,
        *,
        capacity: int,
        pool: CreditPool,
        holds: CreditPool,
        ledger: Ledger,
        clock: Clock,
        recorder: MetricsRecorder,
        handlers: dict[str, Executor],
        kinds: dict[str, Executor],
        runtime: Runtime,
        beat_interval: Callable[[], float],
    ) -> None:
        """Args:
        capacity: Most attempts started at once (held ones start only below it).
        pool, holds: The dispatch and prefetch credits, shared with the streams.
        ledger: Where finished attempts are recorded.
        clock: Start and finish times, held instants.
        recorder: Told about each finished attempt.
        handlers, kinds: Executors by handler name and by target kind (read, not copied:
            what is registered later is seen).
        runtime: The loop and thread pool executors run on.
        beat_interval: The heartbeat interval, asked at each tick.
        """
        self.capacity = capacity
        self.pool = pool
        self.holds = holds
        self.ledger = ledger
        self._clock = clock
        self._recorder = recorder
        self._handlers = handlers
        self._kinds = kinds
        self._runtime = runtime
        loop = runtime.loop
        #: Attempts started (or waiting for an older attempt) and not reported, by id.
        self.running: dict[str, Execution] = {}
        #: Results the nodes refused, told once (see ``schedd.worker._refusals``).
        self.refusals = RefusalLog()
        #: Executions started and not yet reported (held ones start only while < capacity).
        self._active = 0
        self._deadlines = DeadlineQueue(loop)
        self._beats = HeartbeatTicker(loop, self._beating, beat_interval)
        self.hold = HoldQueue(
            loop,
            clock.now_ms,
            lambda: self._active < self.capacity,
            self._start_held,
            self._holding,
        )

    def on_node_batch(self, conn: NodeConnection, batch: worker_pb2.NodeBatch) -> None:
        """Apply a NodeBatch: cancels, then acks, then dispatches, then the cancels that
        matched nothing before (a batch may carry a dispatch and its cancel together)."""
        unmatched = [c for c in batch.cancels if not self._cancel(c)]
        for c in batch.cancels:  # their CANCELLED results may come back refused: expected
            self.refusals.quiet(c.execution_id)
        for ack in batch.acks:
            if not ack.accepted:
                self.refusals.refused(ack)
        dispatches = batch.dispatches
        if dispatches:
            held = 0
            with self.pool.holding(), self.holds.holding():
                for d in dispatches:
                    if d.probe:
                        self._on_probe(conn, d)
                    elif d.start_at_ms:
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
        ex = self.running.get(c.execution_id)
        if ex is not None and c.fencing_token in (0, ex.dispatch.fencing_token):
            log.info(
                "execution %s cancelled by the node: %s", c.execution_id, c.reason,
                extra={"execution": c.execution_id, "token": ex.dispatch.fencing_token},
            )  # fmt: skip
            ex.ctx.cancel(c.reason or "cancelled by the node")
            return True
        return self._cancel_held(c)

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
            conn.add_result(self.result(d, worker_pb2.OUTCOME_CANCELLED, error=SHUTDOWN_REASON))
            self._give_back(conn, held)
            return
        current = self.running.get(d.execution_id)
        if current is not None and self._reattach(current, conn, d):
            self._give_back(conn, held)
            return
        if not checked and self._answer_from_ledger(conn, d):
            self._give_back(conn, held)
            return
        self._start(conn, d, previous=current, held=held, prepared=prepared)

    def _on_probe(self, conn: NodeConnection, d: worker_pb2.Dispatch) -> None:
        """A node that took this execution over asks whether it runs or ran here (see
        ``Dispatch.probe``): adopt its token, or answer from the ledger, or say not here.
        Uses no credit and starts nothing. One held (not started) under an older token is
        not here: it is given back unstarted to its old node (which handed the partition
        over, or whose promise lapsed), so only the new owner's hand-out runs it."""
        ex = self.running.get(d.execution_id)
        if ex is not None:
            if d.attempt == ex.dispatch.attempt and d.fencing_token >= ex.dispatch.fencing_token:
                # Even one being cancelled (its old node called its token stale): it may
                # still finish its work, and its result, whatever it is, must reach the
                # new owner rather than another copy run.
                self._move(ex, conn, d)
                if ex.ctx.cancelled:
                    ex.withdraw_cancel()
                log.debug(
                    "probe of %s: runs here, now under token %d", d.execution_id, d.fencing_token
                )
                return
        elif self._answer_from_ledger(conn, d):
            log.debug("probe of %s: answered from the ledger", d.execution_id)
            return
        held = self.hold.by_id.get(d.execution_id)
        if held is not None and d.fencing_token > held.dispatch.fencing_token:
            # Held for its old owner, which may still be alive (a graceful handover): its
            # Cancel may come after the instant, and then both would run it. Given back
            # unstarted now; the new owner hands it out afresh.
            stale = held.dispatch.fencing_token
            self._cancel_held(worker_pb2.Cancel(
                execution_id=d.execution_id, fencing_token=stale, reason="taken over"
            ))  # fmt: skip
        log.debug("probe of %s (token %d): not here", d.execution_id, d.fencing_token)
        conn.add_not_here(d.execution_id)

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
        hold = self.hold
        if not self.pool.accepting:
            conn.add_result(self.result(d, worker_pb2.OUTCOME_CANCELLED, error=SHUTDOWN_REASON))
            self._give_back(conn, held=True)
            return
        if d.execution_id not in self.running and self._answer_from_ledger(conn, d):
            self._give_back(conn, held=True)
            return
        local_ms = d.start_at_ms - conn.clock_offset_ms
        if local_ms <= self._clock.now_ms() and self._active < self.capacity:
            if not self._vouched(conn, d):
                self._unvouched(conn, d)
            else:
                self._on_dispatch(conn, d, held=True, checked=True)
            return
        old = hold.add(Held(conn, d, local_ms, self._prepare(conn, d, held=True)))
        if old is not None:  # the node sent it again (a new token): the old one is void
            self._give_back(old.conn, held=True)

    @property
    def active(self) -> int:
        """Attempts started and not yet reported (running)."""
        return self._active

    def _start_held(self, h: Held) -> None:
        """A held execution's instant came (and a slot is free): run it, if its node still
        vouches for it (see ``NodeBatch.live_until_ms``)."""
        if not self._vouched(h.conn, h.dispatch):
            self._unvouched(h.conn, h.dispatch)
            return
        ex = h.ex
        if ex is not None and h.eid not in self.running and self.pool.accepting:
            self._active += 1  # the common case: what _on_dispatch and _start would do
            self._begin(ex)
            return
        self._on_dispatch(h.conn, h.dispatch, held=True, checked=True, prepared=ex)

    def _vouched(self, conn: NodeConnection, d: worker_pb2.Dispatch) -> bool:
        """Its node's latest promise covers both its instant and now (node's clock): a
        worker that froze past the promise gives it back rather than start it late beside
        the copy its node handed to another worker meanwhile."""
        now_node = self._clock.now_ms() + conn.clock_offset_ms
        return max(d.start_at_ms, now_node) <= conn.node_live_until_ms

    def _unvouched(self, conn: NodeConnection, d: worker_pb2.Dispatch) -> None:
        """Its instant came after the latest promise of the node that sent it (the node may
        have lost its partitions since): give it back unstarted; its owner hands it out again."""
        log.warning(
            "held execution %s not started: node %s promised its partitions only until %d",
            d.execution_id,
            conn.endpoint,
            conn.node_live_until_ms,
            extra={"execution": d.execution_id, "job": d.job_id, "token": d.fencing_token},
        )
        conn.add_result(self.result(d, worker_pb2.OUTCOME_CANCELLED, error=UNVOUCHED_REASON))
        self._give_back(conn, held=True)

    def _cancel_held(self, c: worker_pb2.Cancel) -> bool:
        h = self.hold.by_id.get(c.execution_id)
        if h is None or c.fencing_token not in (0, h.dispatch.fencing_token):
            return False
        self.hold.take(c.execution_id)
        log.info(
            "held execution %s cancelled by the node: %s", c.execution_id, c.reason,
            extra={"execution": c.execution_id, "token": h.dispatch.fencing_token},
        )  # fmt: skip
        h.conn.add_result(
            self.result(
                h.dispatch, worker_pb2.OUTCOME_CANCELLED, error=c.reason or "cancelled by the node"
            )
        )
        self._give_back(h.conn, held=True)
        return True

    def _reattach(self, ex: Execution, conn: NodeConnection, d: worker_pb2.Dispatch) -> bool:
        """A redelivery of what is still running here: adopt the new token instead of
        running twice. False when it cannot be adopted (another attempt, or cancelling)."""
        if ex.ctx.cancelled or d.attempt != ex.dispatch.attempt:
            if not ex.ctx.cancelled:
                ex.ctx.cancel("superseded by a newer attempt")
            return False
        if d.fencing_token < ex.dispatch.fencing_token:
            return True  # an older token: the newer one is already running
        self._move(ex, conn, d)
        return True

    def _move(self, ex: Execution, conn: NodeConnection, d: worker_pb2.Dispatch) -> None:
        """What runs here goes on under ``d``'s token, its result to ``conn``'s node."""
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
        self.running[d.execution_id] = ex
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
        ex.started_ms = ex.ctx.started_ms = now
        if d.due_ms:  # lateness on the node's clock, from the instant it meant
            self._recorder.execution_started(now + ex.conn.clock_offset_ms - d.due_ms)
        if ex.ctx.cancelled:  # cancelled while waiting for an older attempt
            ex.finish(Outcome(worker_pb2.OUTCOME_CANCELLED, error=ex.ctx.cancel_reason))
            return
        executor = self._handlers.get(d.handler)
        if executor is None and d.target:  # not a handler job: one parse, off the hot path
            executor = self._executor_for(d.target)
        started = begin(executor, ex, now, self._runtime)
        if isinstance(started, Outcome):  # its Result says when it started: no Started
            ex.finish(started)
            return
        ex.conn.add_started(d.execution_id, d.fencing_token, now)
        self.running[d.execution_id] = ex
        if ex.finished is None:
            ex.finished = self._runtime.loop.create_future()
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
            output, error = fit_result(eid, outcome.output, outcome.error)
            if error:
                result.error = error
            if output:
                result.output = output
            conn.result_bytes(len(output) + len(error))
        if outcome.retry_after_ms:
            result.retry_after_ms = outcome.retry_after_ms
        result.started_ms = started = ex.started_ms
        result.finished_ms = finished = self._clock.now_ms()
        self._recorder.execution_finished(outcome.code, (finished - started) / 1000.0)
        self.ledger.record(result)
        if not conn.live:
            self.ledger.flush()
        if self.running.get(eid) is ex:
            del self.running[eid]
        self._active -= 1
        if ex.held:
            self._give_back(conn, held=True)
        else:
            conn.running -= 1
            self.pool.release()
        hold = self.hold
        if not hold.draining:
            hold.kick()
        if ex.finished is not None and not ex.finished.done():
            ex.finished.set_result(None)

    def finished_futures(self) -> list[asyncio.Future[None]]:
        return [ex.finished for ex in self.running.values() if ex.finished is not None]

    def _beating(self) -> list[Callable[[], None]]:
        """The heartbeats due at a tick: one per attempt whose handler runs."""
        return [ex.beat for ex in self.running.values() if ex.future is not None]

    def _executor_for(self, target: bytes) -> Executor | None:
        """The executor added for the kind of ``target`` (None: none, or a corrupt target)."""
        try:
            return self._kinds.get(target_kind(target))
        except ValueError:
            return None

    def result(
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

    def drop_stream(self, conn: NodeConnection) -> None:
        """Held executions of a stream that ended are dropped unstarted: the node hands them
        out again under a new token, so starting them here would only run them twice."""
        gone = self.hold.drop_stream(conn)
        if gone:
            log.info("stream to %s ended: dropped %d held executions", conn.endpoint, len(gone))
            conn.held -= len(gone)
            self.holds.release(len(gone))

    async def drain(self, grace_s: float | None, cancel_timeout_s: float) -> None:
        """Give back held executions (answered CANCELLED), let running ones finish for up to
        ``grace_s`` (None: do not wait), then cancel the rest and wait up to
        ``cancel_timeout_s`` for their results."""
        for h in self.hold.take_all():  # not started: give them back for another worker
            h.conn.add_result(
                self.result(h.dispatch, worker_pb2.OUTCOME_CANCELLED, error=SHUTDOWN_REASON)
            )
            self._give_back(h.conn, held=True)
        if grace_s is not None and self.running:
            await asyncio.wait(self.finished_futures(), timeout=grace_s)
        for ex in list(self.running.values()):
            ex.ctx.cancel(SHUTDOWN_REASON)
        left = self.finished_futures()
        if left:
            await asyncio.wait(left, timeout=cancel_timeout_s)

    def close(self) -> None:
        """Drop what is left without results and stop every timer."""
        for ex in list(self.running.values()):
            ex.abort()
        self.running.clear()
        self.hold.close()
        self._deadlines.close()
        self._beats.close()
