"""The node's end of the worker streams: routing, credits, leases, loss detection."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

import grpc.aio

from schedd._clock import Clock, SystemClock
from schedd._supervise import SupervisedLoop
from schedd.auth import Caller
from schedd.dispatch._config import (
    FENCED_RETRY_S,
    REASON_DISCONNECTED,
    REASON_LEASE_EXPIRED,
    REASON_WORKER_SILENT,
    DispatchConfig,
    DispatchStats,
    ExecutionAuthority,
    InFlight,
    always,
)
from schedd.dispatch._holders import place_holds
from schedd.dispatch._in_flight import InFlightTable
from schedd.dispatch._loss import LossReports
from schedd.dispatch._pending import PendingDispatches, route_of, route_of_job
from schedd.dispatch._probes import PROBE_TIMEOUT_MS, ProbeAnswer, Probes
from schedd.dispatch._queues import QueueLoad, queue_loads
from schedd.dispatch._result_settler import ResultSettler
from schedd.dispatch._routing import hand_out
from schedd.dispatch._servicer import WorkerStreamServicer
from schedd.dispatch._session import WorkerSession, check_hello
from schedd.dispatch._supervision import guarded
from schedd.dispatch._vouch import unlimited, vouch
from schedd.dispatch._waiting import Reason, Waiting, unserved_warning
from schedd.obs import MetricsRecorder, NoopRecorder
from schedd.v1 import job_pb2, scheduler_pb2, worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)
_DEFAULT_CONFIG = DispatchConfig()
_NOOP_RECORDER = NoopRecorder()


class Dispatcher:
    """Sends executions down worker streams and tells the node what became of them.

    Contract:
        * A dispatch goes only to a worker that consumes its queue and, for a handler target,
          registered that handler (an empty ``handler`` with a ``target`` needs a worker that
          accepts http or shell jobs).
        * A stream never has more dispatches in flight than the credits its worker granted.
        * Within a route, tenants take turns; among eligible workers the least loaded goes first.
        * Each in-flight execution holds a lease (``now + lease_timeout_ms``) that Started and
          Heartbeat renew; when it runs out, or the stream ends, the execution is dropped and
          handed to :meth:`ExecutionAuthority.on_lost` (expired ones also get a Cancel).
        * Dispatches with no eligible worker wait in memory, in order, until one connects.
        * :meth:`hold` sends executions ahead of their instant (``start_at_ms``) only to a
          worker that asked for prefetch, with a prefetch credit; their lease runs from the
          instant. Each reaper tick renews the node's promise to such workers (``_vouch``).

    Lifecycle: :meth:`start` starts the lease reaper and the result settler, supervised
    (restarted after ``restart_delay_ms`` when they fail); :meth:`stop` ends dispatching,
    settles what arrived (if graceful) and ends every stream. Use on the server's loop.
    """

    def __init__(
        self,
        node_id: str,
        authority: ExecutionAuthority,
        *,
        config: DispatchConfig = _DEFAULT_CONFIG,
        clock: Clock | None = None,
        recorder: MetricsRecorder = _NOOP_RECORDER,
        may_dispatch: Callable[[], bool] = always,
        live_until_ms: Callable[[], int] | None = None,
        authorize: Callable[[str | None, str], Awaitable[Caller]] | None = None,
    ) -> None:
        """Create a dispatcher; nothing runs until :meth:`start`.

        Args:
            node_id: This node's id, sent to workers in Welcome.
            authority: Token checks, settling and what happens after a loss.
            config: Pacing, leases and timeouts.
            clock: Every reading and wait of the dispatcher's goes through it.
            recorder: Where metrics go (no dispatch event is reported yet).
            may_dispatch: Whether the node may hand out anything now (its self-fencing).
            live_until_ms: Until when the node surely holds its fences (promised to holders).
            authorize: With auth on: who a stream's bearer token is (raises when not valid).
        """
        self.node_id = node_id
        self.config = config
        self.stats = DispatchStats()
        self.recorder = recorder
        self.may_dispatch = may_dispatch  # the node's self-fencing says no
        self.authorize = authorize
        self._authority = authority
        self._clock: Clock = clock or SystemClock()
        self.live_until_ms = live_until_ms or unlimited(self._clock)  # see _vouch
        self._sessions: dict[int, WorkerSession] = {}
        self._next_session_id = 0
        self._pending = PendingDispatches()
        self._waiting = Waiting(self._clock)
        self._in_flight = InFlightTable(node_id)
        self._pump_scheduled = False
        self.probes = Probes()
        self._losses = LossReports(authority, self.stats, self._clock)
        self._closed = False
        restart_s = config.restart_delay_ms / 1000.0
        self._reaper = SupervisedLoop(
            "schedd-dispatch-reaper", self._reap_loop, self._clock, restart_s
        )
        self._settler = ResultSettler(
            authority, self._servable_backlog, config=config, clock=self._clock
        )

    # ---- public API -------------------------------------------------------------------------

    def add_to_server(self, server: grpc.aio.Server) -> None:
        """Register the Worker service on ``server`` (create it with KEEPALIVE_SERVER_OPTIONS;
        set :attr:`authorize` first, for auth)."""
        servicer = WorkerStreamServicer(self, self.authorize)
        worker_pb2_grpc.add_WorkerServicer_to_server(servicer, server)

    def submit(self, dispatches: Sequence[worker_pb2.Dispatch]) -> None:
        """Queue dispatches; they are sent as credits allow, many per stream message.

        Never blocks. A dispatch for an execution already pending replaces it; one for an
        execution in flight replaces that too (its old worker gets a Cancel for the old token).
        """
        for d in dispatches:
            self._replace(d)
            self._pending.add(d)
        self._waiting.review(self._pending.routes(), self._sessions.values())
        self._schedule_pump()

    def hold(self, dispatches: Sequence[worker_pb2.Dispatch]) -> list[worker_pb2.Dispatch]:
        """Send dispatches whose ``start_at_ms`` is ahead to workers that hold them until then.

        Each goes to the least loaded connected worker that may take its route and has a
        prefetch credit, at once (never queued). One already pending or in flight is replaced
        as by :meth:`submit`.

        Returns:
            The dispatches no worker could hold now, in order: the caller fires them at their
            instant instead (through :meth:`submit`, with ``start_at_ms`` cleared).
        """
        if not self.may_dispatch():
            return list(dispatches)
        now = self._clock.now_ms()
        lease = self.config.lease_timeout_ms
        used: set[WorkerSession] = set()

        def send(session: WorkerSession, d: worker_pb2.Dispatch) -> None:
            self._replace(d)
            session.send_dispatch(d, held=True)
            self._in_flight.track(session, d, now, max(now, d.start_at_ms) + lease)
            used.add(session)

        rejected = place_holds(self._sessions.values(), dispatches, send)
        for session in used:
            session.flush()
        return rejected

    def probe(self, dispatches: Sequence[worker_pb2.Dispatch], answer: ProbeAnswer) -> None:
        """Ask every connected worker that may take each dispatch whether it already runs or
        ran it (see :mod:`._probes`); ``answer(execution_id, taken)`` says what came of it
        (at once, False, when no worker may be asked). Taken: it is in flight on the worker
        that answered, as if dispatched there. Uses no credit."""
        ok = self.may_dispatch()
        live = [s for s in self._sessions.values() if ok and not (s.closed or s.silent)]
        deadline = self._clock.now_ms() + PROBE_TIMEOUT_MS
        self.probes.send(live, dispatches, deadline, answer)

    def _replace(self, d: worker_pb2.Dispatch) -> None:
        """Drop what is pending or in flight under ``d``'s execution id (a Cancel to the worker
        that has an older token)."""
        self._pending.remove(d.execution_id)
        old = self._in_flight.drop(d.execution_id)
        if old is not None:
            session, flight = old
            if flight.dispatch.fencing_token != d.fencing_token:
                session.send_cancel(d.execution_id, flight.dispatch.fencing_token, "resubmitted")

    def cancel(self, execution_id: str, token: int, reason: str) -> bool:
        """Cancel an execution under ``token`` (0: whatever token is current).

        Returns:
            True if it was pending (now dropped) or in flight (a Cancel goes to its worker; it
            stays in flight until its result, loss or :meth:`forget`), False otherwise.
        """
        pending = self._pending.get(execution_id)
        if pending is not None and token in (0, pending.fencing_token):
            self._pending.remove(execution_id)
            return True
        flight = self._in_flight.get(execution_id)
        if flight is not None and token in (0, flight.dispatch.fencing_token):
            session = self._in_flight.session_of(execution_id)
            if session is not None:
                session.send_cancel(execution_id, flight.dispatch.fencing_token, reason)
            return True
        return False

    def forget(self, execution_ids: Iterable[str]) -> None:
        """Drop these executions from pending and in flight, with no callback (e.g. the
        partition was lost). Their later results still reach :meth:`ExecutionAuthority.on_results`.
        A worker holding one for an instant still ahead gets a Cancel: the partition's next
        owner hands it out again under a new token.
        """
        now = self._clock.now_ms()
        execution_ids = list(execution_ids)
        self.probes.drop(execution_ids)
        for eid in execution_ids:
            self._pending.remove(eid)
            dropped = self._in_flight.drop(eid)
            if dropped is not None and dropped[1].dispatch.start_at_ms > now:
                session, flight = dropped
                session.send_cancel(eid, flight.dispatch.fencing_token, "partition moved")

    def in_flight(self) -> dict[str, InFlight]:
        """A snapshot of in-flight executions by execution id."""
        return dict(self._in_flight.flights)

    def pending_count(self) -> int:
        """Dispatches waiting for an eligible worker with credits."""
        return len(self._pending)

    def queue_loads(self, tenant: str | None = None) -> dict[str, QueueLoad]:
        """Per queue: due (pending), held and running executions here (``tenant``: its)."""
        return queue_loads(self._pending.dispatches(), self._in_flight.flights.values(), tenant)

    def unserved_warning(self, job: job_pb2.Job) -> str | None:
        """A warning for a job no open stream here could be sent (None: one could)."""
        live = [s.hello for s in self._sessions.values() if not s.closed]
        return unserved_warning(route_of_job(job), live)

    def waiting_reason(self, execution_id: str) -> Reason | None:
        """Why a pending execution has not gone to a worker (None: it is not pending here)."""
        d = self._pending.get(execution_id)
        if d is None:
            return None
        return self._waiting.reason(route_of(d), d.tenant, self._sessions.values())

    def unserved_by_queue(self) -> dict[str, tuple[int, int]]:
        """Per queue: executions pending on routes no worker serves, since when (wall ms)."""
        return self._waiting.unserved_by_queue(self._pending.count)

    def in_flight_count(self) -> int:
        return len(self._in_flight)  # held ahead of their instant included

    def settle_backlog(self) -> int:
        return self._settler.backlog_count()  # results received and not yet settled

    def worker_ids(self) -> set[str]:
        """The workers with an open stream here that are not silent."""
        return {s.worker_id for s in self._sessions.values() if not (s.closed or s.silent)}

    def workers(self) -> list[scheduler_pb2.WorkerStatus]:
        """One entry per connected stream (a worker reconnecting may briefly appear twice)."""
        now = self._clock.now_ms()
        return [
            s.status(self.node_id, s.held(self._in_flight.flights, now))
            for s in self._sessions.values()
            if not s.closed
        ]

    @property
    def restarts(self) -> int:
        """How many times a background loop (reaper, settler) failed and was restarted."""
        return self._reaper.restarts + self._settler.supervisor.restarts

    async def start(self) -> None:
        """Start the lease reaper and the result settler (a no-op for one already running)."""
        if self._closed:
            return
        self._reaper.start()
        self._settler.start()
        self._schedule_pump()

    async def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stop dispatching and end every stream (workers reconnect elsewhere). Idempotent.

        The pump and the lease reaper stop at once. No on_lost callbacks are made for
        what is in flight: the node is going away and the partitions' next owner re-tokens
        them.

        Args:
            graceful: Settle the results already received first (their acks go out before the
                streams end; at most ``stop_settle_timeout_ms``), and after ending the streams
                let loss reports under way finish (at most ``stop_reports_timeout_ms``). If
                False, neither: unsettled results are redelivered by their workers, loss
                reports under way are cancelled.
            timeout: If given, the most seconds (on the clock) a graceful stop waits in all,
                instead of the config's two bounds.
        """
        self._closed = True
        self.probes.clear()
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        await self._reaper.stop()
        if graceful:
            await self._settler.drain(self._wait_s(deadline, self.config.stop_settle_timeout_ms))
        await self._settler.stop()
        for s in list(self._sessions.values()):
            s.end()
        wait_s = self._wait_s(deadline, self.config.stop_reports_timeout_ms) if graceful else 0
        await self._losses.finish(wait_s)

    def _wait_s(self, deadline: float | None, bound_ms: int) -> float:
        if deadline is None:
            return bound_ms / 1000.0
        return max(0.0, deadline - self._clock.monotonic())

    def welcome(self) -> worker_pb2.Welcome:
        """The Welcome that answers a Hello: the node's id, pacing and clock reading."""
        return worker_pb2.Welcome(
            node_id=self.node_id,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            lease_timeout_ms=self.config.lease_timeout_ms,
            now_ms=self._clock.now_ms(),
            live_until_ms=self.live_until_ms(),
        )

    async def reap_expired(self) -> list[InFlight]:
        """Drop, cancel and report every in-flight execution whose lease has run out now."""
        expired = self._in_flight.drop_expired(self._clock.now_ms(), self.config.lease_timeout_ms)
        if expired:
            await self._losses.report(expired, REASON_LEASE_EXPIRED)
        return expired

    # ---- used by the servicer ---------------------------------------------------------------

    def open_session(
        self, hello: worker_pb2.Hello, *, tenants: frozenset[str] | None = None, actor: str = ""
    ) -> WorkerSession:
        """Register a stream that said ``hello``; raises InvalidArgument for a bad Hello.

        ``tenants``: its token lets it be sent only these tenants' executions (None: any);
        ``actor``: its token's id (streams of a revoked token are ended, see
        :meth:`end_sessions`)."""
        check_hello(hello)
        self._next_session_id += 1
        session = WorkerSession(
            self._next_session_id,
            hello,
            connected_ms=self._clock.now_ms(),
            max_batch=self.config.max_batch,
            flush_interval_ms=self.config.flush_interval_ms,
            stats=self.stats,
            promise=(lambda: self.live_until_ms()) if hello.prefetch else None,  # noqa: PLW0108 - follows reassignment
        )
        session.tenants = tenants
        session.actor = actor
        self._sessions[session.session_id] = session
        self._waiting.streams_changed(self._pending.routes(), self._sessions.values())
        log.info(
            "worker %s connected (queues %s)", hello.worker_id, list(hello.queues),
            extra={"node": self.node_id, "worker": hello.worker_id},
        )  # fmt: skip
        return session

    def end_sessions(self, refused: Callable[[str], bool], why: str) -> int:
        """Ends the streams whose token ``refused`` (by id): a revoked or expired worker token
        stops getting work at once; what it held is lost as if it disconnected."""
        ended = 0
        for session in list(self._sessions.values()):
            if session.actor and not session.closed and refused(session.actor):
                log.warning(
                    "worker %s: ending its stream: %s", session.worker_id, why,
                    extra={"node": self.node_id, "worker": session.worker_id},
                )  # fmt: skip
                session.end(f"token {session.actor}: {why}", "UNAUTHENTICATED")
                ended += 1
        return ended

    def close_session(self, session: WorkerSession) -> None:
        """The stream ended: everything in flight on it is lost (reported asynchronously)."""
        session.end()
        if self._sessions.pop(session.session_id, None) is None:
            return
        self._waiting.streams_changed(self._pending.routes(), self._sessions.values())
        self.probes.session_closed(session.session_id)
        lost: list[InFlight] = []
        for eid in list(session.in_flight):
            dropped = self._in_flight.drop(eid)
            if dropped is not None:
                lost.append(dropped[1])
        log.info(
            "worker %s disconnected, %d in flight lost", session.worker_id, len(lost),
            extra={"node": self.node_id, "worker": session.worker_id},
        )  # fmt: skip
        if lost and not self._closed:
            self._losses.report_soon(lost, REASON_DISCONNECTED)

    async def handle_batch(self, session: WorkerSession, batch: worker_pb2.WorkerBatch) -> None:
        """Apply one WorkerBatch: credits, then started, heartbeats and results.

        Results are taken off the in-flight set here and settled by the settler task, so the
        stream's reader goes on to the next batch (and its credits) while the settling writes
        are in flight; results that arrive meanwhile are settled together in the next round.
        """
        self.stats.worker_batches_received += 1
        session.last_heard_ms = self._clock.now_ms()
        if session.silent:
            session.silent = False
            log.info(
                "worker %s answers again; dispatching to it again", session.worker_id,
                extra={"node": self.node_id, "worker": session.worker_id},
            )  # fmt: skip
            self._schedule_pump()
        if session.grant(batch):
            self._schedule_pump()
        if len(self.probes):
            self.probes.answers(session, batch, self._probe_taken)
        if batch.started:
            self._renew(session, [(s.execution_id, s.fencing_token) for s in batch.started])
            started = list(batch.started)
            await guarded(self._authority.on_started(session.worker_id, started), "on_started")
        if batch.heartbeats:
            await self._handle_heartbeats(session, list(batch.heartbeats))
        if batch.results:
            self._queue_results(session, list(batch.results))

    # ---- internals --------------------------------------------------------------------------

    async def _handle_heartbeats(
        self, session: WorkerSession, heartbeats: list[worker_pb2.Heartbeat]
    ) -> None:
        self._renew(session, [(h.execution_id, h.fencing_token) for h in heartbeats])
        stale = await guarded(
            self._authority.on_heartbeats(session.worker_id, heartbeats), "on_heartbeats"
        )
        if stale:
            self._in_flight.drop_stale(session, stale, heartbeats)

    def _queue_results(self, session: WorkerSession, results: list[worker_pb2.Result]) -> None:
        self.stats.results_received += len(results)
        current = self._in_flight.drop_reported(session, results)
        if current:
            try:
                self._authority.on_reported(current)
            except Exception:
                log.exception("execution authority on_reported failed")
        self._settler.queue(session, results)

    def _servable_backlog(self) -> bool:
        """Dispatches wait that a connected worker may take once it grants credits."""
        return self._pending.servable([s.hello for s in self._sessions.values() if not s.closed])

    def _renew(self, session: WorkerSession, items: list[tuple[str, int]]) -> None:
        self._in_flight.renew(session, items, self._clock.now_ms() + self.config.lease_timeout_ms)

    def _schedule_pump(self) -> None:
        if self._pump_scheduled or self._closed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on a loop yet: start() pumps
            return
        self._pump_scheduled = True
        loop.call_soon(self._pump)

    def _pump(self) -> None:
        """Hand pending dispatches to workers with credits (see :func:`hand_out`)."""
        self._pump_scheduled = False
        if not self.may_dispatch():  # fenced for now: look again shortly
            asyncio.get_running_loop().call_later(FENCED_RETRY_S, self._schedule_pump)
            return
        now = self._clock.now_ms()
        until = now + self.config.lease_timeout_ms

        def send(session: WorkerSession, d: worker_pb2.Dispatch) -> None:
            session.send_dispatch(d)
            self._in_flight.track(session, d, now, until)

        hand_out(self._pending, self._sessions.values(), send)

    def _probe_taken(self, session: WorkerSession, d: worker_pb2.Dispatch) -> None:
        now = self._clock.now_ms()
        self._in_flight.track(session, d, now, now + self.config.lease_timeout_ms)

    async def _watch_silence(self, now: int) -> None:
        """Takes back what silent streams hold unstarted (see :func:`silent_holds`)."""
        sessions = self._sessions.values()
        lost = self._in_flight.drop_silent(sessions, now, self.config.silent_after_ms)
        if lost:
            await self._losses.report(lost, REASON_WORKER_SILENT)

    async def _reap_loop(self) -> None:
        interval = max(1, self.config.reap_interval_ms) / 1000.0
        while True:
            await self._clock.sleep(interval)
            now = self._clock.now_ms()
            vouch(self._sessions.values(), self.live_until_ms(), now)
            self.probes.expire(now)
            await self._watch_silence(now)
            await self.reap_expired()
