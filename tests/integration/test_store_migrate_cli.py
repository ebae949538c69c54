"""A store of cluster format 1 (job ids not scoped by tenant), as an operator meets it: a real
``schedd node`` refuses it in one line that names ``schedd store migrate``; the command (a dry
run first) renames the job; a node then runs it under its new id. And on a running cluster a
tenant cannot learn whether another tenant's job id exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from schedd import InvalidArgument, NotFound
from schedd.coord import ClusterMeta, read_cluster
from schedd.model import validate_new_job
from schedd.store import JobStore, Keys, RocksKV
from schedd.v1 import execution_pb2, job_pb2
from tests.integration.cluster_harness import Harness, eventually

pytestmark = pytest.mark.timeout(120)

SCHEDD = [sys.executable, "-m", "schedd.cli.schedd_main"]
PREFIX = b"/mig/"


async def _format_1_store(path: Path) -> None:
    """A store as format 1 nodes left it: meta at format 1, a job of tenant acme whose
    client chose the id "nightly" (stored as given)."""
    kv = await RocksKV.open(path)
    keys = Keys(PREFIX)
    try:
        await kv.put(keys.meta_key(), ClusterMeta(4, 1, "c1").to_json())
        spec = job_pb2.Job(
            tenant="acme", name="nightly", schedule=job_pb2.Schedule(expr="@every 1s"),
            handler=job_pb2.HandlerTarget(name="echo"),
        )  # fmt: skip
        job = validate_new_job(spec, now_ms=1_000, id_factory=lambda: "nightly")
        [(_, created)] = await JobStore(kv, keys, partitions=4).create_jobs([job], 1_000)  # type: ignore[misc]
        assert created
    finally:
        await kv.close()


async def _format_of(path: Path) -> int:
    kv = await RocksKV.open(path)
    try:
        meta = await read_cluster(kv, Keys(PREFIX))
        assert meta is not None
        return meta.format_version
    finally:
        await kv.close()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SCHEDD, *args], capture_output=True, text=True, timeout=60, check=False)


async def test_a_format_1_store_is_refused_then_migrated_and_runs(tmp_path: Path) -> None:
    path = tmp_path / "store"
    await _format_1_store(path)
    store = ["--store", f"rocksdb:{path}", "--prefix", PREFIX.decode()]
    refused = _run("node", *store, "--data-dir", str(tmp_path / "n"), "--partitions", "4",
                   "--listen", "127.0.0.1:0")  # fmt: skip
    assert refused.returncode == 5 and "Traceback" not in refused.stderr, refused.stderr
    [line] = [ln for ln in refused.stderr.splitlines() if "schedd node:" in ln]
    assert "cluster format 1" in line and "schedd store migrate" in line, line
    dry = _run("store", "migrate", *store, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would rename nightly -> acme:nightly" in dry.stdout
    assert await _format_of(path) == 1
    done = _run("store", "migrate", *store)
    assert done.returncode == 0, done.stderr
    assert "renamed nightly -> acme:nightly" in done.stdout
    assert "format 1 -> 2" in done.stderr and "Traceback" not in done.stderr
    assert await _format_of(path) == 2
    again = _run("store", "migrate", *store)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr

    h = Harness(f"rocksdb:{path}", PREFIX, tmp_path)
    try:
        await h.start_node()
        await h.start_worker()
        done = execution_pb2.EXECUTION_SUCCEEDED
        runs = await eventually(
            lambda: h.runs("acme:nightly"), lambda rs: any(r.state == done for r in rs),
            what="a run of the migrated job", timeout=15,
        )  # fmt: skip
        assert all(r.id.startswith("acme:nightly@") for r in runs)
        assert all(ex_id.startswith("acme:nightly@") for ex_id, _, _ in h.calls["echo"])
    finally:
        await h.close()


async def test_a_tenant_cannot_learn_whether_another_tenants_id_exists(tmp_path: Path) -> None:
    h = Harness(f"rocksdb:{tmp_path / 'store'}", PREFIX, tmp_path)
    try:
        await h.start_node()
        client = await h.connect()

        async def create(tenant: str, job_id: str) -> job_pb2.Job:
            job = job_pb2.Job(
                id=job_id, tenant=tenant, name=f"{tenant}-{job_id}",
                schedule=job_pb2.Schedule(expr="@every 1h"),
                handler=job_pb2.HandlerTarget(name="echo"),
            )  # fmt: skip
            return (await client.create(job)).job

        a = await create("acme", "nightly")
        b = await create("bolt", "nightly")  # the same chosen id: no ALREADY_EXISTS
        assert (a.id, b.id) == ("acme:nightly", "bolt:nightly")
        # Naming acme's id from bolt makes a job of bolt's, whether or not acme's exists.
        for taken_or_not in ("acme:nightly", "acme:never-made"):
            made = await create("bolt", taken_or_not)
            assert made.id == f"bolt:{taken_or_not}" and made.tenant == "bolt"
        answers = []
        for taken_or_not in ("acme:nightly", "acme:never-made"):
            with pytest.raises(InvalidArgument, match=r"job\.id") as refused:
                await create("default", taken_or_not)
            answers.append(str(refused.value).replace(taken_or_not, "ID"))
        assert answers[0] == answers[1]  # the same answer: no existence leak
        assert (await client.get_job("acme:nightly")).tenant == "acme"
        with pytest.raises(NotFound):
            await client.get_job("nightly")
    finally:
        await h.close()
