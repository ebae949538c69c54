"""The harness's workers: every dispatch runs at once, in this process, on virtual time.

:class:`WorkerPool` stands where the node's dispatcher stands (its partitions hand it
dispatches, probes and cancels) and plays the workers too: one pool of unlimited capacity that
serves every queue. An attempt runs the way the worker SDK runs it: the registered function is
started by the SDK's own :class:`~schedd.worker._handler.HandlerExecutor` (an ``async def``
that returns without suspending is settled on the spot, a plain ``def`` runs inline instead of
in a thread pool), its outcome is decided by the SDK's rules (``settle``: a value is
SUCCEEDED, :class:`~schedd.worker.PermanentError` FAILED_PERMANENT, any other exception
FAILED), a deadline that passes while it runs cancels it as TIMED_OUT, and a Cancel from the
node cancels it as CANCELLED. Time passes inside a handler only through :meth:`sleep`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import Executor as PoolExecutor
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, cast

from schedd._clock import ManualClock
from schedd.dispatch import ProbeAnswer
from schedd.testing._runs import Attempt
from schedd.v1 import worker_pb2
from schedd.worker import (
    Context,
    Executor,
    Ledger,
    Outcome,
    Runtime,
    ThreadBridge,
    decode_payload,
    error_text,
    no_executor_error,
    settle,
    target_kind,
)

WORKER_ID = "harness-worker"
#: How many passes of the event loop a suspended handler gets to reach :meth:`sleep` (or end)
#: before the harness moves time on anyway (it waits on something that is not virtual time).
_QUIET_PASSES = 50


class _InlinePool(PoolExecutor):
    """Runs a "thread pool" job on the caller's stack: sync handlers stay deterministic."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        out: Future[Any] = Future()
        try:
            out.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # the ThreadBridge catches the handler's; this is a bug
            out.set_exception(exc)
        return out


class _Checkpoints:
    """The worker's local checkpoint store (the ledger's other half), in memory."""

    def __init__(self) -> None:
        self.saved: dict[str, bytes] = {}

    def save_checkpoint(self, execution_id: str, data: bytes, now_ms: int = 0) -> None:
        self.saved[execution_id] = data

    def load_checkpoint(self, execution_id: str) -> bytes | None:
        return self.saved.get(execution_id)


@dataclass(slots=True)
class _Running:
    """An attempt whose handler suspended."""

    dispatch: worker_pb2.Dispatch
    ctx: Context
    future: asyncio.Future[Any]
    started_ms: int
    timed_out: bool = False


class WorkerPool:
    """In-process workers of unlimited capacity, and the node's dispatcher for them.

    The node side calls :meth:`submit`, :meth:`hold`, :meth:`probe`, :meth:`cancel` and
    :meth:`pending_count` (a partition's outbound port, as the node's dispatcher is); the
    harness collects what the workers report with :meth:`take_reports` and hands it to the
    node's ``ResultRouter``, as a worker stream would.
    """

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.handlers: dict[str, Executor] = {}
        self.kinds: dict[str, Executor] = {}
        self.running: dict[str, _Running] = {}
        self.attempts: list[Attempt] = []
        self._results: list[worker_pb2.Result] = []
        self._started: list[worker_pb2.Started] = []
        self._checkpoints = _Checkpoints()
        self._ledger = cast(Ledger, self._checkpoints)  # what Context uses of a Ledger
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._runtime: Runtime | None = None

    def _rt(self) -> Runtime:
        if self._runtime is None:
            loop = asyncio.get_running_loop()
            self._runtime = Runtime(loop, ThreadBridge(loop, _InlinePool()))
        return self._runtime

    # -- the dispatcher's side, as the partitions call it --------------------------------------

    def submit(self, dispatches: Sequence[worker_pb2.Dispatch]) -> None:
        """Starts every dispatch now (a worker with a free slot takes each at once)."""
        for d in dispatches:
            self._start(d)

    def hold(self, dispatches: Sequence[worker_pb2.Dispatch]) -> list[worker_pb2.Dispatch]:
        """No worker holds executions ahead of their instant: all are fired at it."""
        return list(dispatches)

    def probe(self, dispatches: Sequence[worker_pb2.Dispatch], answer: ProbeAnswer) -> None:
        """A new owner asks whether a worker has these: one that runs an attempt (or has its
        result still to report) keeps it under the new token."""
        for d in dispatches:
            eid = d.execution_id
            running = self.running.get(eid)
            if running is not None:
                running.dispatch.fencing_token = d.fencing_token
                answer(eid, True)
                continue
            unreported = [r for r in self._results if r.execution_id == eid]
            for r in unreported:
                r.fencing_token = d.fencing_token
            answer(eid, bool(unreported))

    def cancel(self, execution_id: str, token: int, reason: str) -> bool:
        """Cancels the attempt running under ``token`` (0: any); False if none is."""
        running = self.running.get(execution_id)
        if running is None or token not in (0, running.dispatch.fencing_token):
            return False
        running.ctx.cancel(reason or "cancelled by the node")
        running.future.cancel()
        return True

    def pending_count(self) -> int:
        """Nothing ever waits for a worker here."""
        return 0

    # -- running attempts ------------------------------------------------------------------------

    def _start(self, d: worker_pb2.Dispatch) -> None:
        now = self.clock.now_ms()
        ctx = Context(d, self._ledger)
        ctx.started_ms = now
        executor = self.handlers.get(d.handler) if d.handler else self._kind_of(d.target)
        began: Outcome | asyncio.Future[Any]
        if executor is None:
            began = Outcome(worker_pb2.OUTCOME_FAILED_PERMANENT, error=no_executor_error(d))
        elif d.deadline_ms and d.deadline_ms <= now:
            began = Outcome(worker_pb2.OUTCOME_TIMED_OUT, error="deadline passed before start")
        else:
            began = executor.begin(ctx, decode_payload(d.payload), self._rt())
        if isinstance(began, Outcome):
            self._report(d, began, 0)
            return
        self.running[d.execution_id] = _Running(d, ctx, began, now)
        self._started.append(
            worker_pb2.Started(execution_id=d.execution_id, fencing_token=d.fencing_token,
                               started_ms=now)
        )  # fmt: skip

    def _kind_of(self, target: bytes) -> Executor | None:
        try:
            return self.kinds.get(target_kind(target))
        except ValueError:
            return None

    def _report(self, d: worker_pb2.Dispatch, outcome: Outcome, started_ms: int) -> None:
        now = self.clock.now_ms()
        self._results.append(
            worker_pb2.Result(
                execution_id=d.execution_id, fencing_token=d.fencing_token, attempt=d.attempt,
                outcome=outcome.code,  # type: ignore[arg-type]
                error=outcome.error, output=outcome.output, retry_after_ms=outcome.retry_after_ms,
                started_ms=started_ms, finished_ms=now,
            )
        )  # fmt: skip
        self.attempts.append(
            Attempt(
                d.execution_id, d.attempt, d.fencing_token, started_ms or now, now,
                worker_pb2.Outcome.Name(outcome.code).removeprefix("OUTCOME_"),  # type: ignore[arg-type]
                outcome.error,
            )
        )  # fmt: skip

    def _collect(self) -> int:
        """Reports the attempts whose handler ended; returns how many."""
        done = [r for r in self.running.values() if r.future.done()]
        for r in done:
            del self.running[r.dispatch.execution_id]
            if r.timed_out:
                outcome = Outcome(worker_pb2.OUTCOME_TIMED_OUT, error="deadline passed")
            elif r.future.cancelled() and r.ctx.cancel_reason:
                outcome = Outcome(worker_pb2.OUTCOME_CANCELLED, error=r.ctx.cancel_reason)
            else:
                outcome = _outcome_of(r.future)
            self._report(r.dispatch, outcome, r.started_ms)
        return len(done)

    def take_reports(self) -> tuple[list[worker_pb2.Started], list[worker_pb2.Result]]:
        """What the workers have to tell the node since the last call (starts, results)."""
        self._collect()
        started, results = self._started, self._results
        self._started, self._results = [], []
        return started, results

    def has_reports(self) -> bool:
        return bool(self._started or self._results) or any(
            r.future.done() for r in self.running.values()
        )

    # -- virtual time ------------------------------------------------------------------------------

    async def sleep(self, seconds: float) -> None:
        """Waits ``seconds`` of virtual time (the harness moves the clock past it)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        wake = self.clock.now_ms() + max(0, round(seconds * 1000))
        heapq.heappush(self._sleepers, (wake, next(self._seq), fut))
        await fut

    def next_event_ms(self) -> int | None:
        """The earliest sleeper's wake-up or running attempt's deadline (None: none)."""
        while self._sleepers and self._sleepers[0][2].done():  # cancelled sleeps
            heapq.heappop(self._sleepers)
        times = [self._sleepers[0][0]] if self._sleepers else []
        times += [
            r.dispatch.deadline_ms
            for r in self.running.values()
            if r.dispatch.deadline_ms and not r.timed_out
        ]
        return min(times, default=None)

    def wake(self) -> bool:
        """Wakes the sleepers due now and times out attempts past their deadline; returns
        whether anything was woken."""
        now = self.clock.now_ms()
        woke = False
        while self._sleepers and self._sleepers[0][0] <= now:
            fut = heapq.heappop(self._sleepers)[2]
            if not fut.done():
                fut.set_result(None)
                woke = True
        for r in self.running.values():
            if r.dispatch.deadline_ms and r.dispatch.deadline_ms <= now and not r.timed_out:
                r.timed_out = True
                r.ctx.cancel("deadline passed")
                r.future.cancel()
                woke = True
        return woke

    async def quiesce(self) -> None:
        """Lets the handlers run until each has ended or waits in :meth:`sleep` (or the
        loop has had :data:`_QUIET_PASSES` passes: it waits on something else)."""
        for _ in range(_QUIET_PASSES):
            pending = sum(1 for r in self.running.values() if not r.future.done())
            sleeping = sum(1 for s in self._sleepers if not s[2].done())
            if pending <= sleeping:  # a woken sleeper has left the heap: it counts as pending
                return
            await asyncio.sleep(0)


def _outcome_of(future: asyncio.Future[Any]) -> Outcome:
    try:
        return settle(future)
    except BaseException as exc:  # settle() re-raising something odd must not stop the clock
        return Outcome(worker_pb2.OUTCOME_FAILED, error=error_text(exc))
