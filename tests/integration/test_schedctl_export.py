"""schedctl export → apply into another cluster: the same jobs by (tenant, name), the same
specs, paused states and limits, the same next fires; a second apply changes nothing.
Real schedctl processes against two real nodes: the source on etcd (another prefix of the
same etcd) or on an embedded store (the move from one machine to an etcd cluster, as
docs/operations.md describes it), the destination on etcd."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from integration.cluster_harness import Harness, eventually
from integration.test_schedctl_e2e import ctl
from schedd.client import AsyncClient, tenant_limits_to_dict
from schedd.client._fires import next_fires
from schedd.client._spec import changed_paths
from schedd.dev import EtcdProcess
from schedd.schedule import pin_anchor
from schedd.v1 import job_pb2

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["etcd", "rocksdb"])
async def clusters(
    etcd_server: EtcdProcess, etcd_prefix: bytes, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Harness, Harness]]:
    """Two clusters of one node each, no workers (nothing needs to run); the source on etcd
    or on an embedded store, the destination on etcd."""
    source = etcd_server.endpoint
    if request.param == "rocksdb":
        source = f"rocksdb:{tmp_path / 'src-store'}"
    src = Harness(source, etcd_prefix + b"src/", tmp_path / "src")
    dst = Harness(etcd_server.endpoint, etcd_prefix + b"dst/", tmp_path / "dst")
    try:
        await src.start_node()
        await dst.start_node()
        yield src, dst
    finally:
        await src.close()
        await dst.close()


async def make_varied_jobs(client: AsyncClient) -> None:
    await client.create_job(
        "nightly", schedule="30 2 * * *", tz="Europe/Berlin", handler="export", queue="etl",
        payload={"table": "orders"}, labels={"team": "data"},
    )  # fmt: skip
    await client.create_job(
        "hook", schedule="@every 45s", overlap="forbid", max_attempts=5, retry_initial="2s",
        http=job_pb2.HttpTarget(url="https://example.com/hook", method="PUT",
                                headers={"Authorization": "Bearer s3cret"}, success_codes=[409]),
    )  # fmt: skip
    await client.create_job(
        "tidy", schedule="0 * * * *", tz="America/New_York", misfire="catch_up",
        catch_up_limit=3, starting_deadline="5m", timeout="20s",
        shell=job_pb2.ShellTarget(argv=["find", "/tmp", "-delete"], env={"LANG": "C"}),
    )  # fmt: skip
    await client.create_job("later", schedule="@after 2h", handler="echo", jitter="30s")
    held = await client.create_job("held", schedule="*/10 * * * * *", handler="echo")
    await client.pause_job(held.job.id)
    await client.create_job(
        "bill", schedule="0 9 * * 1-5", tz="Asia/Tokyo", handler="bill", tenant="acme",
        misfire="skip", overlap="replace", labels={"cost": "high"}, payload=[1, 2, 3],
    )  # fmt: skip
    await client.create_job("sync", schedule="@every 1h", handler="sync", tenant="acme")
    await client.create_job("audit", schedule="@daily", handler="audit", tenant="ops")
    await client.set_tenant_limits("acme", rate=5, max_running=2, max_jobs=100)
    await client.set_tenant_limits("ops", rate=0.5, burst=4, api_rate=50)


async def by_key(client: AsyncClient) -> dict[tuple[str, str], job_pb2.Job]:
    return {(j.tenant, j.name): j async for j in client.list_jobs()}


async def limits(client: AsyncClient) -> dict[str, dict[str, Any]]:
    out = {}
    for t in await client.list_tenant_limits():
        out[t.tenant] = {k: v for k, v in tenant_limits_to_dict(t).items() if "updated" not in k}
    return out


def fire_times(jobs: dict[tuple[str, str], job_pb2.Job], now: int) -> dict[Any, list[int]]:
    """What `job describe` shows as next fires (before jitter), per job."""
    return {k: [f["ms"] for f in next_fires(j, now, 5)] for k, j in jobs.items()}


async def test_export_then_apply_elsewhere_gives_the_same_jobs_limits_and_fires(
    clusters: tuple[Harness, Harness], tmp_path: Path
) -> None:
    src, dst = clusters
    source = await src.connect()
    await make_varied_jobs(source)
    exported = tmp_path / "export.yaml"
    code, out, err = await ctl(src, "export", "--all-tenants", "--file", str(exported))
    assert code == 0, err
    assert out == ""
    assert "exported 8 jobs and 2 tenant limits (3 tenants)" in err
    docs = list(yaml.safe_load_all(exported.read_text()))
    assert [(d.get("kind", "Job"), d["tenant"], d.get("name")) for d in docs] == [
        ("TenantLimits", "acme", None), ("Job", "acme", "bill"), ("Job", "acme", "sync"),
        ("Job", "default", "held"), ("Job", "default", "hook"), ("Job", "default", "later"),
        ("Job", "default", "nightly"), ("Job", "default", "tidy"),
        ("TenantLimits", "ops", None), ("Job", "ops", "audit"),
    ]  # fmt: skip

    code, out, err = await ctl(dst, "apply", "-f", str(exported), "-o", "json")
    assert code == 0, err
    assert {r["action"] for r in json.loads(out)} == {"create"}
    assert "2 tenant limits: 2 created; 8 job specs: 8 created" in err

    target = await dst.connect()
    ours, theirs = await by_key(source), await by_key(dst_client := target)
    assert theirs.keys() == ours.keys()
    for key, job in ours.items():
        copy = theirs[key]
        assert copy.id != job.id
        relative = job.schedule.expr.startswith(("@every", "@after"))
        assert changed_paths(copy, job) == (["schedule"] if relative else []), key
        assert copy.schedule.expr == pin_anchor(job.schedule.expr, job.created_ms)
        assert copy.paused is job.paused, key
    assert theirs[("default", "held")].paused
    assert await limits(dst_client) == await limits(source)

    now = int(time.time() * 1000)
    assert fire_times(theirs, now) == fire_times(ours, now)
    assert fire_times(ours, now)[("default", "hook")]  # the @every job has fires to compare

    async def due_mismatches() -> list[Any]:
        # The next due time each node stored (jitter apart: it is derived from the job id).
        a, b = await by_key(source), await by_key(target)
        return [k for k, j in a.items() if not j.jitter_ms and j.next_fire_ms != b[k].next_fire_ms]

    await eventually(due_mismatches, lambda bad: not bad, what="the same next fires")

    hook_src, hook_dst = ours[("default", "hook")].id, theirs[("default", "hook")].id
    shown = []
    for h, job_id in ((src, hook_src), (dst, hook_dst)):
        code, out, err = await ctl(h, "job", "describe", job_id, "--runs", "0", "-o", "json")
        assert code == 0, err
        shown.append(json.loads(out)["next_fires"])
    assert shown[0] == shown[1] and len(shown[0]) == 5

    code, out, err = await ctl(dst, "apply", "-f", str(exported), "-o", "json")
    assert code == 0, err
    assert {r["action"] for r in json.loads(out)} == {"unchanged"}
    assert "2 tenant limits: 2 unchanged; 8 job specs: 8 unchanged" in err
    code, again, err = await ctl(dst, "export", "--all-tenants", "-o", "json")
    assert code == 0, err
    assert json.loads(again) == docs  # the copy exports as the original did


async def test_one_tenant_by_default_and_shared_names_refused_unless_allowed(
    clusters: tuple[Harness, Harness],
) -> None:
    src, dst = clusters
    client = await src.connect()
    await make_varied_jobs(client)
    code, out, err = await ctl(src, "export", "-o", "json")  # the default tenant
    assert code == 0, err
    assert {(d["tenant"], d["name"]) for d in json.loads(out)} == {
        ("default", n) for n in ("held", "hook", "later", "nightly", "tidy")
    }
    code, out, err = await ctl(src, "export", "--tenant", "acme")
    assert code == 0, err
    assert [d.get("kind", "Job") for d in yaml.safe_load_all(out)] == ["TenantLimits", "Job", "Job"]
    code, out, err = await ctl(dst, "apply", "-f", "-", stdin=out.encode())
    assert code == 0, err
    assert "1 tenant limits: 1 created; 2 job specs: 2 created" in err

    # A name two jobs share: only jobs from before names were unique can (a create of a
    # taken name is refused), so the twin is written as an older node wrote it.
    node = src.nodes[0]
    [nightly] = [j async for j in client.list_jobs(tenant="default") if j.name == "nightly"]
    twin = job_pb2.Job()
    twin.CopyFrom(nightly)
    twin.id = "j-twin-of-nightly"
    await node.kv.put(node.keys.job_key(twin.id), twin.SerializeToString())
    code, out, err = await ctl(src, "export")
    assert code == 4, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "default/nightly" in lines[0] and twin.id in lines[0] and "--allow-lossy" in err
    code, out, err = await ctl(src, "export", "--allow-lossy", "-o", "json")
    assert code == 0, err
    assert [d["name"] for d in json.loads(out)].count("nightly") == 2
    assert "schedctl: warning: exported anyway: 1 names held by more than one job" in err
