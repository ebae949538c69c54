"""The cluster-wide answers of ``ListExecutions``, ``GetExecution``, ``GetClusterStatus`` and
``ListQueues``.

:class:`ClusterViews` asks every live node for its part (:class:`~._fanout.Fanout`: this node
directly, peers over the internal ``Peer`` service) and reads the shared part once from the
store (live executions and dead letters in etcd); :mod:`._views` merges. :class:`LocalParts`
is what a node answers about itself alone, to itself and to a peer's ``Peer`` call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from schedd._errors import ExecutionNotFound, Unavailable
from schedd.history import Position, comes_after, list_order
from schedd.model import validate_execution_id
from schedd.node._fanout import Fanout
from schedd.node._fire_tree import fire_execution_ids, fire_part, shared_fire_part
from schedd.node._queues import merge_queues
from schedd.node._views import (
    advancement,
    cut_page,
    decode_page_token,
    encode_page_token,
    matches,
    merge_executions,
    merge_workers,
)
from schedd.store import JobStore
from schedd.v1 import execution_pb2, peer_pb2, peer_pb2_grpc, scheduler_pb2

#: One page of a part, and whether the part holds more after it.
Part = tuple[list[execution_pb2.Execution], bool]


class LocalParts(Protocol):
    """What one node knows alone: its history, its in-memory executions, itself."""

    def local_executions(
        self, req: scheduler_pb2.ListExecutionsRequest, after: Position | None, limit: int
    ) -> Part:
        """Up to ``limit`` of its executions matching ``req``'s filters, after ``after``."""
        ...

    def local_execution(self, execution_id: str) -> execution_pb2.Execution | None: ...

    def local_status(self) -> peer_pb2.LocalStatus: ...

    def local_queues(self, req: scheduler_pb2.ListQueuesRequest) -> peer_pb2.LocalQueues: ...

    async def membership_status(self) -> scheduler_pb2.ClusterStatus:
        """Cluster id, partition table (from the store) and the live nodes as it sees them."""
        ...


def describe_missing(missing: list[scheduler_pb2.MissingNode]) -> str:
    """``node n2 (no answer within 2000 ms), node n3 (UNAVAILABLE: ...)``."""
    return ", ".join(f"node {m.node_id} ({m.reason})" for m in missing)


def _part_of(resp: scheduler_pb2.ListExecutionsResponse) -> Part:
    return list(resp.executions), bool(resp.next_page_token)


class ClusterViews:
    def __init__(self, local: LocalParts, fanout: Fanout, jobs: JobStore) -> None:
        self.local = local
        self.fanout = fanout
        self.jobs = jobs

    async def list_executions(
        self, req: scheduler_pb2.ListExecutionsRequest, after: Position | None, size: int
    ) -> scheduler_pb2.ListExecutionsResponse:
        """One page of every node's executions and etcd's live ones, merged."""
        ask = scheduler_pb2.ListExecutionsRequest()
        ask.CopyFrom(req)
        ask.page_size = size
        # One root fire's (req.root): its executions by id; each peer resolves the same ids.
        ids = await fire_execution_ids(self.jobs, req.root) if req.root else None

        async def local() -> Part:
            if ids is not None:
                found = (self.local.local_execution(i) for i in ids)
                return fire_part(found, req, after, size)
            return self.local.local_executions(req, after, size)

        async def remote(stub: peer_pb2_grpc.PeerAsyncStub, timeout: float) -> Part:
            rows, more = _part_of(await stub.ListLocalExecutions(ask, timeout=timeout))
            if ids is not None:  # a peer that ignored root (an older version) is cut down here
                return fire_part(rows, req, after, size)[0], more
            return rows, more

        store_part = (
            shared_fire_part(self.jobs, ids, req, after, size)
            if ids is not None
            else self._shared_part(req, after, size)
        )
        (parts, missing), shared = await asyncio.gather(self.fanout.ask(local, remote), store_part)
        all_parts = [*parts.values(), shared]
        merged = merge_executions(rows for rows, _ in all_parts)
        page, token = cut_page(merged, size, any(more for _, more in all_parts))
        return scheduler_pb2.ListExecutionsResponse(
            executions=page, next_page_token=token, missing_nodes=missing
        )

    async def _shared_part(
        self, req: scheduler_pb2.ListExecutionsRequest, after: Position | None, size: int
    ) -> Part:
        states = list(req.states)
        rows = [
            e
            for e in await self.jobs.list_live(req.job_id)
            if matches(e, req.job_id, req.tenant, states) and comes_after(e, after)
        ]
        rows.sort(key=list_order)
        return rows[:size], len(rows) > size

    async def get_execution(self, execution_id: str) -> execution_pb2.Execution:
        """The most advanced copy any node or etcd has.

        Raises:
            ExecutionNotFound: every node answered and none has it.
            Unavailable: nobody has it, but some node did not answer (it may).
        """

        async def local() -> execution_pb2.Execution | None:
            return self.local.local_execution(execution_id)

        async def remote(
            stub: peer_pb2_grpc.PeerAsyncStub, timeout: float
        ) -> execution_pb2.Execution | None:
            req = scheduler_pb2.GetExecutionRequest(id=execution_id)
            ans = await stub.GetLocalExecution(req, timeout=timeout)
            return ans.execution if ans.found else None

        (parts, missing), live, dead = await asyncio.gather(
            self.fanout.ask(local, remote),
            self.jobs.get_live_execution(execution_id),
            self._dead(execution_id),
        )
        found = [e for e in (*parts.values(), live, dead) if e is not None]
        if found:
            return max(found, key=advancement)
        if missing:
            raise Unavailable(
                f"execution {execution_id!r} is not on the nodes that answered; no answer from "
                f"{describe_missing(missing)}, which may have it"
            )
        raise ExecutionNotFound(execution_id)

    async def _dead(self, execution_id: str) -> execution_pb2.Execution | None:
        try:
            return await self.jobs.get_dead(execution_id)
        except ExecutionNotFound:
            return None

    async def cluster_status(self, local_only: bool) -> scheduler_pb2.ClusterStatus:
        """Nodes (each with its own report), partitions, workers merged across nodes."""
        if local_only:
            status = await self.local.membership_status()
            mine = self.local.local_status()
            _apply_reports(status, {mine.node.node_id: mine})
            status.workers.extend(mine.workers)
            return status

        async def local() -> peer_pb2.LocalStatus:
            return self.local.local_status()

        async def remote(stub: peer_pb2_grpc.PeerAsyncStub, timeout: float) -> peer_pb2.LocalStatus:
            return await stub.GetLocalStatus(
                scheduler_pb2.GetClusterStatusRequest(), timeout=timeout
            )

        (reports, missing), status = await asyncio.gather(
            self.fanout.ask(local, remote), self.local.membership_status()
        )
        _apply_reports(status, reports)
        status.workers.extend(merge_workers(r.workers for r in reports.values()))
        status.missing_nodes.extend(missing)
        return status

    async def list_queues(
        self, req: scheduler_pb2.ListQueuesRequest
    ) -> scheduler_pb2.ListQueuesResponse:
        """Every node's per-queue part (``req`` validated and scoped), merged."""

        async def local() -> peer_pb2.LocalQueues:
            return self.local.local_queues(req)

        async def remote(stub: peer_pb2_grpc.PeerAsyncStub, timeout: float) -> peer_pb2.LocalQueues:
            return await stub.GetLocalQueues(req, timeout=timeout)

        parts, missing = await self.fanout.ask(local, remote)
        return scheduler_pb2.ListQueuesResponse(
            queues=merge_queues(parts.values(), req.queue), tenant=req.tenant, missing_nodes=missing
        )


def _apply_reports(
    status: scheduler_pb2.ClusterStatus, reports: dict[str, peer_pb2.LocalStatus]
) -> None:
    """Fills each listed node's own report in (a node that answered but is not listed yet,
    having just joined, is added)."""
    listed = {n.node_id: n for n in status.nodes}
    for node_id in sorted(reports):
        report = reports[node_id].node
        entry = listed.get(node_id)
        if entry is None:
            entry = status.nodes.add()
            entry.CopyFrom(report)
            continue
        entry.clock_skew_ms = report.clock_skew_ms
        entry.clock_skew_known = report.clock_skew_known
        entry.eligible = report.eligible
        entry.ineligible_reason = report.ineligible_reason
        entry.owned.extend(report.owned)
        entry.store_writes_known = report.store_writes_known
        entry.store_keys_written = report.store_keys_written
        entry.store_bytes_written = report.store_bytes_written
        entry.reported = True


class PeerAnswers:
    """The ``Peer`` service's answers: this node's own part, never a fan-out."""

    def __init__(
        self, local: LocalParts, page_size: Callable[[int], int], jobs: JobStore | None = None
    ) -> None:
        self.local = local
        self.page_size = page_size
        #: Where a root fire's jobs are read (``req.root``; the asking node checked it).
        self.jobs = jobs

    async def list_local(
        self, req: scheduler_pb2.ListExecutionsRequest
    ) -> scheduler_pb2.ListExecutionsResponse:
        after = decode_page_token(req.page_token)
        size = self.page_size(req.page_size)
        if req.root and self.jobs is not None:
            validate_execution_id("root", req.root)
            ids = await fire_execution_ids(self.jobs, req.root)
            found = (self.local.local_execution(i) for i in ids)
            rows, more = fire_part(found, req, after, size)
        else:
            rows, more = self.local.local_executions(req, after, size)
        token = encode_page_token(Position.of(rows[-1])) if more and rows else ""
        return scheduler_pb2.ListExecutionsResponse(executions=rows, next_page_token=token)

    async def get_local(self, req: scheduler_pb2.GetExecutionRequest) -> peer_pb2.LocalExecution:
        ex = self.local.local_execution(validate_execution_id("id", req.id))
        if ex is None:
            return peer_pb2.LocalExecution(found=False)
        return peer_pb2.LocalExecution(found=True, execution=ex)

    async def status_local(
        self, req: scheduler_pb2.GetClusterStatusRequest
    ) -> peer_pb2.LocalStatus:
        return self.local.local_status()

    async def queues_local(self, req: scheduler_pb2.ListQueuesRequest) -> peer_pb2.LocalQueues:
        return self.local.local_queues(req)


__all__ = ["ClusterViews", "LocalParts", "PeerAnswers", "describe_missing"]
