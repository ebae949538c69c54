"""The node's gauges, read when Prometheus scrapes (see :mod:`schedd.obs._prometheus`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedd.obs._prometheus import PrometheusRecorder

if TYPE_CHECKING:
    from schedd.node._node import Node


def node_gauges(node: Node, rec: PrometheusRecorder) -> None:
    """Registers the node's scrape-time gauges on ``rec``."""
    partitions = node.partitions
    dispatcher = node.dispatcher
    limiter = node.policy.tenants

    def timers() -> float:
        return float(sum(len(p.wheel) for p in partitions.values()))

    def live() -> float:
        return float(sum(len(p.live) for p in partitions.values()))

    def claim_lead() -> float:
        now = node.clock.now_ms()
        leads = [p.pacer.horizon(p.window, now) - now for p in partitions.values()]
        return min(leads) / 1000.0 if leads else 0.0

    def skew() -> float:
        membership = node._membership
        ms = membership.clock_skew_ms() if membership is not None else None
        return (ms or 0) / 1000.0

    def pending() -> dict[tuple[str, ...], float]:
        return {(q,): float(n) for q, n in dispatcher.pending_by_queue().items()}

    def unserved() -> dict[tuple[str, ...], float]:
        return {(q,): float(n) for q, (n, _) in dispatcher.unserved_by_queue().items()}

    def unserved_age() -> dict[tuple[str, ...], float]:
        now = node.clock.now_ms()
        return {
            (q,): max(0, now - since) / 1000.0
            for q, (_, since) in dispatcher.unserved_by_queue().items()
        }

    def held() -> dict[tuple[str, ...], float]:
        return {(q,): float(n) for q, n in dispatcher.held_by_queue().items()}

    def tenant_counts(index: int) -> dict[tuple[str, ...], float]:
        return {(t,): float(limiter.counts(t)[index]) for t in limiter.limits()}

    rec.gauge("schedd_partitions", "The cluster's partition count", lambda: partitions.count)
    rec.gauge("schedd_timers", "Timers armed in this node's wheels", timers)
    rec.gauge("schedd_live_executions", "Claimed, unfinished executions on this node", live)
    rec.gauge(
        "schedd_claim_lead_seconds",
        "How far ahead of now the least advanced partition claims fires",
        claim_lead,
    )
    rec.gauge("schedd_clock_skew_seconds", "This node's clock minus its peers' median", skew)
    rec.gauge(
        "schedd_dispatch_pending", "Executions waiting for a worker, per queue", pending, ["queue"]
    )
    rec.gauge(
        "schedd_dispatch_unserved",
        "Executions waiting for a worker that serves their handler or kind: none is connected",
        unserved,
        ["queue"],
    )
    rec.gauge(
        "schedd_dispatch_unserved_seconds",
        "How long the oldest of them has waited for a worker that serves it, per queue",
        unserved_age,
        ["queue"],
    )
    rec.gauge(
        "schedd_dispatch_held",
        "Executions held on workers for a later instant, not started yet, per queue",
        held,
        ["queue"],
    )
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
