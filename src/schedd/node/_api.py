"""The client API as plain async functions: validate, call the store, shape the answer.

The gRPC servicer (:mod:`schedd.node._servicer`) only translates; every decision is here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from schedd._clock import Clock
from schedd._errors import (
    ExecutionNotFound,
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
    SchedError,
)
from schedd._status import item_error
from schedd.auth import (
    AuditLog,
    TokenStore,
    note,
)
from schedd.history import Position
from schedd.model import (
    DEFAULT_TENANT,
    apply_update,
    check_payload,
    check_text,
    new_execution,
    new_job_id,
    parse_execution_id,
    validate_execution_id,
    validate_id,
    validate_new_job_parsed,
)
from schedd.node._api_admin import AdminCalls, page_size
from schedd.node._fire_tree import check_root
from schedd.node._queues import hide_free_slots
from schedd.node._views import decode_page_token
from schedd.schedule import Schedule, parse_schedule
from schedd.store import TRIGGER_KEY_TTL_MS, JobStore, TenantStore
from schedd.v1 import auth_pb2, execution_pb2, job_pb2, scheduler_pb2

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

    async def list_queues(
        self, req: scheduler_pb2.ListQueuesRequest
    ) -> scheduler_pb2.ListQueuesResponse: ...


class NodeApi(AdminCalls):
    """The client API (see the module's docstring); the administration calls are
    :class:`~._api_admin.AdminCalls`'."""

    def __init__(
        self,
        jobs: JobStore,
        views: ClusterView,
        clock: Clock,
        *,
        id_factory: Callable[[], str] = new_job_id,
        auth: bool = False,
        audit: AuditLog | None = None,
        limits_of: Callable[[str], scheduler_pb2.TenantLimits | None] | None = None,
        on_token: Callable[[auth_pb2.ApiToken], None] | None = None,
        unserved: Callable[[job_pb2.Job], str | None] | None = None,
        trigger_key_ttl_ms: int = TRIGGER_KEY_TTL_MS,
    ) -> None:
        self.jobs = jobs
        #: How long a trigger's idempotency key is remembered.
        self.trigger_key_ttl_ms = trigger_key_ttl_ms
        #: A warning when no connected worker could run a job's dispatches (None: one could).
        self._unserved = unserved or (lambda _job: None)
        self.views = views
        self.clock = clock
        self.id_factory = id_factory
        self.tenants = TenantStore(jobs.kv, jobs.keys)
        self.tokens = TokenStore(jobs.kv, jobs.keys)
        #: Whether calls need a token; the caller of each call is set by the ApiGate.
        self.auth = auth
        self.audit = audit
        self._limits_of = limits_of or (lambda _tenant: None)
        self._on_token = on_token

    async def _job_for(self, job_id: str, *, write: bool) -> job_pb2.Job:
        """The job, if the caller may see it (NOT_FOUND otherwise) and, for ``write``, change
        it; the audit entry learns its tenant."""
        caller = self._caller()
        caller.require_api()
        job = await self.jobs.get_job(validate_id("id", job_id))
        caller.check_job(job.id, job.tenant)
        if write:
            caller.require_writer(job.tenant)
        note(tenant=job.tenant, target=job.id)
        return job

    async def _check_quota(
        self, job: job_pb2.Job, adding: int, counted: dict[str, int] | None = None
    ) -> None:
        """RESOURCE_EXHAUSTED when ``adding`` more jobs would take the job's tenant over its
        max_jobs (``counted`` keeps the stored counts across the items of a batch). A create
        whose idempotency key exists already is a retry: it adds nothing, so it passes (and
        gets the stored job back)."""
        tenant = job.tenant
        limits = self._limits_of(tenant)
        if limits is None or limits.max_jobs <= 0:
            return
        have = counted.get(tenant) if counted is not None else None
        if have is None:
            have = await self.jobs.count_tenant_jobs(tenant)
            if counted is not None:
                counted[tenant] = have
        if have + adding > limits.max_jobs:
            if job.idempotency_key and await self.jobs.kv.get(
                self.jobs.keys.idem_key(tenant, job.idempotency_key)
            ):
                return
            raise ResourceExhausted(
                f"tenant {tenant!r} has {have} of its {limits.max_jobs} jobs (max_jobs); "
                f"{adding} more would exceed it: delete jobs or raise the quota",
                retry_after_s=0,
            )

    # -- jobs ----------------------------------------------------------------------------------

    def _validated(
        self, job: job_pb2.Job, now: int, field: str = "job"
    ) -> tuple[job_pb2.Job, Schedule | None]:
        """The normalised job and its schedule, parsed once for the whole create (None: a
        job with parents, which has none)."""
        try:
            out, sched = validate_new_job_parsed(job, now_ms=now, id_factory=self.id_factory)
        except InvalidArgument as exc:
            if field == "job" or not exc.field.startswith("job"):
                raise
            # In a batch, the field names the item: jobs[3].schedule.expr.
            raise InvalidArgument(field + exc.field[3:], exc.reason) from exc
        if sched is not None and sched.next_fire(now - 1) is None:
            raise InvalidArgument(f"{field}.schedule.expr", "the schedule has no fire after now")
        return out, sched

    async def create_job(
        self, req: scheduler_pb2.CreateJobRequest
    ) -> scheduler_pb2.CreateJobResponse:
        now = self.clock.now_ms()
        caller = self._caller()
        if not req.job.tenant and caller.tenant:
            req.job.tenant = caller.tenant  # a tenant token creates in its tenant by default
        caller.require_writer(req.job.tenant, "job.tenant")
        job, sched = self._validated(req.job, now)
        note(tenant=job.tenant, target=job.id)
        await self._check_quota(job, 1)
        (result,) = await self.jobs.create_jobs([job], now, [sched])
        if isinstance(result, SchedError):
            raise result
        return scheduler_pb2.CreateJobResponse(
            job=result[0], created=result[1], warnings=self._warnings(result[0])
        )

    def _warnings(self, job: job_pb2.Job) -> list[str]:
        """What to tell the creator of ``job`` (a look at the open streams: cheap)."""
        warning = self._unserved(job)
        return [warning] if warning else []

    async def batch_create_jobs(
        self, req: scheduler_pb2.BatchCreateJobsRequest
    ) -> scheduler_pb2.BatchCreateJobsResponse:
        if len(req.jobs) > MAX_BATCH:
            raise InvalidArgument("jobs", f"at most {MAX_BATCH} jobs per call, got {len(req.jobs)}")
        now = self.clock.now_ms()
        caller = self._caller()
        caller.require_api()
        results: list[scheduler_pb2.BatchCreateJobsResult | None] = []
        valid: list[job_pb2.Job] = []
        schedules: list[Schedule | None] = []
        slots: list[int] = []
        adding: dict[str, int] = {}
        counted: dict[str, int] = {}
        for n, job in enumerate(req.jobs):
            try:
                if not job.tenant and caller.tenant:
                    job.tenant = caller.tenant
                caller.require_writer(job.tenant, f"jobs[{n}].tenant")
                out, sched = self._validated(job, now, f"jobs[{n}]")
                await self._check_quota(out, adding.get(job.tenant, 0) + 1, counted)
                adding[job.tenant] = adding.get(job.tenant, 0) + 1
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
                ok = scheduler_pb2.CreateJobResponse(
                    job=outcome[0], created=outcome[1], warnings=self._warnings(outcome[0])
                )
                results[n] = scheduler_pb2.BatchCreateJobsResult(ok=ok)
        note(
            tenant=",".join(sorted(adding)),
            target=f"{len(valid)} of {len(req.jobs)} jobs",
        )
        return scheduler_pb2.BatchCreateJobsResponse(results=[r for r in results if r is not None])

    async def get_job(self, req: scheduler_pb2.GetJobRequest) -> job_pb2.Job:
        if req.id or not req.name:
            return await self._job_for(req.id, write=False)
        caller = self._caller()
        tenant = caller.scope("tenant", req.tenant) or req.tenant or DEFAULT_TENANT
        job = await self.jobs.find_by_name(tenant, check_text("name", req.name))
        caller.check_job(job.id, job.tenant)
        note(tenant=job.tenant, target=job.id)
        return job

    async def list_jobs(self, req: scheduler_pb2.ListJobsRequest) -> scheduler_pb2.ListJobsResponse:
        jobs, token = await self.jobs.list_jobs(
            tenant=self._caller().scope("tenant", req.tenant),
            name_prefix=req.name_prefix,
            page_size=page_size(req.page_size),
            page_token=req.page_token,
        )
        return scheduler_pb2.ListJobsResponse(jobs=jobs, next_page_token=token)

    async def update_job(self, req: scheduler_pb2.UpdateJobRequest) -> job_pb2.Job:
        job_id = validate_id("job.id", req.job.id)
        await self._job_for(job_id, write=True)
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
        job = await self._job_for(req.id, write=True)
        n = await self.jobs.delete_job(job.id, self.clock.now_ms())
        return scheduler_pb2.DeleteJobResponse(cancelled_executions=n)

    async def pause_job(self, req: scheduler_pb2.PauseJobRequest) -> job_pb2.Job:
        job = await self._job_for(req.id, write=True)
        return await self.jobs.set_paused(job.id, True, self.clock.now_ms())

    async def resume_job(self, req: scheduler_pb2.ResumeJobRequest) -> job_pb2.Job:
        job = await self._job_for(req.id, write=True)
        return await self.jobs.set_paused(job.id, False, self.clock.now_ms())

    async def trigger_job(self, req: scheduler_pb2.TriggerJobRequest) -> execution_pb2.Execution:
        """One execution, due now; with an idempotency key, the one that key made (same id,
        its state now) when it made one within the key's lifetime."""
        key = check_text("idempotency_key", req.idempotency_key)
        job = await self._job_for(req.id, write=True)
        check_payload("payload", req.payload)
        done = await self.jobs.trigger(
            job,
            self.clock.now_ms(),
            payload=req.payload,
            idempotency_key=key,
            key_ttl_ms=self.trigger_key_ttl_ms,
        )
        if done.created is not None:
            return done.created
        return await self._triggered_before(job, done.execution_id)

    async def _triggered_before(
        self, job: job_pb2.Job, execution_id: str
    ) -> execution_pb2.Execution:
        """The execution an earlier trigger with the same key made: live in the store, or
        finished (asked of every node, as GetExecution; UNAVAILABLE when it was not found and
        some node did not answer). Once no node keeps it (its history pruned), the answer
        carries what its id says."""
        live = await self.jobs.get_live_execution(execution_id)
        if live is not None:
            return live
        try:
            return await self.views.get_execution(execution_id)
        except ExecutionNotFound:
            job_id, sched = parse_execution_id(execution_id)
            return execution_pb2.Execution(
                id=execution_id, job_id=job_id, tenant=job.tenant, scheduled_ms=sched,
                trigger=execution_pb2.TRIGGER_MANUAL,
            )  # fmt: skip

    async def backfill_job(
        self, req: scheduler_pb2.BackfillJobRequest
    ) -> scheduler_pb2.BackfillJobResponse:
        job = await self._job_for(req.id, write=True)
        note(skip=req.dry_run)
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

    # -- executions ----------------------------------------------------------------------------

    async def cancel_execution(
        self, req: scheduler_pb2.CancelExecutionRequest
    ) -> execution_pb2.Execution:
        eid = validate_execution_id("id", req.id)
        if len(req.reason.encode()) > 1024:
            raise InvalidArgument("reason", "at most 1 KiB")
        await self._execution_for(eid)
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
        ex = await self.views.get_execution(validate_execution_id("id", req.id))
        if not self._caller().sees(ex.tenant):
            raise ExecutionNotFound(ex.id)
        await self.jobs.name_runs([ex])
        return ex

    async def _execution_for(self, execution_id: str) -> None:
        """Refuses to change an execution the caller may not (NOT_FOUND when it may not see
        its job): its job id is in its id, and a job's tenant never changes."""
        caller = self._caller()
        caller.require_api()
        job_id, _ = parse_execution_id(execution_id)  # validated by the caller
        try:
            job = await self.jobs.get_job(job_id)
        except SchedError:
            if not caller.admin:
                raise ExecutionNotFound(execution_id) from None
            note(target=execution_id)
            return
        if not caller.sees(job.tenant):
            raise ExecutionNotFound(execution_id)
        caller.require_writer(job.tenant)
        note(tenant=job.tenant, target=execution_id)

    async def list_executions(
        self, req: scheduler_pb2.ListExecutionsRequest
    ) -> scheduler_pb2.ListExecutionsResponse:
        size = page_size(req.page_size)
        if req.job_id:
            validate_id("job_id", req.job_id)
        tenant = self._caller().scope("tenant", req.tenant)
        if tenant != req.tenant:
            scoped = scheduler_pb2.ListExecutionsRequest()
            scoped.CopyFrom(req)
            scoped.tenant = tenant
            req = scoped
        if req.root:
            await check_root(self.jobs, self._caller(), req.root, tenant)
        after = decode_page_token(req.page_token)
        resp = await self.views.list_executions(req, after, size)
        await self.jobs.name_runs(resp.executions)
        return resp

    async def list_dead_letters(
        self, req: scheduler_pb2.ListDeadLettersRequest
    ) -> scheduler_pb2.ListDeadLettersResponse:
        size = page_size(req.page_size)
        if req.job_id:
            validate_id("job_id", req.job_id)
        tenant = self._caller().scope("tenant", req.tenant)
        if req.job_id and tenant:
            await self._job_for(req.job_id, write=False)
        rows = await self.jobs.list_dead(tenant, req.job_id)
        rows.sort(key=lambda e: (e.scheduled_ms, e.id), reverse=True)
        start = int(req.page_token) if req.page_token.isdigit() else 0
        token = str(start + size) if start + size < len(rows) else ""
        page = rows[start : start + size]
        await self.jobs.name_runs(page)
        return scheduler_pb2.ListDeadLettersResponse(executions=page, next_page_token=token)

    async def redrive(
        self, req: scheduler_pb2.RedriveDeadLettersRequest
    ) -> scheduler_pb2.RedriveDeadLettersResponse:
        caller = self._caller()
        caller.require_api()
        if req.execution_ids:
            dead = []
            for e in req.execution_ids:
                ex = await self.jobs.get_dead(validate_execution_id("execution_ids", e))
                if not caller.sees(ex.tenant):
                    raise ExecutionNotFound(ex.id)
                caller.require_writer(ex.tenant)
                dead.append(ex)
            note(
                tenant=",".join(sorted({ex.tenant for ex in dead})),
                target=",".join(ex.id for ex in dead),
            )
        else:
            if not req.tenant and not req.job_id and not req.all:
                raise InvalidArgument(
                    "execution_ids",
                    "name executions, a tenant or job_id to redrive all of, or set all",
                )
            tenant = caller.scope("tenant", req.tenant)
            if tenant or not caller.admin:
                caller.require_writer(tenant)
            if req.job_id and not caller.admin:
                await self._job_for(req.job_id, write=True)
            dead = await self.jobs.list_dead(tenant, req.job_id)
            note(tenant=tenant, target=req.job_id or tenant or "all")
        redriven = await self.jobs.redrive(dead, self.clock.now_ms())
        return scheduler_pb2.RedriveDeadLettersResponse(executions=redriven)

    async def cluster_status(
        self, req: scheduler_pb2.GetClusterStatusRequest
    ) -> scheduler_pb2.ClusterStatus:
        caller = self._caller()
        status = await self.views.cluster_status(req.local_only)
        if not caller.admin:
            # Tenants and workers see the nodes and partitions, not who runs what.
            del status.workers[:]
        return status

    async def list_queues(
        self, req: scheduler_pb2.ListQueuesRequest
    ) -> scheduler_pb2.ListQueuesResponse:
        """Per queue, cluster-wide. An admin sees every tenant's counts (or ``req.tenant``'s)
        and the free slots; a tenant's token its own tenant's counts, without free slots."""
        caller = self._caller()
        queue = check_text("queue", req.queue)
        tenant = caller.scope("tenant", check_text("tenant", req.tenant))
        resp = await self.views.list_queues(
            scheduler_pb2.ListQueuesRequest(queue=queue, tenant=tenant)
        )
        if not caller.admin:
            hide_free_slots(resp.queues)
        return resp
