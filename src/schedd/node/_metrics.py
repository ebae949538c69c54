"""The node's gauges: read when the metrics backend exports (see ``MetricsRecorder.gauge``)."""

from __future__ import annotations

from collections.abc import Callable

from schedd._clock import Clock
from schedd.dispatch import Dispatcher, QueueLoad
from schedd.node._coordination import Coordinator
from schedd.node._fire_policy import FirePolicy
from schedd.node._live import OwnedPartitions
from schedd.obs import MetricsRecorder


def node_gauges(
    rec: MetricsRecorder,
    partitions: OwnedPartitions,
    dispatcher: Dispatcher,
    policy: FirePolicy,
    coordinator: Coordinator,
    clock: Clock,
) -> None:
    """Registers the node's gauges on ``rec`` (a no-op on a recorder that keeps none)."""
    _partition_gauges(rec, partitions, coordinator, clock)
    _dispatch_gauges(rec, dispatcher, clock)
    limiter = policy.tenants

    def tenant_counts(index: int) -> dict[tuple[str, ...], float]:
        return {(t,): float(limiter.counts(t)[index]) for t in limiter.limits()}

    rec.gauge(
        "schedd_tenant_running",
        "Executions of a limited tenant counted against its running cap here",
        lambda: tenant_counts(0),
        ["tenant"],
    )
    rec.gauge(
        "schedd_tenant_waiting",
        "Fires of a limited tenant waiting for a running slot here",
        lambda: tenant_counts(1),
        ["tenant"],
    )


def _partition_gauges(
    rec: MetricsRecorder, partitions: OwnedPartitions, coordinator: Coordinator, clock: Clock
) -> None:
    def timers() -> float:
        return float(sum(len(p.wheel) for p in partitions.values()))

    def live() -> float:
        return float(sum(len(p.live) for p in partitions.values()))

    def claim_lead() -> float:
        now = clock.now_ms()
        leads = [p.pacer.horizon(p.window, now) - now for p in partitions.values()]
        return min(leads) / 1000.0 if leads else 0.0

    def skew() -> float:
        membership = coordinator.membership
        ms = membership.clock_skew_ms() if membership is not None else None
        return (ms or 0) / 1000.0

    rec.gauge("schedd_partitions", "The cluster's partition count", lambda: partitions.count)
    rec.gauge("schedd_timers", "Timers armed in this node's wheels", timers)
    rec.gauge("schedd_live_executions", "Claimed, unfinished executions on this node", live)
    rec.gauge(
        "schedd_claim_lead_seconds",
        "How far ahead of now the least advanced partition claims fires",
        claim_lead,
    )
    rec.gauge("schedd_clock_skew_seconds", "This node's clock minus its peers' median", skew)


def _dispatch_gauges(rec: MetricsRecorder, dispatcher: Dispatcher, clock: Clock) -> None:
    _queue_gauges(rec, dispatcher, clock)
    rec.gauge(
        "schedd_dispatch_in_flight",
        "Executions out on workers (held ahead of their instant included)",
        dispatcher.in_flight_count,
    )
    rec.gauge(
        "schedd_settle_backlog",
        "Results received from workers and not yet settled",
        dispatcher.settle_backlog,
    )
    rec.gauge(
        "schedd_workers_connected",
        "Workers with an open stream to this node",
        lambda: len(dispatcher.worker_ids()),
    )


def _queue_gauges(rec: MetricsRecorder, dispatcher: Dispatcher, clock: Clock) -> None:
    """The per-queue gauges (label ``queue``)."""

    def per_queue(counts: dict[str, int]) -> dict[tuple[str, ...], float]:
        return {(q,): float(n) for q, n in counts.items()}

    def unserved_age() -> dict[tuple[str, ...], float]:
        now = clock.now_ms()
        return {
            (q,): max(0, now - since) / 1000.0
            for q, (_, since) in dispatcher.unserved_by_queue().items()
        }

    unserved = dispatcher.unserved_by_queue
    loads = QueueLoads(dispatcher)
    per_queue_gauges: list[tuple[str, str, Callable[[], dict[tuple[str, ...], float]]]] = [
        (
            "schedd_dispatch_pending",
            "Executions waiting for a worker, per queue",
            lambda: per_queue(loads.field("due")),
        ),
        (
            "schedd_dispatch_unserved",
            "Executions waiting for a worker that serves their handler or kind: none is connected",
            lambda: per_queue({q: n for q, (n, _) in unserved().items()}),
        ),
        (
            "schedd_dispatch_unserved_seconds",
            "How long the oldest of them has waited for a worker that serves it, per queue",
            unserved_age,
        ),
        (
            "schedd_dispatch_held",
            "Executions sent ahead of their instant to workers that hold them, not started "
            "yet, per queue",
            lambda: per_queue(loads.field("held")),
        ),
        (
            "schedd_queue_depth",
            "Executions of this node's partitions waiting to start, per queue: due (waiting "
            "for a worker) plus held (on a worker, not started); 0 for a known queue with "
            "none. Summed over the nodes: what an autoscaler scales workers on",
            lambda: per_queue(loads.field("depth")),
        ),
        (
            "schedd_queue_running",
            "Executions of this node's partitions out on workers and not held, per queue",
            lambda: per_queue(loads.field("running")),
        ),
    ]
    for name, doc, read in per_queue_gauges:
        rec.gauge(name, doc, read, ["queue"])


class QueueLoads:
    """The dispatcher's per-queue counts for the gauges (each gauge reads afresh: a count is
    one pass over the pending and in-flight executions, at scrape time only).

    Every queue seen with work or served by a connected worker keeps a series (0 when it has
    none), so an autoscaler reading ``schedd_queue_depth`` sees the queue drain to 0 instead
    of the series vanishing (an HPA keeps its scale while a metric is missing).
    """

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        self._known: set[str] = set()

    def current(self) -> dict[str, QueueLoad]:
        loads = self._dispatcher.queue_loads()
        self._known.update(loads)
        self._known.update(q for w in self._dispatcher.workers() for q in w.queues)
        return {q: loads.get(q) or QueueLoad() for q in self._known}

    def field(self, name: str) -> dict[str, int]:
        """``{queue: getattr(load, name)}`` (``due``, ``held``, ``running`` or ``depth``)."""
        return {q: int(getattr(load, name)) for q, load in self.current().items()}
