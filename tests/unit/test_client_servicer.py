"""A canned Scheduler servicer on a real grpc.aio server in a background thread.

Shared by the client and schedctl tests (it holds no tests itself). Requests are recorded with
the deadline the client set; magic ids make it fail: ``missing`` -> NOT_FOUND, ``dup`` ->
ALREADY_EXISTS, ``stale`` -> ABORTED, ``bad`` -> INVALID_ARGUMENT (field ``id``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf.message import Message

from schedd import AlreadyExists, Conflict, InvalidArgument, JobNotFound, SchedError
from schedd._status import abort_with, item_error
from schedd.v1 import execution_pb2, job_pb2, scheduler_pb2, scheduler_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]
_MAGIC: dict[str, SchedError] = {
    "missing": JobNotFound("missing"),
    "dup": AlreadyExists("job 'dup' exists with another spec"),
    "stale": Conflict("version changed"),
    "bad": InvalidArgument("id", "must not contain '/'"),
}


def sample_job(job_id: str = "j-1", name: str = "report") -> job_pb2.Job:
    job = job_pb2.Job(id=job_id, tenant="default", name=name, next_fire_ms=1_772_953_200_000)
    job.schedule.expr = "0 9 * * *"
    job.schedule.timezone = "UTC"
    job.handler.name = "send_report"
    job.handler.queue = "default"
    job.payload = b'{"to": "ops"}'
    job.misfire.mode = job_pb2.MISFIRE_ONCE
    job.overlap = job_pb2.OVERLAP_ALLOW
    return job


def sample_execution(n: int = 0, job_id: str = "j-1") -> execution_pb2.Execution:
    ms = 1_772_953_200_000 + n * 60_000
    return execution_pb2.Execution(
        id=f"{job_id}@{ms}",
        job_id=job_id,
        scheduled_ms=ms,
        state=execution_pb2.EXECUTION_SUCCEEDED,
        attempt=1,
        fencing_token=100 + n,
        result=b'{"ok": true}',
    )


@dataclass
class Recorded:
    method: str
    request: Message
    time_remaining: float | None


@dataclass
class FakeScheduler(scheduler_pb2_grpc.SchedulerServicer):
    calls: list[Recorded] = field(default_factory=list)
    pages: int = 3
    # Reported by the cluster-wide calls (ListExecutions, GetClusterStatus) as not answering.
    missing: list[scheduler_pb2.MissingNode] = field(default_factory=list)

    async def _record(self, method: str, request: Message, context: Ctx) -> None:
        self.calls.append(Recorded(method, request, context.time_remaining()))
        ident = getattr(request, "id", None)
        if isinstance(request, scheduler_pb2.GetJobRequest) and not ident:
            ident = request.name  # a lookup by name: the same magic answers
        if ident is None and isinstance(
            request, scheduler_pb2.CreateJobRequest | scheduler_pb2.UpdateJobRequest
        ):
            ident = request.job.id
        if ident in _MAGIC:
            await abort_with(context, _MAGIC[ident])

    def last(self, method: str) -> Any:
        return [c for c in self.calls if c.method == method][-1].request

    async def CreateJob(self, request: Any, context: Ctx) -> Any:
        await self._record("CreateJob", request, context)
        job = job_pb2.Job()
        job.CopyFrom(request.job)
        job.id = job.id or "j-new"
        return scheduler_pb2.CreateJobResponse(job=job, created=True)

    async def BatchCreateJobs(self, request: Any, context: Ctx) -> Any:
        await self._record("BatchCreateJobs", request, context)
        results = []
        for job in request.jobs:
            if job.name:
                ok = scheduler_pb2.CreateJobResponse(job=job, created=True)
                results.append(scheduler_pb2.BatchCreateJobsResult(ok=ok))
            else:
                err = item_error(InvalidArgument("job.name", "must not be empty"))
                results.append(scheduler_pb2.BatchCreateJobsResult(error=err))
        return scheduler_pb2.BatchCreateJobsResponse(results=results)

    async def GetJob(self, request: Any, context: Ctx) -> Any:
        await self._record("GetJob", request, context)
        return sample_job(request.id)

    async def ListJobs(self, request: Any, context: Ctx) -> Any:
        await self._record("ListJobs", request, context)
        page = int(request.page_token or "0")
        token = str(page + 1) if page + 1 < self.pages else ""
        jobs = [sample_job(f"j-{page}-{i}") for i in range(2)]
        return scheduler_pb2.ListJobsResponse(jobs=jobs, next_page_token=token)

    async def UpdateJob(self, request: Any, context: Ctx) -> Any:
        await self._record("UpdateJob", request, context)
        return sample_job(request.job.id)

    async def DeleteJob(self, request: Any, context: Ctx) -> Any:
        await self._record("DeleteJob", request, context)
        return scheduler_pb2.DeleteJobResponse(cancelled_executions=2)

    async def PauseJob(self, request: Any, context: Ctx) -> Any:
        await self._record("PauseJob", request, context)
        job = sample_job(request.id)
        job.paused = True
        return job

    async def ResumeJob(self, request: Any, context: Ctx) -> Any:
        await self._record("ResumeJob", request, context)
        return sample_job(request.id)

    async def TriggerJob(self, request: Any, context: Ctx) -> Any:
        await self._record("TriggerJob", request, context)
        return sample_execution(0, request.id)

    async def BackfillJob(self, request: Any, context: Ctx) -> Any:
        await self._record("BackfillJob", request, context)
        execs = [sample_execution(i, request.id) for i in range(3)]
        return scheduler_pb2.BackfillJobResponse(executions=execs, truncated=1)

    async def GetExecution(self, request: Any, context: Ctx) -> Any:
        await self._record("GetExecution", request, context)
        job_id = request.id.partition("@")[0]
        if job_id in _MAGIC:
            await abort_with(context, _MAGIC[job_id])
        return sample_execution(0, job_id)

    async def ListExecutions(self, request: Any, context: Ctx) -> Any:
        await self._record("ListExecutions", request, context)
        page = int(request.page_token or "0")
        token = str(page + 1) if page + 1 < self.pages else ""
        execs = [sample_execution(page * 2 + i) for i in range(2)]
        return scheduler_pb2.ListExecutionsResponse(
            executions=execs, next_page_token=token, missing_nodes=self.missing
        )

    async def ListDeadLetters(self, request: Any, context: Ctx) -> Any:
        await self._record("ListDeadLetters", request, context)
        dead = sample_execution(0)
        dead.state = execution_pb2.EXECUTION_DEAD
        return scheduler_pb2.ListDeadLettersResponse(executions=[dead])

    async def RedriveDeadLetters(self, request: Any, context: Ctx) -> Any:
        await self._record("RedriveDeadLetters", request, context)
        return scheduler_pb2.RedriveDeadLettersResponse(executions=[sample_execution(0)])

    async def GetClusterStatus(self, request: Any, context: Ctx) -> Any:
        await self._record("GetClusterStatus", request, context)
        return scheduler_pb2.ClusterStatus(
            missing_nodes=self.missing,
            cluster_id="c1",
            partition_count=2,
            nodes=[scheduler_pb2.NodeStatus(node_id="n1", address="127.0.0.1:7070")],
            partitions=[
                scheduler_pb2.PartitionStatus(partition=0, owner="n1", epoch=41),
                scheduler_pb2.PartitionStatus(partition=1, owner="", epoch=0),
            ],
            workers=[
                scheduler_pb2.WorkerStatus(
                    worker_id="w1", node_id="n1", queues=["default"], capacity=4
                )
            ],
        )


@dataclass
class Served:
    servicer: FakeScheduler
    endpoint: str


@pytest.fixture
def served() -> Iterator[Served]:
    """The fake servicer on a grpc.aio server with its own loop in a thread."""
    servicer = FakeScheduler()
    ready = threading.Event()
    port: list[int] = []
    stop: list[asyncio.Event] = []
    loop = asyncio.new_event_loop()

    async def run() -> None:
        server = grpc.aio.server()
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, server)
        port.append(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        stop.append(asyncio.Event())
        ready.set()
        await stop[0].wait()
        await server.stop(None)

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield Served(servicer, f"127.0.0.1:{port[0]}")
    loop.call_soon_threadsafe(stop[0].set)
    thread.join(10)
    loop.close()
