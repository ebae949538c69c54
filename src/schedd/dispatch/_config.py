"""The dispatcher's contracts: its config, the in-flight record and the node-side authority."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from schedd.v1 import worker_pb2

#: Server options a node must pass to ``grpc.aio.server(options=...)`` so that workers that
#: ping every 20-30 s (also while idle) are not dropped with "too many pings".
KEEPALIVE_SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_ping_strikes", 0),
)


@dataclass(frozen=True)
class DispatchConfig:
    """How the dispatcher paces worker streams.

    Attributes:
        heartbeat_interval_ms: Sent to workers in Welcome: how often they heartbeat a running
            execution.
        lease_timeout_ms: An in-flight execution whose lease is not renewed (by Started or a
            Heartbeat) within this is reported lost and cancelled on its worker.
        max_batch: At most this many items (dispatches + cancels + acks) per NodeMessage; a
            full batch is sent at once.
        flush_interval_ms: A batch that is not full is sent at most this long after its first
            item was queued.
        reap_interval_ms: How often the reaper looks for expired leases (on the injected clock).
        settle_defer_ms: While dispatches wait for credits of a connected worker that may take
            them (a burst), results are settled at most this much later (on the injected
            clock): dispatching goes first, and the deferred results are then settled in one
            larger round.
        stop_settle_timeout_ms: A graceful :meth:`Dispatcher.stop` waits at most this long
            for the results already received to be settled (their acks go out before the
            streams end); what is left is redelivered by the workers.
        stop_reports_timeout_ms: A graceful :meth:`Dispatcher.stop` then waits at most this
            long for loss reports under way (:meth:`ExecutionAuthority.on_lost`) to finish.
        restart_delay_ms: A background loop (the lease reaper, the result settler) that fails
            is logged and started again after this long (on the injected clock).
        silent_after_ms: A stream that sent nothing this long (workers send at least a
            keepalive every second, or every ``heartbeat_interval_ms`` if shorter) is
            *silent*: it is sent nothing more and the executions it holds and has not started
            go to other workers under new tokens (once the node's last promise to it has
            lapsed). What it runs stays its own until the lease runs out.
    """

    heartbeat_interval_ms: int = 2000
    lease_timeout_ms: int = 10000
    max_batch: int = 512
    flush_interval_ms: int = 2
    reap_interval_ms: int = 250
    settle_defer_ms: int = 2000
    stop_settle_timeout_ms: int = 2000
    stop_reports_timeout_ms: int = 5000
    restart_delay_ms: int = 100
    silent_after_ms: int = 2500


@dataclass
class InFlight:
    """One execution sent to a worker and not yet finished, lost or forgotten.

    Attributes:
        dispatch: Exactly what was sent (its ``fencing_token`` is the one in force).
        worker_id: The worker's id from its Hello.
        dispatched_ms: Clock reading when it was handed to the worker's stream.
        lease_deadline_ms: Past this (on the dispatcher's clock) the execution is lost.
    """

    dispatch: worker_pb2.Dispatch
    worker_id: str
    dispatched_ms: int
    lease_deadline_ms: int
    #: The worker said it started (a Started or Heartbeat came under this token).
    started: bool = False


@dataclass
class DispatchStats:
    """Counters since the dispatcher was created (for tests and metrics)."""

    node_messages_sent: int = 0
    dispatches_sent: int = 0
    cancels_sent: int = 0
    #: Refusals sent (accepted results get no ack), and results answered either way.
    acks_sent: int = 0
    results_answered: int = 0
    worker_batches_received: int = 0
    results_received: int = 0
    lost: int = 0


class ExecutionAuthority(Protocol):
    """What the node decides for the dispatcher: token checks and what happens after a loss.

    Every method is awaited on the stream's reader (or the reaper), so a slow authority slows
    that stream only. Exceptions are logged and do not end the stream.
    """

    async def on_started(self, worker_id: str, started: list[worker_pb2.Started]) -> None:
        """Workers started these executions (the leases were already extended)."""
        ...

    async def on_heartbeats(
        self, worker_id: str, heartbeats: list[worker_pb2.Heartbeat]
    ) -> list[str]:
        """Record heartbeats (and their checkpoints).

        Returns:
            The execution ids whose token is stale; the dispatcher sends Cancel for each.
        """
        ...

    def on_reported(self, results: list[worker_pb2.Result]) -> None:
        """Results with the in-flight token arrived; they are settled later (the settler may
        defer them behind a dispatch backlog). Called at once, on the stream's reader: the
        executions are no longer running, whatever the settling decides."""
        ...

    async def on_results(
        self, worker_id: str, results: list[worker_pb2.Result]
    ) -> list[worker_pb2.ResultAck]:
        """Settle results: exactly one ack per result, in any order.

        A stale token must be answered with ``accepted=False`` and
        ``code=grpc.StatusCode.FAILED_PRECONDITION.value[0]``.
        """
        ...

    async def on_lost(self, lost: list[InFlight], reason: str) -> None:
        """These executions' worker vanished or their lease ran out.

        The dispatcher has already dropped them; the node re-tokens and resubmits them.
        """
        ...


#: How soon a dispatcher whose node may not dispatch (``Dispatcher.may_dispatch``) looks again.
FENCED_RETRY_S = 0.1


def always() -> bool:
    """The default ``may_dispatch``: a dispatcher alone (no node session) always may."""
    return True


#: Why executions in flight were handed to ``ExecutionAuthority.on_lost``.
REASON_DISCONNECTED = "worker disconnected"
REASON_LEASE_EXPIRED = "lease expired"
REASON_WORKER_SILENT = "held by a silent worker"
