"""Every RPC with bad input: the right status code, a message naming the field, nothing written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from integration.cluster_harness import Harness, eventually, harness_on, node_config
from schedd.dev import EtcdProcess
from schedd.node import Node
from schedd.store import prefix_end
from schedd.v1 import job_pb2, scheduler_pb2, scheduler_pb2_grpc

pytestmark = pytest.mark.timeout(90)

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND


@pytest.fixture(params=["etcd", "rocksdb"])
async def h(
    request: pytest.FixtureRequest, etcd_prefix: bytes, tmp_path: Path
) -> AsyncIterator[Harness]:
    """A node on each store: bad input is refused the same way, and changes nothing."""
    harness = harness_on(request, request.param, etcd_prefix, tmp_path)
    await harness.start_node()
    try:
        yield harness
    finally:
        await harness.close()


def good_job(**kw: Any) -> job_pb2.Job:
    job = job_pb2.Job(name="ok", schedule=job_pb2.Schedule(expr="0 9 * * *"))
    job.handler.name = "echo"
    for k, v in kw.items():
        setattr(job, k, v)
    return job


async def test_every_rpc_rejects_bad_input(h: Harness) -> None:
    store = h.nodes[0].kv
    async with grpc.aio.insecure_channel(h.address()) as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        existing = (
            await stub.CreateJob(scheduler_pb2.CreateJobRequest(job=good_job(id="chosen")))
        ).job
        # The audit trail records refused attempts (not found, conflicts) by design: the
        # state is everything else.
        audit = h.prefix + b"audit/"

        async def state() -> int:
            everything = await store.count(h.prefix, prefix_end(h.prefix))
            return everything - await store.count(audit, prefix_end(audit))

        before = await state()
        bad_schedule = good_job()
        bad_schedule.schedule.expr = "5-1 * * * *"
        cases: list[tuple[str, Any, grpc.StatusCode, str]] = [
            ("CreateJob", scheduler_pb2.CreateJobRequest(job=bad_schedule), INVALID, "schedule"),
            ("CreateJob", scheduler_pb2.CreateJobRequest(job=good_job(name="")), INVALID, "name"),
            ("CreateJob", scheduler_pb2.CreateJobRequest(job=good_job(id="a/b")), INVALID, "id"),
            ("CreateJob", scheduler_pb2.CreateJobRequest(job=good_job(jitter_ms=-1)), INVALID, "jitter"),
            ("CreateJob", scheduler_pb2.CreateJobRequest(job=good_job(id=existing.id, name="again")), grpc.StatusCode.ALREADY_EXISTS, existing.id),
            ("CreateJob", scheduler_pb2.CreateJobRequest(job=good_job(id="j-abcdefghijklmnopqrst")), INVALID, "generated"),
            ("CreateJob", scheduler_pb2.CreateJobRequest(job=good_job(id="acme:x")), INVALID, "other tenants"),
            ("GetJob", scheduler_pb2.GetJobRequest(id=""), INVALID, "id"),
            ("GetJob", scheduler_pb2.GetJobRequest(id="missing"), NOT_FOUND, "missing"),
            ("ListJobs", scheduler_pb2.ListJobsRequest(page_size=5000), INVALID, "page_size"),
            ("UpdateJob", scheduler_pb2.UpdateJobRequest(job=job_pb2.Job(id=existing.id), update_paths=["id"]), INVALID, "update_paths"),
            ("UpdateJob", scheduler_pb2.UpdateJobRequest(job=job_pb2.Job(id="missing"), update_paths=["name"]), NOT_FOUND, "missing"),
            ("UpdateJob", scheduler_pb2.UpdateJobRequest(job=job_pb2.Job(id=existing.id, name="n"), update_paths=["name"], expected_version=1), grpc.StatusCode.ABORTED, "version"),
            ("DeleteJob", scheduler_pb2.DeleteJobRequest(id="missing"), NOT_FOUND, "missing"),
            ("PauseJob", scheduler_pb2.PauseJobRequest(id=""), INVALID, "id"),
            ("ResumeJob", scheduler_pb2.ResumeJobRequest(id="missing"), NOT_FOUND, "missing"),
            ("TriggerJob", scheduler_pb2.TriggerJobRequest(id="missing"), NOT_FOUND, "missing"),
            ("TriggerJob", scheduler_pb2.TriggerJobRequest(id=existing.id, payload=b"x" * (256 * 1024 + 1)), INVALID, "payload"),
            ("BackfillJob", scheduler_pb2.BackfillJobRequest(id=existing.id, start_ms=10, end_ms=5), INVALID, "end_ms"),
            ("BackfillJob", scheduler_pb2.BackfillJobRequest(id=existing.id, start_ms=1, end_ms=5, limit=20000), INVALID, "limit"),
            ("GetExecution", scheduler_pb2.GetExecutionRequest(id="no-at-sign"), INVALID, "id"),
            ("GetExecution", scheduler_pb2.GetExecutionRequest(id=f"{existing.id}@123"), NOT_FOUND, "123"),
            ("ListExecutions", scheduler_pb2.ListExecutionsRequest(page_size=-1), INVALID, "page_size"),
            ("ListDeadLetters", scheduler_pb2.ListDeadLettersRequest(page_size=100000), INVALID, "page_size"),
            ("RedriveDeadLetters", scheduler_pb2.RedriveDeadLettersRequest(), INVALID, "execution_ids"),
            ("RedriveDeadLetters", scheduler_pb2.RedriveDeadLettersRequest(execution_ids=[f"{existing.id}@5"]), NOT_FOUND, "5"),
        ]  # fmt: skip
        for method, request, code, needle in cases:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await getattr(stub, method)(request)
            assert info.value.code() == code, (method, info.value.details())
            assert needle in (info.value.details() or ""), (method, info.value.details())
        assert await state() == before, "bad input wrote something"


async def test_batch_create_reports_per_item(h: Harness) -> None:
    async with grpc.aio.insecure_channel(h.address()) as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        resp = await stub.BatchCreateJobs(
            scheduler_pb2.BatchCreateJobsRequest(
                jobs=[good_job(name="a"), good_job(name=""), good_job(name="b"), good_job(name="a")]
            )
        )
        kinds = [r.WhichOneof("outcome") for r in resp.results]
        assert kinds == ["ok", "error", "ok", "error"]
        assert resp.results[1].error.code == INVALID.value[0]
        assert "name" in resp.results[1].error.field
        # A name taken earlier in the same call: that item alone is refused.
        assert resp.results[3].error.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
        assert "job.name: 'a' is taken" in resp.results[3].error.message


async def test_health_and_reflection(h: Harness) -> None:
    async with grpc.aio.insecure_channel(h.address()) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        resp = await health.Check(health_pb2.HealthCheckRequest(service="schedd.v1.Scheduler"))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(channel)

        async def ask() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")

        async for answer in refl.ServerReflectionInfo(ask()):
            names = {s.name for s in answer.list_services_response.service}
            break
        assert {"schedd.v1.Scheduler", "schedd.v1.Worker", "grpc.health.v1.Health"} <= names


async def test_health_is_not_serving_while_etcd_is_lost(tmp_path: Path) -> None:
    etcd = EtcdProcess(tmp_path / "etcd").start()
    node = Node(node_config(etcd.endpoint, b"/health-test/", tmp_path / "node"))
    try:
        await node.start()
        async with grpc.aio.insecure_channel(node.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def status() -> int:
                resp = await health.Check(health_pb2.HealthCheckRequest(service=""))
                return int(resp.status)

            assert await status() == health_pb2.HealthCheckResponse.SERVING
            etcd.kill()
            await eventually(
                status, lambda s: s == health_pb2.HealthCheckResponse.NOT_SERVING, timeout=30
            )
    finally:
        etcd.kill()
        await node.stop(timeout=1.0)
