"""Auth on: every RPC of the client API sees and changes only the caller's tenant.

A real node (auth on) on the session's etcd, real gRPC clients with tokens of each role. For
each RPC a token of tenant B is pointed at tenant A's job, runs and dead letters: it must get
NOT_FOUND (it cannot even learn they exist) or PERMISSION_DENIED (it named another tenant), and
nothing of A's may change. The audit trail records each change with who, what and from where.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from integration.cluster_harness import Harness, eventually
from schedd import InvalidArgument, NotFound, PermissionDenied, ResourceExhausted, Unauthenticated
from schedd.auth import TokenStore
from schedd.client import AsyncClient
from schedd.dev import EtcdProcess
from schedd.model import execution_id
from schedd.store import Keys, open_store, store_address
from schedd.store._records import encode_execution
from schedd.v1 import auth_pb2, execution_pb2, peer_pb2_grpc, scheduler_pb2

pytestmark = pytest.mark.timeout(120)

PAST = 1_700_000_000_000


@dataclass
class Tenants:
    h: Harness
    admin: AsyncClient
    clients: dict[str, AsyncClient] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)

    async def token(self, name: str, role: str, tenant: str = "", **kw: object) -> AsyncClient:
        made = await self.admin.create_token(role, tenant=tenant, description=name, **kw)  # type: ignore[arg-type]
        self.secrets[name] = made.secret
        client = self.clients[name] = AsyncClient(self.h.address(), timeout_s=10, token=made.secret)
        return client

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()
        await self.admin.close()


@pytest.fixture
async def t(etcd_server: EtcdProcess, etcd_prefix: bytes, tmp_path: Path) -> AsyncIterator[Tenants]:
    h = Harness(etcd_server.endpoint, etcd_prefix, tmp_path)
    await h.start_node(auth=True)
    kv = await open_store(h.nodes[0].config.store)
    try:
        _, secret = await TokenStore(kv, Keys(etcd_prefix)).create(
            auth_pb2.ApiToken(role="admin", description="test bootstrap"), 0,
            int(time.time() * 1000), "bootstrap",
        )  # fmt: skip
    finally:
        await kv.close()
    tenants = Tenants(h, AsyncClient(h.address(), timeout_s=10, token=secret))
    try:
        yield tenants
    finally:
        await tenants.close()
        await h.close()


async def _dead_letter(h: Harness, tenant: str, job_id: str, sched: int) -> str:
    """A dead execution of ``job_id`` in the dead-letter queue (as the settle path leaves one)."""
    eid = execution_id(job_id, sched)
    ex = execution_pb2.Execution(
        id=eid, job_id=job_id, tenant=tenant, scheduled_ms=sched,
        state=execution_pb2.EXECUTION_DEAD, attempt=3, error="boom",
    )  # fmt: skip
    node = h.nodes[0]
    await node.kv.put(node.keys.dlq_key(tenant, job_id, sched), encode_execution(ex))
    return eid


async def test_every_rpc_sees_and_changes_only_the_callers_tenant(t: Tenants) -> None:
    h = t.h
    a = await t.token("a-editor", "editor", "acme")
    a_view = await t.token("a-viewer", "viewer", "acme")
    b = await t.token("b-editor", "editor", "bolt")
    w = await t.token("w", "worker")

    # Tenant tokens create in their own tenant by default; another tenant is refused.
    job_a = (await a.create_job("nightly", schedule="@every 1h", handler="echo")).job
    assert job_a.tenant == "acme"
    job_b = (await b.create_job("mine", schedule="@every 1h", handler="echo")).job
    with pytest.raises(PermissionDenied, match=r"job\.tenant"):
        await b.create_job("sneaky", schedule="@every 1h", handler="echo", tenant="acme")
    run_a = await a.trigger_job(job_a.id)
    dead_a = await _dead_letter(h, "acme", job_a.id, PAST)
    dead_b = await _dead_letter(h, "bolt", job_b.id, PAST)

    # B cannot see A's job, run or dead letter, nor change any of them: NOT_FOUND each time.
    attempts = {
        "GetJob": b.get_job(job_a.id),
        "UpdateJob": b.update_job(job_a.id, name="mine now"),
        "DeleteJob": b.delete_job(job_a.id),
        "PauseJob": b.pause_job(job_a.id),
        "ResumeJob": b.resume_job(job_a.id),
        "TriggerJob": b.trigger_job(job_a.id),
        "BackfillJob": b.backfill_job(job_a.id, PAST, PAST + 7_200_000),
        "GetExecution": b.get_execution(run_a.id),
        "CancelExecution": b.cancel_execution(run_a.id),
        "RedriveDeadLetters": b.redrive([dead_a]),
        "ListDeadLetters(job)": b.list_dead_letters(job_id=job_a.id),
    }
    for name, call in attempts.items():
        with pytest.raises(NotFound):
            await call
            pytest.fail(f"{name} reached tenant acme's data")
    # Naming the other tenant in a listing is refused, and lists show only B's own.
    for call in (
        b.list_jobs_page(tenant="acme"),
        b.list_executions(tenant="acme"),
        b.list_dead_letters(tenant="acme"),
        b.redrive(tenant="acme"),
        b.get_tenant_limits("acme"),
        b.list_audit(tenant="acme"),
    ):
        with pytest.raises(PermissionDenied, match="acme"):
            await call
    assert [j.id async for j in b.list_jobs()] == [job_b.id]
    assert all(ex.tenant == "bolt" for ex in await b.list_executions(limit=1000))
    assert [e.id for e in await b.list_dead_letters()] == [dead_b]
    redriven = await b.redrive(everything=True)  # "all" means all of B's
    assert [e.job_id for e in redriven] == [job_b.id]
    # Nothing of A's changed; A still sees all of it.
    job_after = await a.get_job(job_a.id)
    assert job_after.name == "nightly" and not job_after.paused
    assert job_after.version == job_a.version
    assert [e.id for e in await a.list_dead_letters()] == [dead_a]
    assert (await a.get_execution(run_a.id)).tenant == "acme"

    # Admin-only calls; cluster status without the workers for tenants.
    for call in (
        b.set_tenant_limits("bolt", rate=1000),
        b.delete_tenant_limits("acme"),
        b.create_token("viewer", tenant="bolt"),
        b.list_tokens(),
        b.revoke_token("whatever"),
    ):
        with pytest.raises(PermissionDenied, match="admin"):
            await call
    status = await b.cluster_status()
    assert status.nodes and not status.workers
    assert len(await t.admin.list_tokens()) == 5

    # Viewers read and never change; worker tokens only connect workers.
    assert (await a_view.get_job(job_a.id)).id == job_a.id
    with pytest.raises(PermissionDenied, match="viewer"):
        await a_view.pause_job(job_a.id)
    with pytest.raises(PermissionDenied, match="worker token"):
        await w.get_job(job_a.id)
    assert (await w.cluster_status(local_only=True)).nodes

    # The audit trail: B's entries only for B; the admin sees the failed attempts too.
    mine = await b.list_audit()
    assert mine and {e.tenant for e in mine} == {"bolt"}
    every = await t.admin.list_audit()
    denied = [e for e in every if e.actor == (await b.who_am_i()).id and e.code == "NOT_FOUND"]
    assert {e.method for e in denied} >= {"UpdateJob", "DeleteJob", "PauseJob", "TriggerJob"}
    created = next(e for e in every if e.method == "CreateJob" and e.tenant == "acme")
    assert created.code == "OK" and created.target == job_a.id and created.peer
    assert created.actor == (await a.who_am_i()).id and created.role == "editor"


async def test_no_bad_revoked_or_expired_token_gets_in(t: Tenants) -> None:
    h = t.h
    anonymous = AsyncClient(h.address(), timeout_s=10)
    try:
        with pytest.raises(Unauthenticated, match="no credentials"):
            await anonymous.list_jobs_page()
    finally:
        await anonymous.close()
    editor = await t.token("e", "editor", "acme")
    forged = t.secrets["e"][:-4] + "AAAA"
    for bad in ("sdt_nothing_here", forged, "not-a-token"):
        c = AsyncClient(h.address(), timeout_s=10, token=bad)
        try:
            with pytest.raises(Unauthenticated):
                await c.list_jobs_page()
        finally:
            await c.close()
    await editor.list_jobs_page()
    me = await editor.who_am_i()
    assert me.role == "editor" and me.tenant == "acme" and not me.secret_hash
    await t.admin.revoke_token(me.id)
    with pytest.raises(Unauthenticated, match="revoked"):
        await editor.list_jobs_page()
    short = await t.token("short", "viewer", "acme", ttl_s=1)
    await short.list_jobs_page()
    await asyncio.sleep(1.1)
    with pytest.raises(Unauthenticated, match="expired"):
        await short.list_jobs_page()
    # Peer calls (every tenant's runs) need the cluster's peer secret.
    async with grpc.aio.insecure_channel(h.address()) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            stub = peer_pb2_grpc.PeerStub(channel)
            await stub.ListLocalExecutions(scheduler_pb2.ListExecutionsRequest())
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_quotas_refuse_with_resource_exhausted(t: Tenants) -> None:
    a = await t.token("a", "editor", "acme")
    await t.admin.set_tenant_limits("acme", max_jobs=3, api_rate=5, api_burst=20)
    node = t.h.nodes[0]
    await eventually(
        lambda: asyncio.sleep(0, result=node.access.limits.get("acme")),
        lambda lim: lim is not None,
        what="the node to see the quota",
    )
    for n in range(3):
        await a.create_job(f"j{n}", schedule="@every 1h", handler="echo", idempotency_key=f"k{n}")
    with pytest.raises(ResourceExhausted, match="max_jobs"):
        await a.create_job("one too many", schedule="@every 1h", handler="echo")
    # A retried create (same key) adds nothing: it gets the stored job back, quota or not.
    again = await a.create_job("j2", schedule="@every 1h", handler="echo", idempotency_key="k2")
    assert not again.created
    # Bad input is still bad input at the quota (not RESOURCE_EXHAUSTED).
    with pytest.raises(InvalidArgument):
        await a.create_job("bad", schedule="61 * * * *", handler="echo")
    refused = 0
    for _ in range(40):
        try:
            await a.list_jobs_page()
        except ResourceExhausted as exc:
            assert "API quota" in str(exc) and exc.retry_after_s > 0
            refused += 1
    assert refused >= 10, refused
    # The admin is not the tenant: its calls are not charged to acme's quota.
    await t.admin.list_jobs_page()


async def _run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_bootstrap_then_schedctl_tokens_audit_and_clear_errors(t: Tenants) -> None:
    h = t.h
    bindir = Path(sys.executable).parent
    schedd, schedctl = str(bindir / "schedd"), str(bindir / "schedctl")
    node = h.nodes[0]
    etcd = store_address(node.config.store)
    code, out, err = await _run(
        schedd, "token", "create", "--store", etcd, "--prefix", h.prefix.decode(),
        "--role", "admin", "--description", "ops",
    )  # fmt: skip
    assert code == 0, err
    admin = out.strip()
    assert admin.startswith("sdt_") and "shown only now" in err
    env = dict(os.environ, SCHEDCTL_TOKEN=admin)
    ctl = [schedctl, "--endpoints", h.address()]
    code, out, err = await _run(
        *ctl, "token", "create", "--role", "editor", "--tenant", "acme", "--ttl", "1h",
        "-o", "json", env=env,
    )  # fmt: skip
    assert code == 0, err
    made = json.loads(out)
    assert made["role"] == "editor" and made["tenant"] == "acme" and made["expires_time"]
    editor_env = dict(os.environ, SCHEDCTL_TOKEN=made["secret"])
    code, out, err = await _run(*ctl, "whoami", "-o", "json", env=editor_env)
    assert code == 0 and json.loads(out)["id"] == made["id"], err
    code, _, err = await _run(
        *ctl, "job", "create", "n", "--schedule", "@every 1h", "--handler", "x", env=editor_env
    )
    assert code == 0, err
    # Clear one-line errors, exit 6: no token, a viewer's change, another tenant.
    code, _, err = await _run(*ctl, "job", "list", env=dict(os.environ, SCHEDCTL_TOKEN=""))
    assert code == 6 and "no credentials" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = await _run(*ctl, "job", "list", "--tenant", "bolt", env=editor_env)
    assert code == 6 and "acme" in err and "Traceback" not in err, err
    code, _, err = await _run(*ctl, "token", "list", env=editor_env)
    assert code == 6 and "admin" in err, err
    code, out, err = await _run(*ctl, "token", "list", "-o", "json", env=env)
    assert code == 0 and {tk["id"] for tk in json.loads(out)["tokens"]} >= {made["id"]}, err
    assert "secret" not in out and "hash" not in out
    code, out, err = await _run(*ctl, "token", "revoke", made["id"], env=env)
    assert code == 0, err
    code, _, err = await _run(*ctl, "job", "list", env=editor_env)
    assert code == 6 and "revoked" in err, err
    code, out, err = await _run(*ctl, "audit", "list", "--since", "1h", "-o", "json", env=env)
    assert code == 0, err
    methods = [(e["method"], e["code"]) for e in json.loads(out)["entries"]]
    assert ("CreateToken", "OK") in methods and ("CreateJob", "OK") in methods
    assert ("RevokeToken", "OK") in methods
    boot = [e for e in json.loads(out)["entries"] if e["actor"] == "bootstrap"]
    assert boot and boot[0]["method"] == "CreateToken" and boot[0]["target"].endswith("(admin)")
    code, out, err = await _run(*ctl, "audit", "list", "--since", "1h", env=env)
    assert code == 0 and "RevokeToken" in out, err
