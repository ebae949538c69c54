"""ListExecutions' root filter (``root``: one root fire's executions) on two real nodes, a
worker and etcd: each node lists exactly the root's and its descendants' executions for that
fire, though the history is spread over both (each peer applies the same filter), page by
page too; a subtree from a child's execution; bad ids name ``root``; a root of no job, or of
another tenant, is NOT_FOUND (for a tenant's token as for a tenant filter)."""

from __future__ import annotations

import asyncio
import time

import pytest

from integration.cluster_harness import Harness, eventually
from schedd._errors import InvalidArgument, NotFound
from schedd.auth import TokenStore
from schedd.client import AsyncClient
from schedd.node._cluster_views import PeerAnswers
from schedd.store import Keys, open_store
from schedd.v1 import auth_pb2, execution_pb2, scheduler_pb2

pytestmark = pytest.mark.timeout(60)

DONE = execution_pb2.EXECUTION_SUCCEEDED


async def _tree(c: AsyncClient) -> dict[str, str]:
    """root -> b -> c; root -> f0, f1 -> join (fan-in); name -> id."""
    ids = {"root": (await c.create_job("root", schedule="@every 1h", handler="echo")).job.id}
    for name, after in (("b", ["root"]), ("c", ["b"]), ("f0", ["root"]), ("f1", ["root"])):
        ids[name] = (await c.create_job(name, after=after, handler="echo")).job.id
    ids["join"] = (await c.create_job("join", after=["f0", "f1"], handler="echo")).job.id
    return ids


async def _fire(c: AsyncClient, root_id: str, ids: dict[str, str]) -> int:
    fire = (await c.trigger_job(root_id)).scheduled_ms
    await eventually(
        lambda: c.list_executions(limit=200),
        lambda rows: {i: DONE for i in ids.values()}
        == {r.job_id: r.state for r in rows if r.scheduled_ms == fire},
        what="every job of the fire to succeed", timeout=20,
    )  # fmt: skip
    return fire


async def test_every_node_lists_one_root_fire_and_bad_roots_are_refused(h: Harness) -> None:
    for name in ("n1", "n2"):
        await h.start_node(node_id=name, partitions=4, peer_timeout_ms=1000)
    await eventually(
        lambda: asyncio.sleep(0, result=[len(n.partitions) for n in h.nodes]),
        lambda owned: owned == [2, 2], what="two nodes owning two partitions each",
    )  # fmt: skip
    await h.start_worker("w1")
    c = await h.connect()
    ids = await _tree(c)
    other = (await c.create_job("other", schedule="@every 1h", handler="echo")).job
    first = await _fire(c, ids["root"], ids)
    await c.trigger_job(other.id)
    second = await _fire(c, ids["root"], ids)  # another fire of the same root
    assert second != first
    want = sorted(f"{j}@{first}" for j in ids.values())
    held = [{e for e in want if n.history.get(e) is not None} for n in h.nodes]
    assert all(held) and set().union(*held) == set(want)  # no one node holds them all
    for node, mine in zip(h.nodes, held, strict=True):  # what a node answers its peers
        ask = scheduler_pb2.ListExecutionsRequest(root=f"{ids['root']}@{first}")
        part = await PeerAnswers(node.local, lambda n: n or 100, node.jobs).list_local(ask)
        assert {r.id for r in part.executions} == mine
    clients = [AsyncClient(n.address, timeout_s=10) for n in h.nodes]
    try:
        for node_client in clients:
            rows = await node_client.list_executions(root=f"{ids['root']}@{first}")
            assert sorted(r.id for r in rows) == want and not rows.missing_nodes
            assert {r.job_name for r in rows} == set(ids)
            paged, token = [], ""
            while True:
                page = await node_client.list_executions_page(
                    root=f"{ids['root']}@{first}", page_size=2, page_token=token
                )
                paged += [r.id for r in page.executions]
                token = page.next_page_token
                if not token:
                    break
            assert sorted(paged) == want and len(paged) == len(want)
        sub = await c.list_executions(root=f"{ids['b']}@{second}")
        assert sorted(r.id for r in sub) == sorted([f"{ids['b']}@{second}", f"{ids['c']}@{second}"])
        one = await c.list_executions(root=f"{ids['root']}@{first}", job_id=ids["join"])
        assert [r.id for r in one] == [f"{ids['join']}@{first}"]
        for bad in ("nope", f"{ids['root']}@", "@12", f"{ids['root']}@x"):
            with pytest.raises(InvalidArgument, match="root"):
                await c.list_executions(root=bad)
        with pytest.raises(NotFound, match="root"):
            await c.list_executions(root=f"default:gone@{first}")
        with pytest.raises(NotFound, match="root"):
            await c.list_executions(root=f"{ids['root']}@{first}", tenant="elsewhere")
    finally:
        for node_client in clients:
            await node_client.close()


async def test_a_tenants_token_lists_its_own_root_fires_only(h: Harness) -> None:
    await h.start_node(auth=True)
    kv = await open_store(h.nodes[0].config.store)
    try:
        _, secret = await TokenStore(kv, Keys(h.prefix)).create(
            auth_pb2.ApiToken(role="admin"), 0, int(time.time() * 1000), "bootstrap"
        )
    finally:
        await kv.close()
    clients = [AsyncClient(h.address(), timeout_s=10, token=secret)]
    try:
        admin = clients[0]
        for tenant in ("a", "b"):
            made = await admin.create_token("editor", tenant=tenant)
            clients.append(AsyncClient(h.address(), timeout_s=10, token=made.secret))
        a, b = clients[1], clients[2]
        root = (await a.create_job("root", schedule="@every 1h", handler="echo")).job
        await a.create_job("child", after=["root"], handler="echo")
        fire = (await a.trigger_job(root.id)).scheduled_ms
        assert [r.id for r in await a.list_executions(root=f"{root.id}@{fire}")] == [
            f"{root.id}@{fire}"
        ]  # no worker: the child waits for its parent
        with pytest.raises(NotFound, match="root"):
            await b.list_executions(root=f"{root.id}@{fire}")
        assert len(await admin.list_executions(root=f"{root.id}@{fire}")) == 1
    finally:
        for client in clients:
            await client.close()
