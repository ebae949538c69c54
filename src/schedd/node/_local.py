"""What one node knows alone, for itself and its peers: the local read model.

:class:`LocalReads` answers from this node's history and from the executions its partitions
hold in memory (with the dispatch state only memory has: why one waits for a worker), and
describes the node and the cluster as this node sees them. The client API's cluster-wide views
(:class:`~._cluster_views.ClusterViews`) merge every node's answer; the ``Peer`` service
(:class:`~._cluster_views.PeerAnswers`) gives this one's to the others.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from schedd._clock import Clock
from schedd.dispatch import Dispatcher
from schedd.history import History, Position, comes_after, list_order
from schedd.node._coordination import Coordinator
from schedd.node._live import OwnedPartitions
from schedd.node._views import advancement, matches, merge_executions
from schedd.store import StoreWrites
from schedd.v1 import execution_pb2, peer_pb2, scheduler_pb2

#: What a node publishes as its version (node records, cluster status).
VERSION = "0.1.0"


class LocalReads:
    """This node's executions, status and view of the cluster (see the module's docstring)."""

    def __init__(
        self,
        node_id: str,
        address: Callable[[], str],
        started_ms: int,
        clock: Clock,
        history: History,
        partitions: OwnedPartitions,
        dispatcher: Dispatcher,
        coordinator: Coordinator,
        cluster_id: str,
        store_writes: Callable[[], StoreWrites | None] = lambda: None,
    ) -> None:
        self.node_id = node_id
        self._store_writes = store_writes
        self._address = address
        self.started_ms = started_ms
        self.clock = clock
        self.history = history
        self.partitions = partitions
        self.dispatcher = dispatcher
        self.coordinator = coordinator
        self.cluster_id = cluster_id

    def local_executions(
        self, req: scheduler_pb2.ListExecutionsRequest, after: Position | None, limit: int
    ) -> tuple[list[execution_pb2.Execution], bool]:
        """Its history and its claimed, unfinished executions (with the dispatch state only
        memory has), up to ``limit`` after ``after``; and whether it holds more."""
        states = list(req.states)
        done = self.history.page(
            job_id=req.job_id, tenant=req.tenant, states=states, after=after, limit=limit
        )
        held = [
            live.ex
            for part in self.partitions.values()
            for live in part.live.values()
            if matches(live.ex, req.job_id, req.tenant, states) and comes_after(live.ex, after)
        ]
        live = [self._with_waiting(ex) for ex in heapq.nsmallest(limit, held, key=list_order)]
        merged = merge_executions([done, live])
        more = len(done) >= limit or len(held) > limit or len(merged) > limit
        return merged[:limit], more

    def local_execution(self, execution_id: str) -> execution_pb2.Execution | None:
        part = self.partitions.of_execution(execution_id)
        live = part.live.get(execution_id) if part else None
        done = self.history.get(execution_id)
        found = [done] if done is not None else []
        if live is not None:
            found.append(self._with_waiting(live.ex))
        return max(found, key=advancement) if found else None

    def _with_waiting(self, ex: execution_pb2.Execution) -> execution_pb2.Execution:
        """A copy of a live execution (memory moves on), with why it waits for a worker."""
        copy = execution_pb2.Execution()
        copy.CopyFrom(ex)
        reason = self.dispatcher.waiting_reason(ex.id)
        if reason is not None:
            copy.waiting = reason.text
            copy.waiting_since_ms = reason.since_ms
        return copy

    def local_status(self) -> peer_pb2.LocalStatus:
        membership, ownership = self.coordinator.membership, self.coordinator.ownership
        me = scheduler_pb2.NodeStatus(
            node_id=self.node_id,
            address=self._address(),
            version=VERSION,
            started_ms=self.started_ms,
            clock_ms=self.clock.now_ms(),
            partitions_owned=len(self.partitions),
            reported=True,
        )
        skew = membership.clock_skew_ms() if membership is not None else None
        me.clock_skew_known = skew is not None
        me.clock_skew_ms = skew or 0
        if membership is None or ownership is None:
            me.ineligible_reason = "no session with the store yet"
        elif ownership.skew_reason or ownership.join_reason:
            me.ineligible_reason = ownership.skew_reason or ownership.join_reason
        elif not membership.info.eligible:
            me.ineligible_reason = "clock not yet compared with the peers' clocks"
        else:
            me.eligible = True
        if ownership is not None:
            for p, fence in sorted(ownership.owned().items()):
                me.owned.add(partition=p, owner=self.node_id, epoch=fence.epoch)
        writes = self._store_writes()
        if writes is not None:
            me.store_writes_known = True
            me.store_keys_written, me.store_bytes_written = writes.keys, writes.bytes
        return peer_pb2.LocalStatus(node=me, workers=self.dispatcher.workers())

    def local_queues(self, req: scheduler_pb2.ListQueuesRequest) -> peer_pb2.LocalQueues:
        """This node's part of ``ListQueues``: its per-queue counts (``req.tenant``'s only,
        when set; the caller scoped it) and its worker streams (``req.queue``'s, when set)."""
        out = peer_pb2.LocalQueues()
        for name, load in sorted(self.dispatcher.queue_loads(req.tenant or None).items()):
            if not req.queue or name == req.queue:
                out.queues.add(queue=name, due=load.due, held=load.held, running=load.running)
        workers = self.dispatcher.workers()
        out.workers.extend(w for w in workers if not req.queue or req.queue in w.queues)
        return out

    async def membership_status(self) -> scheduler_pb2.ClusterStatus:
        status = scheduler_pb2.ClusterStatus(
            cluster_id=self.cluster_id, partition_count=self.partitions.count
        )
        owners: dict[str, int] = {}
        ownership, membership = self.coordinator.ownership, self.coordinator.membership
        if ownership is not None:
            for p, owner, epoch in await ownership.partitions_status():
                status.partitions.append(
                    scheduler_pb2.PartitionStatus(partition=p, owner=owner, epoch=epoch)
                )
                owners[owner] = owners.get(owner, 0) + 1
        if membership is not None:
            for info in sorted(membership.live_nodes().values(), key=lambda i: i.node_id):
                status.nodes.append(
                    scheduler_pb2.NodeStatus(
                        node_id=info.node_id,
                        address=info.address,
                        version=info.version,
                        started_ms=info.started_ms,
                        clock_ms=info.clock_ms,
                        partitions_owned=owners.get(info.node_id, 0),
                    )
                )
        return status
