"""``ListQueues`` (``schedctl queue list``) on real nodes, a real worker and etcd: every node
gives the same per-queue counts (due, held, running: each node's part summed; workers
merged across their streams), a node that does not answer is named in missing_nodes, bad
input names its field, and a tenant's token sees its own tenant's counts only."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from integration.cluster_harness import Harness, eventually
from integration.test_cluster_wide_views import _frozen_member
from schedd import InvalidArgument, PermissionDenied
from schedd.auth import TokenStore
from schedd.client import AsyncClient, queue_to_dict
from schedd.dev import EtcdProcess
from schedd.store import Keys, open_store
from schedd.v1 import auth_pb2, scheduler_pb2

pytestmark = pytest.mark.timeout(60)


def _row(resp: scheduler_pb2.ListQueuesResponse, queue: str) -> dict[str, object]:
    (found,) = [queue_to_dict(q) for q in resp.queues if q.queue == queue]
    return found


@pytest.fixture
async def two_nodes(h: Harness) -> AsyncIterator[Harness]:
    """Two nodes that claim and send fires to holders 4 s ahead (a wide window to see them
    held in)."""
    for name in ("n1", "n2"):
        await h.start_node(
            node_id=name, partitions=4, peer_timeout_ms=500, lead_ms=4000, hold_ms=4000
        )
    await eventually(
        lambda: asyncio.sleep(0, result=[len(n.partitions) for n in h.nodes]),
        lambda owned: owned == [2, 2],
        what="two nodes owning two partitions each",
    )
    yield h


async def test_every_node_counts_due_held_and_running_work_and_the_workers(
    two_nodes: Harness,
) -> None:
    h = two_nodes
    # Capacity 4 (2 credits on each node's stream): two slow runs start wherever they are.
    # A run of a handler no worker has waits (due); two fires 5 s ahead are held.
    await h.start_worker("w1", capacity=4, prefetch=50)
    client = await h.connect()
    await eventually(
        client.list_queues,
        lambda r: [q.queue for q in r.queues] == ["default"] and r.queues[0].workers == 1,
        what="the worker to be listed on its queue",
    )
    for name, handler in (("s1", "slow"), ("s2", "slow"), ("nobody", "nobody")):
        job = await client.create_job(
            name, schedule="@every 1h", handler=handler, payload={"seconds": 30}
        )
        await client.trigger_job(job.job.id)
    for i in range(2):
        await client.create_job(f"later{i}", schedule="@after 5s", handler="echo")
    expected = {
        "queue": "default", "due": 1, "held": 2, "running": 2,
        "workers": 1, "capacity": 4, "free_slots": 2,
    }  # fmt: skip
    await eventually(
        client.list_queues,
        lambda r: _row(r, "default") == expected,
        timeout=10,
        what="1 due, 2 held, 2 running",
    )
    parts = [n.dispatcher.queue_loads().get("default") for n in h.nodes]
    assert sum(p.depth for p in parts if p) == 3  # the nodes' own parts add up to it
    for node in h.nodes:  # each node gives the whole cluster's answer
        async with AsyncClient(node.address, timeout_s=5) as one:
            resp = await one.list_queues()
            assert _row(resp, "default") == expected and not resp.missing_nodes
    # The held fires ran at their instant; the slow runs and the one nobody serves remain.
    expected = {**expected, "held": 0}
    await eventually(
        client.list_queues, lambda r: _row(r, "default") == expected, what="the held ones to run"
    )
    # A queue nobody serves and nothing waits on is listed when asked for, empty.
    other = await client.list_queues("other")
    assert [queue_to_dict(q) for q in other.queues] == [
        {"queue": "other", "due": 0, "held": 0, "running": 0, "workers": 0, "capacity": 0,
         "free_slots": 0}
    ]  # fmt: skip

    async with _frozen_member(h, "n9"):
        resp = await eventually(
            client.list_queues,
            lambda r: [m.node_id for m in r.missing_nodes] == ["n9"],
            what="the frozen member to be reported",
        )
        assert resp.missing_nodes[0].reason == "no answer within 500 ms"
        assert _row(resp, "default") == expected  # its part is empty: nothing else lost
        out = await asyncio.to_thread(_schedctl, h.address(), "queue", "list", "-o", "json")
        assert out.returncode == 0, out.stderr
        assert "warning: no answer from node n9" in out.stderr
        data = json.loads(out.stdout)
        assert data["queues"] == [expected] and data["tenant"] == ""
        assert [m["node_id"] for m in data["missing_nodes"]] == ["n9"]

    table = await asyncio.to_thread(_schedctl, h.address(), "queue", "list")
    assert table.returncode == 0, table.stderr
    header, row = [
        line.split("│")
        for line in table.stdout.splitlines()
        if "default" in line or "QUEUE" in line
    ]
    assert [c.strip() for c in row if c.strip()] == ["default", "1", "0", "2", "1", "2/4"]
    assert "FREE SLOTS" in "".join(header)


async def test_bad_input_names_the_field(h: Harness) -> None:
    await h.start_node()
    client = await h.connect()
    for kwargs, field in (({"queue": "a/b"}, "queue"), ({"tenant": "x" * 300}, "tenant")):
        with pytest.raises(InvalidArgument) as info:
            await client.list_queues(**kwargs)
        assert info.value.field == field
    out = await asyncio.to_thread(_schedctl, h.address(), "queue", "list", "--queue", "a\tb")
    assert out.returncode == 2 and "queue" in out.stderr


async def test_a_tenants_token_sees_its_own_counts_and_no_free_slots(
    etcd_server: EtcdProcess, etcd_prefix: bytes, tmp_path: Path
) -> None:
    h = Harness(etcd_server.endpoint, etcd_prefix, tmp_path)
    clients: list[AsyncClient] = []
    try:
        await h.start_node(auth=True)
        kv = await open_store(h.nodes[0].config.store)
        try:
            _, secret = await TokenStore(kv, Keys(etcd_prefix)).create(
                auth_pb2.ApiToken(role="admin"), 0, int(time.time() * 1000), "bootstrap"
            )
        finally:
            await kv.close()
        admin = AsyncClient(h.address(), timeout_s=10, token=secret)
        clients.append(admin)

        async def token(role: str, tenant: str = "") -> AsyncClient:
            made = await admin.create_token(role, tenant=tenant)
            c = AsyncClient(h.address(), timeout_s=10, token=made.secret)
            clients.append(c)
            return c

        a, b, worker = await token("editor", "a"), await token("viewer", "b"), await token("worker")
        # No worker serves "nobody": tenant a's two runs wait, due.
        for i in range(2):
            job = (await a.create_job(f"j{i}", schedule="@every 1h", handler="nobody")).job
            await a.trigger_job(job.id)
        every = await eventually(
            admin.list_queues,
            lambda r: bool(r.queues) and r.queues[0].due == 2,
            what="two due runs",
        )
        assert _row(every, "default")["free_slots"] == 0 and every.tenant == ""
        own = await a.list_queues()
        assert own.tenant == "a" and _row(own, "default") == {
            "queue": "default", "due": 2, "held": 0, "running": 0, "workers": 0,
            "capacity": 0, "free_slots": None,
        }  # fmt: skip
        theirs = await b.list_queues()
        assert theirs.tenant == "b" and theirs.queues == []  # not even the queue's name
        assert _row(await b.list_queues("default"), "default")["due"] == 0
        assert (await admin.list_queues(tenant="b")).queues == []
        with pytest.raises(PermissionDenied, match="tenant"):
            await b.list_queues(tenant="a")
        with pytest.raises(PermissionDenied, match="worker token"):
            await worker.list_queues()
    finally:
        for c in clients:
            await c.close()
        await h.close()


def _schedctl(endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", "from schedd.cli.schedctl import main; main()",
         "--endpoints", endpoint, *args],
        capture_output=True, text=True, timeout=30, env=env, check=False,
    )  # fmt: skip
