"""The client API as plain async functions: validate, call the store, shape the answer.

The gRPC servicer (:mod:`schedd.node._servicer`) only translates; every decision is here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from schedd._clock import Clock
from schedd._errors import FailedPrecondition, InvalidArgument, SchedError
from schedd._status import item_error
from schedd.history import Position
from schedd.model import (
    apply_update,
    check_text,
    new_execution,
    new_job_id,
    validate_execution_id,
    validate_id,
    validate_new_job_parsed,
    validate_tenant_limits,
)
from schedd.model._fields import check_payload
from schedd.node._views import decode_page_token
from schedd.schedule import Schedule, parse_schedule
from schedd.store import JobStore, TenantStore
from schedd.v1 import execution_pb2, job_pb2, scheduler_pb2

MAX_PAGE = 1000
MAX_BATCH = 10_000
MAX_BACKFILL = 10_000
#: How far the fires a backfill leaves out are counted (BackfillJobResponse.truncated).
MAX_BACKFILL_COUNT = 100_000


class ClusterView(Protocol):
    """The cluster-wide reads (:class:`~._cluster_views.ClusterViews`: every node asked)."""

    async def list_executions(
        self, req: scheduler_pb2.ListExecutionsRequest, after: Position | None, size: int
    ) -> scheduler_pb2.ListExecutionsResponse: ...

    async def get_execution(self, execution_id: str) -> execution_pb2.Execution: ...

    async def cluster_status(self, local_only: bool) -> scheduler_pb2.ClusterStatus: ...


def page_size(value: int, field: str = "page_size") -> int:
    """The page size a request asks for (0: 100).

    Raises:
        InvalidArgument: on ``field`` when negative or above the maximum.
    """
    if value < 0 or value > MAX_PAGE:
        raise InvalidArgument(field, f"must be between 0 and {MAX_PAGE}, got {value}")
    return value or 100


class NodeApi:
    def __init__(
        self,
        jobs: JobStore,
        views: ClusterView,
        clock: Clock,
        *,
        id_factory: Callable[[], str] = new_job_id,
    ) -> None:
        self.jobs = jobs
        self.views = views
        self.clock = clock
        self.id_factory = id_factory
        self.tenants = TenantStore(jobs.kv, jobs.keys)

    # -- jobs ----------------------------------------------------------------------------------

    def _validated(
        self, job: job_pb2.Job, now: int, field: str = "job"
    ) -> tuple[job_pb2.Job, Schedule]:
        """The normalised job and its schedule, parsed once for the whole create."""
        try:
            out, sched = validate_new_job_parsed(job, now_ms=now, id_factory=self.id_factory)
        except InvalidArgument as exc:
            if field == "job" or not exc.field.startswith("job"):
                raise
            # In a batch, the field names the item: jobs[3].schedule.expr.
            raise InvalidArgument(field + exc.field[3:], exc.reason) from exc
        if sched.next_fire(now - 1) is None:
            raise InvalidArgument(f"{field}.schedule.expr", "the schedule has no fire after now")
        return out, sched

    async def create_job(
        self, req: scheduler_pb2.CreateJobRequest
    ) -> scheduler_pb2.CreateJobResponse:
        now = self.clock.now_ms()
        job, sched = self._validated(req.job, now)
        (result,) = await self.jobs.create_jobs([job], now, [sched])
        if isinstance(result, SchedError):
            raise result
        return scheduler_pb2.CreateJobResponse(job=result[0], created=result[1])

    async def batch_create_jobs(
        self, req: scheduler_pb2.BatchCreateJobsRequest
    ) -> scheduler_pb2.BatchCreateJobsResponse:
        if len(req.jobs) > MAX_BATCH:
            raise InvalidArgument("jobs", f"at most {MAX_BATCH} jobs per call, got {len(req.jobs)}")
        now = self.clock.now_ms()
        results: list[scheduler_pb2.BatchCreateJobsResult | None] = []
        valid: list[job_pb2.Job] = []
        schedules: list[Schedule] = []
        slots: list[int] = []
        for n, job in enumerate(req.jobs):
            try:
                out, sched = self._validated(job, now, f"jobs[{n}]")
                valid.append(out)
                schedules.append(sched)
                slots.append(n)
                results.append(None)
            except SchedError as err:
                results.append(scheduler_pb2.BatchCreateJobsResult(error=item_error(err)))
        for n, outcome in zip(
            slots, await self.jobs.create_jobs(valid, now, schedules), strict=True
        ):
            if isinstance(outcome, SchedError):
                results[n] = scheduler_pb2.BatchCreateJobsResult(error=item_error(outcome))
            else:
                ok = scheduler_pb2.CreateJobResponse(job=outcome[0], created=outcome[1])
                results[n] = scheduler_pb2.BatchCreateJobsResult(ok=ok)
        return scheduler_pb2.BatchCreateJobsResponse(results=[r for r in results if r is not None])

    async def get_job(self, req: scheduler_pb2.GetJobRequest) -> job_pb2.Job:
        return await self.jobs.get_job(validate_id("id", req.id))

    async def list_jobs(self, req: scheduler_pb2.ListJobsRequest) -> scheduler_pb2.ListJobsResponse:
        jobs, token = await self.jobs.list_jobs(
            tenant=req.tenant,
            name_prefix=req.name_prefix,
            page_size=page_size(req.page_size),
            page_token=req.page_token,
        )
        return scheduler_pb2.ListJobsResponse(jobs=jobs, next_page_token=token)

    async def update_job(self, req: scheduler_pb2.UpdateJobRequest) -> job_pb2.Job:
        job_id = validate_id("job.id", req.job.id)
        now = self.clock.now_ms()

        def mutate(stored: job_pb2.Job) -> job_pb2.Job:
            # apply_update validates the schedule too (anchored at the job's creation).
            return apply_update(stored, req.job, list(req.update_paths), now_ms=now)

        return await self.jobs.update_job(
            job_id, mutate, now, expected_version=req.expected_version
        )

    async def delete_job(
        self, req: scheduler_pb2.DeleteJobRequest
    ) -> scheduler_pb2.DeleteJobResponse:
        n = await self.jobs.delete_job(validate_id("id", req.id), self.clock.now_ms())
        return scheduler_pb2.DeleteJobResponse(cancelled_executions=n)

    async def pause_job(self, req: scheduler_pb2.PauseJobRequest) -> job_pb2.Job:
        return await self.jobs.set_paused(validate_id("id", req.id), True, self.clock.now_ms())

    async def resume_job(self, req: scheduler_pb2.ResumeJobRequest) -> job_pb2.Job:
        return await self.jobs.set_paused(validate_id("id", req.id), False, self.clock.now_ms())

    async def trigger_job(self, req: scheduler_pb2.TriggerJobRequest) -> execution_pb2.Execution:
        job = await self.jobs.get_job(validate_id("id", req.id))
        check_payload("payload", req.payload)
        now = self.clock.now_ms()
        for sched in range(now, now + 1000):
            created = await self.jobs.add_runs(
                job, [sched], execution_pb2.TRIGGER_MANUAL, now, payload_override=req.payload
            )
            if created:
                return created[0]
        raise SchedError(f"job {job.id!r}: could not find a free trigger slot")

    async def backfill_job(
        self, req: scheduler_pb2.BackfillJobRequest
    ) -> scheduler_pb2.BackfillJobResponse:
        job = await self.jobs.get_job(validate_id("id", req.id))
        if req.end_ms <= req.start_ms:
            raise InvalidArgument("end_ms", "must be after start_ms")
        if req.limit < 0 or req.limit > MAX_BACKFILL:
            raise InvalidArgument("limit", f"must be between 0 and {MAX_BACKFILL}")
        now = self.clock.now_ms()
        if req.end_ms > now:
            raise InvalidArgument("end_ms", "a backfill covers the past only")
        limit = req.limit or 1000
        sched = parse_schedule(job.schedule.expr, job.schedule.timezone, anchor_ms=job.created_ms)
        fires = list(sched.fires(req.start_ms - 1, until_ms=req.end_ms - 1, limit=limit + 1))
        truncated = max(0, len(fires) - limit)
        next_start = fires[limit] if truncated else 0
        fires = fires[:limit]
        if truncated:  # how many more, counted without listing them all
            rest = sched.fires(next_start - 1, until_ms=req.end_ms - 1, limit=MAX_BACKFILL_COUNT)
            truncated = sum(1 for _ in rest)
        if req.dry_run:
            live = {ex.scheduled_ms for ex in await self.jobs.list_live(job.id)}
            todo = [f for f in fires if f not in live]
            would = [
                new_execution(
                    job, self.jobs.partition(job.id), f, now, execution_pb2.TRIGGER_BACKFILL
                )
                for f in todo
            ]
            existing = [f for f in fires if f in live]
            return scheduler_pb2.BackfillJobResponse(
                executions=would, truncated=truncated, existing_ms=existing,
                next_start_ms=next_start,
            )  # fmt: skip
        created = await self.jobs.add_runs(job, fires, execution_pb2.TRIGGER_BACKFILL, now)
        made = {ex.scheduled_ms for ex in created}
        return scheduler_pb2.BackfillJobResponse(
            executions=created,
            truncated=truncated,
            existing_ms=[f for f in fires if f not in made],
            next_start_ms=next_start,
        )

    # -- tenants -------------------------------------------------------------------------------

    async def set_tenant_limits(
        self, req: scheduler_pb2.SetTenantLimitsRequest
    ) -> scheduler_pb2.TenantLimits:
        limits = validate_tenant_limits(req.limits)
        return await self.tenants.set(limits, self.clock.now_ms())

    async def get_tenant_limits(
        self, req: scheduler_pb2.GetTenantLimitsRequest
    ) -> scheduler_pb2.TenantLimits:
        return await self.tenants.get(check_text("tenant", req.tenant, required=True))

    async def list_tenant_limits(
        self, req: scheduler_pb2.ListTenantLimitsRequest
    ) -> scheduler_pb2.ListTenantLimitsResponse:
        return scheduler_pb2.ListTenantLimitsResponse(tenants=await self.tenants.list())

    async def delete_tenant_limits(
        self, req: scheduler_pb2.DeleteTenantLimitsRequest
    ) -> scheduler_pb2.TenantLimits:
        return await self.tenants.delete(check_text("tenant", req.tenant, required=True))

    # -- executions ----------------------------------------------------------------------------

    async def cancel_execution(
        self, req: scheduler_pb2.CancelExecutionRequest
    ) -> execution_pb2.Execution:
        eid = validate_execution_id("id", req.id)
        if len(req.reason.encode()) > 1024:
            raise InvalidArgument("reason", "at most 1 KiB")
        why = f"cancelled: {req.reason}" if req.reason else "cancelled by request"
        ex = await self.jobs.cancel_run(eid, why, self.clock.now_ms())
        if ex is not None:
            return ex
        ended = await self.views.get_execution(eid)  # ExecutionNotFound when nobody has it
        name = execution_pb2.ExecutionState.Name(ended.state).removeprefix("EXECUTION_")
        raise FailedPrecondition(f"execution {eid!r} has ended already ({name})")

    async def get_execution(
        self, req: scheduler_pb2.GetExecutionRequest
    ) -> execution_pb2.Execution:
        return await self.views.get_execution(validate_execution_id("id", req.id))

    async def list_executions(
        self, req: scheduler_pb2.ListExecutionsRequest
    ) -> scheduler_pb2.ListExecutionsResponse:
        size = page_size(req.page_size)
        if req.job_id:
            validate_id("job_id", req.job_id)
        after = decode_page_token(req.page_token)
        return await self.views.list_executions(req, after, size)

    async def list_dead_letters(
        self, req: scheduler_pb2.ListDeadLettersRequest
    ) -> scheduler_pb2.ListDeadLettersResponse:
        size = page_size(req.page_size)
        if req.job_id:
            validate_id("job_id", req.job_id)
        rows = await self.jobs.list_dead(req.tenant, req.job_id)
        rows.sort(key=lambda e: (e.scheduled_ms, e.id), reverse=True)
        start = int(req.page_token) if req.page_token.isdigit() else 0
        token = str(start + size) if start + size < len(rows) else ""
        return scheduler_pb2.ListDeadLettersResponse(
            executions=rows[start : start + size], next_page_token=token
        )

    async def redrive(
        self, req: scheduler_pb2.RedriveDeadLettersRequest
    ) -> scheduler_pb2.RedriveDeadLettersResponse:
        if req.execution_ids:
            dead = [
                await self.jobs.get_dead(validate_execution_id("execution_ids", e))
                for e in req.execution_ids
            ]
        else:
            if not req.tenant and not req.job_id and not req.all:
                raise InvalidArgument(
                    "execution_ids",
                    "name executions, a tenant or job_id to redrive all of, or set all",
                )
            dead = await self.jobs.list_dead(req.tenant, req.job_id)
        redriven = await self.jobs.redrive(dead, self.clock.now_ms())
        return scheduler_pb2.RedriveDeadLettersResponse(executions=redriven)

    async def cluster_status(
        self, req: scheduler_pb2.GetClusterStatusRequest
    ) -> scheduler_pb2.ClusterStatus:
        return await self.views.cluster_status(req.local_only)
