"""Client and AsyncClient against a canned servicer on a real grpc.aio server."""

from __future__ import annotations

import json

import pytest
from test_client_servicer import Served, sample_execution, sample_job, served

from schedd import AlreadyExists, Conflict, InvalidArgument, NotFound, Unavailable
from schedd.client import (
    IDEMPOTENT_METHODS,
    AsyncClient,
    Client,
    execution_to_dict,
    grpc_target,
    iso_utc,
    job_to_dict,
    parse_time_ms,
    service_config,
)
from schedd.v1 import execution_pb2, job_pb2

__all__ = ["served"]


def test_create_job_builds_request_with_deadline(served: Served) -> None:
    with Client(served.endpoint, timeout_s=7) as client:
        result = client.create_job(
            "report",
            schedule="0 9 * * *",
            tz="Europe/Berlin",
            handler="send_report",
            queue="reports",
            payload={"to": "ops"},
            max_attempts=5,
            timeout=30,
            misfire="catch_up",
            overlap="forbid",
            labels={"team": "ops"},
            idempotency_key="k1",
        )
    assert result.created and result.job.id == "j-new"
    call = served.servicer.calls[-1]
    assert call.time_remaining is not None and 5 < call.time_remaining <= 7 + 0.1
    job = call.request.job
    assert json.loads(job.payload) == {"to": "ops"}
    assert (job.handler.name, job.handler.queue) == ("send_report", "reports")
    assert (job.schedule.expr, job.schedule.timezone) == ("0 9 * * *", "Europe/Berlin")
    assert job.timeout_ms == 30_000 and job.retry.max_attempts == 5
    assert job.misfire.mode == job_pb2.MISFIRE_CATCH_UP
    assert job.overlap == job_pb2.OVERLAP_FORBID
    assert dict(job.labels) == {"team": "ops"} and job.idempotency_key == "k1"


def test_bytes_payload_is_sent_as_is(served: Served) -> None:
    with Client(served.endpoint) as client:
        client.create_job("x", schedule="@every 10s", handler="h", payload=b"\x00raw")
    assert served.servicer.last("CreateJob").job.payload == b"\x00raw"


def test_update_paths_from_kwargs(served: Served) -> None:
    with Client(served.endpoint) as client:
        client.update_job("j-1", schedule="*/5 * * * *", tz="UTC", payload=[1, 2], max_attempts=2)
        req = served.servicer.last("UpdateJob")
        assert list(req.update_paths) == [
            "payload",
            "schedule.expr",
            "schedule.timezone",
            "retry.max_attempts",
        ]
        assert req.job.id == "j-1" and json.loads(req.job.payload) == [1, 2]
        client.update_job("j-1", payload=None, handler="other", expected_version=4)
        req = served.servicer.last("UpdateJob")
        assert list(req.update_paths) == ["payload", "target"]
        assert req.job.payload == b"" and req.expected_version == 4
        with pytest.raises(InvalidArgument) as info:
            client.update_job("j-1")
        assert info.value.field == "update"


def test_error_mapping(served: Served) -> None:
    with Client(served.endpoint) as client:
        with pytest.raises(NotFound):
            client.get_job("missing")
        with pytest.raises(AlreadyExists):
            client.create_job("x", schedule="@daily", handler="h", job_id="dup")
        with pytest.raises(Conflict):
            client.update_job("stale", name="n")
        with pytest.raises(InvalidArgument) as info:
            client.pause_job("bad")
        assert info.value.field == "id"


def test_unavailable_when_nothing_listens() -> None:
    with Client("127.0.0.1:1", timeout_s=2) as client, pytest.raises(Unavailable):
        client.get_job("j-1")


def test_pagination_iterates_every_page(served: Served) -> None:
    with Client(served.endpoint) as client:
        jobs = list(client.list_jobs(tenant="acme", page_size=2))
        assert len(jobs) == 6
        tokens = [c.request.page_token for c in served.servicer.calls if c.method == "ListJobs"]
        assert tokens == ["", "1", "2"]
        page = client.list_jobs_page(page_size=2)
        assert page.next_page_token == "1"
        execs = client.list_executions("j-1", states=["failed", 7], limit=5)
        assert len(execs) == 5
        req = served.servicer.last("ListExecutions")
        assert list(req.states) == [execution_pb2.EXECUTION_FAILED, execution_pb2.EXECUTION_DEAD]


def test_other_methods(served: Served) -> None:
    with Client([served.endpoint]) as client:
        assert client.delete_job("j-1") == 2
        assert client.resume_job("j-1").id == "j-1"
        client.trigger_job("j-1", payload={"x": 1})
        assert served.servicer.last("TriggerJob").payload == b'{"x":1}'
        result = client.backfill_job("j-1", "2026-03-01T00:00:00Z", 1_772_953_200_000, limit=3)
        assert len(result.executions) == 3 and result.truncated == 1
        req = served.servicer.last("BackfillJob")
        assert (req.start_ms, req.end_ms, req.limit) == (1_772_323_200_000, 1_772_953_200_000, 3)
        assert client.get_execution("j-1@5").job_id == "j-1"
        assert client.list_dead_letters(job_id="j-1")[0].state == execution_pb2.EXECUTION_DEAD
        assert len(client.redrive(["j-1@5"])) == 1
        assert client.cluster_status().partitions[0].epoch == 41
        good, bad = client.create_jobs([sample_job(), job_pb2.Job()])
        assert isinstance(good, job_pb2.Job)
        assert isinstance(bad, InvalidArgument) and bad.field == "job.name"


async def test_async_client(served: Served) -> None:
    async with AsyncClient(served.endpoint, timeout_s=3) as client:
        job = await client.get_job("j-1")
        assert job.id == "j-1"
        jobs = [j async for j in client.list_jobs(page_size=2)]
        assert len(jobs) == 6
        with pytest.raises(NotFound):
            await client.get_job("missing")
        await client.update_job("j-1", name="n2")
        assert list(served.servicer.last("UpdateJob").update_paths) == ["name"]
        assert await client.delete_job("j-1") == 2
        assert len(await client.list_executions(limit=3)) == 3
    call = served.servicer.calls[0]
    assert call.time_remaining is not None and call.time_remaining <= 3 + 0.1


def test_targets_and_service_config() -> None:
    assert grpc_target("127.0.0.1:7070") == "ipv4:127.0.0.1:7070"
    assert grpc_target("10.0.0.1:1,10.0.0.2:2") == "ipv4:10.0.0.1:1,10.0.0.2:2"
    assert grpc_target(["[::1]:7070"]) == "ipv6:[::1]:7070"
    assert grpc_target("sched.example:7070") == "dns:///sched.example:7070"
    with pytest.raises(InvalidArgument):
        grpc_target("nohost")
    # Each endpoint has its own channel without gRPC's retries (failover tries the next node).
    config = json.loads(service_config())
    assert config == {"loadBalancingConfig": [{"pick_first": {}}]}
    assert "GetJob" in IDEMPOTENT_METHODS and "CreateJob" not in IDEMPOTENT_METHODS


def test_dict_views() -> None:
    d = job_to_dict(sample_job())
    assert d["payload"] == {"to": "ops"}
    assert d["next_fire_time"] == "2026-03-08T07:00:00Z"
    assert d["misfire"]["mode"] == "ONCE" and d["overlap"] == "ALLOW"
    assert d["handler"] == {"name": "send_report", "queue": "default"}
    e = execution_to_dict(sample_execution())
    assert e["state"] == "SUCCEEDED" and e["scheduled_time"] == "2026-03-08T07:00:00Z"
    assert e["result"] == {"ok": True} and e["fencing_token"] == 100
    assert iso_utc(1_772_953_200_123) == "2026-03-08T07:00:00.123Z"
    assert iso_utc(0) is None
    assert parse_time_ms("2026-03-08T07:00:00Z") == 1_772_953_200_000
    with pytest.raises(InvalidArgument):
        parse_time_ms("yesterday")


def test_create_jobs_splits_many_into_calls_and_keeps_their_order(served: Served) -> None:
    jobs = [job_pb2.Job(name=f"n{i}") if i % 7 else job_pb2.Job() for i in range(25)]
    seen: list[tuple[int, int]] = []
    with Client(served.endpoint) as client:
        out = client.create_jobs(
            jobs, chunk=4, in_flight=3, progress=lambda done, total: seen.append((done, total))
        )
    calls = [c for c in served.servicer.calls if c.method == "BatchCreateJobs"]
    assert sorted(len(c.request.jobs) for c in calls) == [1] + [4] * 6
    assert len(out) == 25
    for i, item in enumerate(out):
        if i % 7:
            assert isinstance(item, job_pb2.Job) and item.name == f"n{i}"
        else:
            assert isinstance(item, InvalidArgument)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1] == (25, 25)
    assert {t for _, t in seen} == {25}


def test_create_jobs_refuses_a_bad_chunk_without_calling(served: Served) -> None:
    with Client(served.endpoint) as client:
        with pytest.raises(InvalidArgument) as err:
            client.create_jobs([job_pb2.Job(name="a")], chunk=0)
        assert err.value.field == "chunk"
        with pytest.raises(InvalidArgument) as err:
            client.create_jobs([job_pb2.Job(name="a")], in_flight=0)
        assert err.value.field == "in_flight"
    assert not [c for c in served.servicer.calls if c.method == "BatchCreateJobs"]
