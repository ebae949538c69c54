"""Settling worker results in rounds, off the streams' readers, behind a dispatch backlog."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from schedd._clock import Clock
from schedd._supervise import SupervisedLoop
from schedd.dispatch._config import DispatchConfig, ExecutionAuthority
from schedd.dispatch._session import WorkerSession
from schedd.dispatch._supervision import guarded, wait_until_done
from schedd.v1 import worker_pb2

_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
#: How often a deferred round looks whether the backlog is gone. Polled, not an Event:
#: "servable" depends on credits, sessions and routes, and the wait is bounded anyway.
_BACKLOG_POLL_S = 0.002

_Parts = list[tuple[WorkerSession, list[worker_pb2.Result]]]


class ResultSettler:
    """Settles the results a stream's reader queued, so the reader goes on at once.

    Contract:
        * A round takes everything queued when it starts and makes one
          :meth:`ExecutionAuthority.on_results` call per worker, workers in arrival order;
          results that arrive meanwhile go in the next round.
        * Each ack goes back on the stream its result came from. If the authority fails, every
          result of that call is refused as UNAVAILABLE (the worker redelivers it).
        * While ``backlog()`` says dispatches wait for a connected worker that may take them,
          a round waits up to ``settle_defer_ms`` on the clock: dispatching goes first, and
          the deferred results are settled together.
        * The loop is supervised: a failure is logged and the loop restarted; results still
          queued stay queued.
    """

    def __init__(
        self,
        authority: ExecutionAuthority,
        backlog: Callable[[], bool],
        *,
        config: DispatchConfig,
        clock: Clock,
    ) -> None:
        self._authority = authority
        self._backlog = backlog
        self._clock = clock
        self._defer_s = config.settle_defer_ms / 1000.0
        self._queued: _Parts = []
        self._wake = asyncio.Event()
        self._settling = False
        self._hurry = False  # stop(): settle what is queued without deferring
        self._deferral: asyncio.Future[None] | None = None  # resolved to cut a deferral short
        self._idle: asyncio.Future[None] | None = None  # resolved when nothing is left to settle
        self.supervisor = SupervisedLoop(
            "schedd-settler", self._run, clock, config.restart_delay_ms / 1000.0
        )

    def backlog_count(self) -> int:
        """Results received and not yet handed to the authority."""
        return sum(len(results) for _session, results in self._queued)

    def queue(self, session: WorkerSession, results: list[worker_pb2.Result]) -> None:
        """Queue results that arrived on ``session``; never blocks."""
        self._queued.append((session, results))
        self._wake.set()

    def start(self) -> None:
        self._hurry = False
        self.supervisor.start()

    async def drain(self, timeout_s: float) -> bool:
        """Settle what is queued now, deferring no longer, for up to ``timeout_s`` on the clock.

        Returns:
            Whether nothing was left to settle in time (at once if the loop is not running).
        """
        self._hurry = True
        if self._deferral is not None and not self._deferral.done():
            self._deferral.set_result(None)
        if not self.supervisor.running or (not self._queued and not self._settling):
            return not self._queued
        self._idle = asyncio.get_running_loop().create_future()
        try:
            return await wait_until_done(self._clock, self._idle, timeout_s)
        finally:
            self._idle = None

    async def stop(self) -> None:
        """Stop the loop; what is still queued is not settled (the workers redeliver it)."""
        await self.supervisor.stop()

    async def _run(self) -> None:
        wake = self._wake
        while True:
            if not self._queued:
                await wake.wait()
            wake.clear()
            self._settling = True
            try:
                if not self._hurry and self._backlog():
                    await self._defer()
                while self._queued:
                    queued, self._queued = self._queued, []
                    by_worker: dict[str, _Parts] = {}
                    for session, results in queued:
                        by_worker.setdefault(session.worker_id, []).append((session, results))
                    for worker_id, parts in by_worker.items():
                        await self._settle(worker_id, parts)
            finally:
                self._settling = False
            if self._idle is not None and not self._idle.done() and not self._queued:
                self._idle.set_result(None)

    async def _defer(self) -> None:
        """Wait while the backlog lasts, up to ``settle_defer_ms`` (or until :meth:`drain`)."""
        clock = self._clock
        deadline = clock.monotonic() + self._defer_s
        self._deferral = deferral = asyncio.get_running_loop().create_future()
        try:
            while self._backlog() and clock.monotonic() < deadline:
                if await wait_until_done(clock, deferral, _BACKLOG_POLL_S):
                    return
        finally:
            self._deferral = None

    async def _settle(self, worker_id: str, parts: _Parts) -> None:
        results = [r for _, rs in parts for r in rs]
        acks = await guarded(self._authority.on_results(worker_id, results), "on_results")
        if acks is None:
            acks = [
                worker_pb2.ResultAck(
                    execution_id=r.execution_id,
                    fencing_token=r.fencing_token,
                    accepted=False,
                    code=_UNAVAILABLE,
                    message="the node could not settle the result; it will be redelivered",
                )
                for r in results
            ]
        if len(parts) == 1:
            parts[0][0].send_acks(acks)
            return
        # Acks come in any order: each goes back on the stream its result came from.
        origin = {(r.execution_id, r.fencing_token): s for s, rs in parts for r in rs}
        by_session: dict[WorkerSession, list[worker_pb2.ResultAck]] = {}
        for ack in acks:
            session = origin.get((ack.execution_id, ack.fencing_token), parts[-1][0])
            by_session.setdefault(session, []).append(ack)
        for session, session_acks in by_session.items():
            session.send_acks(session_acks)
