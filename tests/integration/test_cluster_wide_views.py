"""Cluster-wide views on three real nodes (6 partitions: each owns two), a real worker and
etcd: every node gives the same run list, worker list and cluster status; pages cut on one
node continue on another; a node that is down or frozen is named in missing_nodes;
GetExecution tells NOT_FOUND from UNAVAILABLE; a restarted node still serves its history.

Each test starts its own three nodes (about 5 s), so the file stays well under 30 s."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from integration.cluster_harness import Harness, eventually
from schedd._errors import InvalidArgument, NotFound, Unavailable
from schedd.client import AsyncClient
from schedd.coord import NodeInfo
from schedd.node import Node
from schedd.store import EtcdConfig, EtcdKV, Keys
from schedd.v1 import execution_pb2, scheduler_pb2

pytestmark = pytest.mark.timeout(60)

SUCCEEDED = execution_pb2.EXECUTION_SUCCEEDED
RUNS = 12


async def _balanced(h: Harness) -> None:
    await eventually(
        lambda: asyncio.sleep(0, result=[len(n.partitions) for n in h.nodes]),
        lambda owned: owned == [2, 2, 2],
        what="three nodes owning two partitions each",
    )


@pytest.fixture
async def cluster(h: Harness) -> AsyncIterator[Harness]:
    """Three nodes, one worker connected to all, RUNS manual runs finished across the nodes."""
    for name in ("n1", "n2", "n3"):
        await h.start_node(node_id=name, partitions=6, peer_timeout_ms=500)
    await _balanced(h)
    await h.start_worker("w1")
    client = await h.connect()
    for i in range(RUNS):
        job = (await client.create_job(f"j{i}", schedule="@every 1h", handler="echo")).job
        await client.trigger_job(job.id)
    await eventually(
        lambda: client.list_executions(limit=100),
        lambda rows: len(rows) == RUNS and all(r.state == SUCCEEDED for r in rows),
        what="every triggered run to succeed",
    )
    yield h


def _clients(h: Harness) -> list[AsyncClient]:
    """One client per node, each sending every call to that node only."""
    return [AsyncClient(n.address, timeout_s=10) for n in h.nodes]


async def _close(clients: list[AsyncClient]) -> None:
    for c in clients:
        await c.close()


def _rows(rows: Any) -> list[tuple[str, int, int]]:
    return [(r.id, r.state, r.fencing_token) for r in rows]


def _holder(h: Harness, execution_id: str) -> Node:
    return next(n for n in h.nodes if n.history.get(execution_id) is not None)


async def test_every_node_gives_the_same_runs_workers_and_status(cluster: Harness) -> None:
    h = cluster
    # The history is spread: no one node could answer alone.
    local = [len(n.history.list(limit=100)) for n in h.nodes]
    assert sum(local) == RUNS and sum(1 for k in local if k) >= 2, local
    clients = _clients(h)
    try:
        lists = [await c.list_executions(limit=100) for c in clients]
        assert all(not rows.missing_nodes for rows in lists)
        assert _rows(lists[0]) == _rows(lists[1]) == _rows(lists[2])
        assert [r.scheduled_ms for r in lists[0]] == sorted(
            (r.scheduled_ms for r in lists[0]), reverse=True
        )

        statuses = [await c.cluster_status() for c in clients]
        for status in statuses:
            assert not status.missing_nodes
            assert [n.node_id for n in status.nodes] == ["n1", "n2", "n3"]
            assert all(n.reported and n.eligible and len(n.owned) == 2 for n in status.nodes)
            assert all(n.clock_skew_known and abs(n.clock_skew_ms) < 500 for n in status.nodes)
            # The worker has a stream to every node and is listed once, with all of them.
            assert [(w.worker_id, list(w.node_ids)) for w in status.workers] == [
                ("w1", ["n1", "n2", "n3"])
            ]

        def view(s: scheduler_pb2.ClusterStatus) -> Any:
            nodes = [
                (n.node_id, n.address, [(p.partition, p.epoch) for p in n.owned]) for n in s.nodes
            ]
            parts = [(p.partition, p.owner, p.epoch) for p in s.partitions]
            return nodes, parts

        assert view(statuses[0]) == view(statuses[1]) == view(statuses[2])
        # Each node's own fences agree with the partition table in etcd.
        table = {p.partition: (p.owner, p.epoch) for p in statuses[0].partitions}
        for n in statuses[0].nodes:
            assert all(table[p.partition] == (n.node_id, p.epoch) for p in n.owned)
        # Discovery's cheap form answers from the node asked alone.
        mine = await clients[1].cluster_status(local_only=True)
        assert [n.node_id for n in mine.nodes if n.reported] == ["n2"]

        # GetExecution finds what only another node's history has; NOT_FOUND when all answered.
        for ex in lists[0][:4]:
            holder = _holder(h, ex.id)
            other = clients[(h.nodes.index(holder) + 1) % 3]
            assert (await other.get_execution(ex.id)).state == SUCCEEDED
        with pytest.raises(NotFound, match="no-such-job"):
            await clients[0].get_execution("no-such-job@1700000000000")

        # A running execution: etcd has it as handed out, its owner's memory as RUNNING; every
        # node shows RUNNING (the most advanced copy).
        slow = (await clients[0].create_job("slow", schedule="@every 1h", handler="slow")).job
        run = await clients[0].trigger_job(slow.id, payload={"seconds": 3})
        await eventually(
            lambda: clients[2].get_execution(run.id),
            lambda ex: ex.state == execution_pb2.EXECUTION_RUNNING,
            what="the slow run to be running",
        )
        for c in clients:
            assert (await c.get_execution(run.id)).state == execution_pb2.EXECUTION_RUNNING
            listed = await c.list_executions(job_id=slow.id)
            assert [(r.id, r.state) for r in listed] == [(run.id, execution_pb2.EXECUTION_RUNNING)]
    finally:
        await _close(clients)


async def test_pages_cut_on_one_node_continue_on_another(cluster: Harness) -> None:
    clients = _clients(cluster)
    try:
        full = _rows(await clients[0].list_executions(limit=100))
        got: list[tuple[str, int, int]] = []
        token = ""
        for turn in range(10):
            page = await clients[turn % 3].list_executions_page(page_size=5, page_token=token)
            assert len(page.executions) <= 5 and not page.missing_nodes
            got += _rows(page.executions)
            token = page.next_page_token
            if not token:
                break
        assert got == full and len(got) == RUNS
        one_job = (
            await clients[2].list_executions_page(job_id=full[0][0].split("@")[0])
        ).executions
        assert [r.id for r in one_job] == [full[0][0]]

        for bad in ("12", "not-a-token", token + "%"):
            with pytest.raises(InvalidArgument) as info:
                await clients[1].list_executions_page(page_token=bad)
            assert info.value.field == "page_token"
    finally:
        await _close(clients)


@contextlib.asynccontextmanager
async def _frozen_member(h: Harness, node_id: str) -> AsyncIterator[str]:
    """A member whose record is live in etcd but whose address accepts connections and never
    answers (as a SIGSTOPped node's would)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    address = f"127.0.0.1:{sock.getsockname()[1]}"
    kv = await EtcdKV.connect(EtcdConfig(endpoints=(h.endpoint,)))
    lease = await kv.grant(30)
    info = NodeInfo(node_id, address, "0.1.0", 0, 0, eligible=False)
    try:
        await kv.put(Keys(h.prefix).node_key(node_id), info.to_json(), lease=lease)
        yield address
    finally:
        await kv.revoke(lease)
        await kv.close()
        sock.close()


async def test_a_frozen_or_stopped_node_is_named_and_get_says_unavailable(
    cluster: Harness,
) -> None:
    h = cluster
    clients = _clients(h)
    try:
        rows = await clients[0].list_executions(limit=100)
        async with _frozen_member(h, "n9"):
            await eventually(
                lambda: clients[0].list_executions(limit=100),
                lambda r: [m.node_id for m in r.missing_nodes] == ["n9"],
                what="the frozen member to be reported",
            )
            listing = await clients[1].list_executions(limit=100)
            assert listing.missing_nodes[0].reason == "no answer within 500 ms"
            assert _rows(listing) == _rows(rows)  # its part is empty: nothing else lost
            status = await clients[2].cluster_status()
            assert [m.node_id for m in status.missing_nodes] == ["n9"]
            n9 = next(n for n in status.nodes if n.node_id == "n9")
            assert not n9.reported
            with pytest.raises(Unavailable, match="n9"):
                await clients[0].get_execution("no-such-job@1700000000000")

        # A node whose server is down (its session still live): UNAVAILABLE, named.
        n3 = h.nodes[2]
        on_n3 = [r for r in rows if n3.history.get(r.id) is not None]
        elsewhere = [r for r in rows if n3.history.get(r.id) is None]
        assert on_n3 and elsewhere
        await n3.server.stop(0)
        listing = await clients[0].list_executions(limit=100)
        assert [m.node_id for m in listing.missing_nodes] == ["n3"]
        assert listing.missing_nodes[0].reason.startswith("UNAVAILABLE")
        assert {r.id for r in listing} == {r.id for r in elsewhere}
        assert (await clients[1].get_execution(elsewhere[0].id)).state == SUCCEEDED
        with pytest.raises(Unavailable, match="n3"):
            await clients[1].get_execution(on_n3[0].id)
        with pytest.raises(Unavailable, match="n3"):
            await clients[1].get_execution("no-such-job@1700000000000")
    finally:
        await _close(clients)


async def test_a_restarted_node_still_serves_its_history_after_partitions_moved(
    cluster: Harness,
) -> None:
    h = cluster
    before = _rows(await (await h.connect()).list_executions(limit=100))
    # A node that settled some of the runs (job ids are random: any one node may have none).
    at = h.nodes.index(_holder(h, before[0][0]))
    old = h.nodes[at]
    kept = [r for r in before if old.history.get(r[0]) is not None]
    assert kept
    await old.stop(timeout=2.0)
    others = [n for n in h.nodes if n is not old]
    # Its partitions move to the other two (a graceful stop releases them) ...
    await eventually(
        lambda: asyncio.sleep(0, result=[len(n.partitions) for n in others]),
        lambda owned: owned == [3, 3],
        what="the other two nodes to take over its partitions",
    )
    # ... and back, once it runs again on the same data dir.
    new = h.nodes[at] = Node(old.config)
    await new.start()
    await _balanced(h)
    assert new.history.get(kept[0][0]) is not None  # read back from its RocksDB
    clients = _clients(h)
    try:
        for c in clients:
            rows = await c.list_executions(limit=100)
            assert not rows.missing_nodes
            assert _rows(rows) == before
        # Whichever node owns its partition now, the node that settled it answers for it.
        other = clients[(at + 1) % len(clients)]  # asked of a node that did not settle it
        assert (await other.get_execution(kept[0][0])).state == SUCCEEDED
    finally:
        await _close(clients)
