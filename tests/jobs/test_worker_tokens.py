"""Workers on a cluster with auth on, as real processes: only worker tokens connect, a token
limited to queues cannot serve others, a token limited to tenants is sent only their
executions, and revoking a worker's token ends its streams."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from cluster.procs import SCHEDD, Proc
from jobs.conftest import KindsCluster, _env

from schedd.auth import TokenStore
from schedd.client import AsyncClient
from schedd.dev import EtcdProcess, free_port
from schedd.store import EtcdConfig, EtcdKV, Keys
from schedd.v1 import auth_pb2, execution_pb2

pytestmark = pytest.mark.timeout(120)
SUCCEEDED = execution_pb2.EXECUTION_SUCCEEDED


async def _until(what: str, check: object, timeout_s: float = 20.0) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        got = await check()  # type: ignore[operator]
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_worker_tokens_limit_who_connects_and_what_it_is_sent(
    etcd_server: EtcdProcess, tmp_path: Path
) -> None:
    c = KindsCluster(tmp_path, etcd_server.endpoint)
    kv = await EtcdKV.connect(EtcdConfig(endpoints=(etcd_server.endpoint,)))
    try:
        _, secret = await TokenStore(kv, Keys(c.prefix.encode())).create(
            auth_pb2.ApiToken(role="admin"), 0, int(time.time() * 1000), "bootstrap"
        )
    finally:
        await kv.close()
    await c.client.close()
    c.client = admin = AsyncClient(c.address, timeout_s=15, token=secret)
    node = [
        *SCHEDD, "node", "--auth", "--etcd", c.etcd, "--listen", c.address, "--node-id", "n0",
        "--data-dir", str(tmp_path / "n0"), "--partitions", "4", "--prefix", c.prefix,
    ]  # fmt: skip
    proc = Proc("n0", node, _env(), tmp_path / "logs" / "n0.log")
    proc.start()
    c.procs.append(proc)
    # A second node: the cluster-wide reads cross between nodes with the peer secret.
    second = f"127.0.0.1:{free_port()}"
    node1 = [
        *node[: node.index("--listen")], "--listen", second, "--node-id", "n1",
        "--data-dir", str(tmp_path / "n1"), "--partitions", "4", "--prefix", c.prefix,
    ]  # fmt: skip
    proc1 = Proc("n1", node1, _env(), tmp_path / "logs" / "n1.log")
    proc1.start()
    c.procs.append(proc1)
    try:
        await _until("the node", lambda: _owned(admin))
        acme_only = (await admin.create_token("worker", tenants=["acme"])).secret
        any_tenant = (await admin.create_token("worker", queues=["default"])).secret
        other_queue = (await admin.create_token("worker", queues=["other"])).secret
        editor = (await admin.create_token("editor", tenant="acme")).secret
        demo = ("--import", "schedd.dev.demo_handlers", "--no-http")
        wa = c.add_worker("wa", *demo, env={"SCHEDD_WORKER_TOKEN": acme_only})
        c.add_worker("we", *demo, env={"SCHEDD_WORKER_TOKEN": editor})
        c.add_worker("wq", *demo, "--token", other_queue)
        c.add_worker("wn", *demo)  # no token at all
        await _until("wa to connect", lambda: _workers(admin, {"wa"}))
        await _until(
            "the refusals to be logged",
            lambda: asyncio.sleep(0, result=_refused(tmp_path, ("we", "wq", "wn"))),
        )
        assert set(await _worker_ids(admin)) == {"wa"}
        log_we = (tmp_path / "logs" / "we").read_text()
        assert "workers need a worker token" in log_we and "Traceback" not in log_we
        assert "may serve ['other'], not ['default']" in (tmp_path / "logs" / "wq").read_text()

        job_a = (await admin.create_job("a", schedule="@every 1h", handler="echo",
                                        tenant="acme")).job  # fmt: skip
        job_b = (await admin.create_job("b", schedule="@every 1h", handler="echo",
                                        tenant="bolt")).job  # fmt: skip
        run_a = await admin.trigger_job(job_a.id)
        run_b = await admin.trigger_job(job_b.id)
        done_a = await _until("acme's run", lambda: _done(admin, run_a.id))
        assert done_a.worker_id == "wa"  # type: ignore[attr-defined]
        await asyncio.sleep(1.0)  # bolt's run is not sent to wa: it waits for another worker
        assert (await admin.get_execution(run_b.id)).state != SUCCEEDED
        c.add_worker("wb", *demo, env={"SCHEDD_WORKER_TOKEN": any_tenant})
        done_b = await _until("bolt's run", lambda: _done(admin, run_b.id))
        assert done_b.worker_id == "wb"  # type: ignore[attr-defined]

        # Each node's runs reach the other through the Peer service (auth on: peer secret).
        runs = await admin.list_executions(limit=100)
        assert not runs.missing_nodes, runs.missing_nodes
        assert {run_a.id, run_b.id} <= {ex.id for ex in runs}
        other = AsyncClient(second, timeout_s=15, token=secret)
        try:
            assert (await other.get_execution(run_a.id)).state == SUCCEEDED
            assert len((await other.cluster_status()).nodes) == 2
        finally:
            await other.close()
        # Revoking wa's token ends its stream at once; its reconnects are refused.
        tokens = await admin.list_tokens()
        wa_id = next(t.id for t in tokens if list(t.tenants) == ["acme"])
        await admin.revoke_token(wa_id)
        await _until("wa to be cut off", lambda: _workers(admin, {"wb"}))
        assert wa.alive
        await _until(
            "wa's refusal",
            lambda: asyncio.sleep(0, result="revoked" in (tmp_path / "logs" / "wa").read_text()),
        )
    finally:
        await c.close()


async def _owned(client: AsyncClient) -> bool:
    try:
        st = await client.cluster_status()
    except Exception:
        return False
    return all(p.owner for p in st.partitions) and bool(st.partitions) and len(st.nodes) == 2


async def _worker_ids(client: AsyncClient) -> list[str]:
    return [w.worker_id for w in (await client.cluster_status()).workers]


async def _workers(client: AsyncClient, want: set[str]) -> bool:
    return set(await _worker_ids(client)) == want


def _refused(root: Path, names: tuple[str, ...]) -> bool:
    logs = [(root / "logs" / n) for n in names]
    return all((p.exists() and "PERMISSION_DENIED" in p.read_text()) or
               (p.exists() and "UNAUTHENTICATED" in p.read_text()) for p in logs)  # fmt: skip


async def _done(client: AsyncClient, execution_id: str) -> execution_pb2.Execution | None:
    ex = await client.get_execution(execution_id)
    return ex if ex.state == SUCCEEDED else None
