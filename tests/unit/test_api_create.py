"""Creating jobs through the client API on the memory backend: each schedule is parsed once."""

from __future__ import annotations

from typing import Any

import pytest

import schedd.schedule
import schedd.store._job_create
from schedd._clock import ManualClock
from schedd.node._api import NodeApi
from schedd.store import JobStore, Keys, MemoryKV
from schedd.v1 import job_pb2, scheduler_pb2

NOW = 1_700_000_000_000


def _spec(name: str) -> job_pb2.Job:
    return job_pb2.Job(
        name=name,
        schedule=job_pb2.Schedule(expr="0 9 * * 1-5", timezone="Europe/Berlin"),
        handler=job_pb2.HandlerTarget(name="report"),
    )


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of parse_schedule, wherever the create path reaches it."""
    calls: list[str] = []
    real = schedd.schedule.parse_schedule

    def counting(expr: str, tz: str, **kwargs: Any) -> Any:
        calls.append(expr)
        return real(expr, tz, **kwargs)

    monkeypatch.setattr(schedd.schedule, "parse_schedule", counting)
    monkeypatch.setattr(schedd.store._job_create, "parse_schedule", counting)
    return calls


def _api() -> tuple[NodeApi, JobStore]:
    clock = ManualClock(NOW)
    jobs = JobStore(MemoryKV(clock=clock), Keys(b"/t/"), partitions=4)
    ids = iter(f"j-{n:020d}" for n in range(100))
    return NodeApi(jobs, None, clock, id_factory=lambda: next(ids)), jobs  # type: ignore[arg-type]


async def test_create_parses_the_schedule_once_and_stores_its_first_fire(
    parses: list[str],
) -> None:
    api, jobs = _api()
    created = await api.create_job(scheduler_pb2.CreateJobRequest(job=_spec("daily")))
    assert created.created and parses == ["0 9 * * 1-5"]
    stored = await jobs.read(created.job.id)
    # 2023-11-14 22:13 UTC: the next weekday 09:00 in Berlin is Wednesday 15th, 08:00 UTC.
    assert stored.state.next_fire_ms == 1_700_035_200_000


async def test_batch_create_parses_each_schedule_once(parses: list[str]) -> None:
    api, _ = _api()
    bad = _spec("broken")
    bad.schedule.expr = "61 * * * *"
    req = scheduler_pb2.BatchCreateJobsRequest(jobs=[_spec("a"), bad, _spec("b")])
    resp = await api.batch_create_jobs(req)
    assert [r.WhichOneof("outcome") for r in resp.results] == ["ok", "error", "ok"]
    assert resp.results[1].error.field == "jobs[1].schedule.expr"
    assert "minute value 61" in resp.results[1].error.message
    assert parses == ["0 9 * * 1-5", "61 * * * *", "0 9 * * 1-5"]
