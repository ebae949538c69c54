""":class:`SchedulerHarness`: the scheduler in one process, on virtual time, for users' tests."""

from __future__ import annotations

import base64
import random
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

from schedd._clock import ManualClock
from schedd._errors import ExecutionNotFound
from schedd.client import UNSET, build_job, build_update, encode_payload, parse_time_ms
from schedd.node import NodeApi
from schedd.schedule import ScheduleKind, parse_schedule
from schedd.store import JobStore, Keys, MemoryKV, prefix_end
from schedd.testing._node import SimNode, harness_config
from schedd.testing._runs import Attempt, Run, RunLog
from schedd.testing._workers import WorkerPool
from schedd.v1 import execution_pb2, job_pb2, scheduler_pb2
from schedd.worker import Executor, Handler, HandlerExecutor

_H = TypeVar("_H", bound=Handler)
JobRef = job_pb2.Job | str
#: Passes at one instant before the harness calls it a livelock (something re-arms forever).
_MAX_PASSES = 10_000


def _job_id(job: JobRef) -> str:
    return job if isinstance(job, str) else job.id


class _Views:
    """The cluster-wide reads the client API needs, answered from this one process."""

    def __init__(self, jobs: JobStore, runs: RunLog) -> None:
        self.jobs, self.runs = jobs, runs

    async def get_execution(self, execution_id: str) -> execution_pb2.Execution:
        live = await self.jobs.get_live_execution(execution_id)
        if live is not None:
            return live
        run = self.runs.runs.get(execution_id)
        if run is None:
            raise ExecutionNotFound(execution_id)
        state = execution_pb2.ExecutionState.Value("EXECUTION_" + run.state)
        return execution_pb2.Execution(id=run.execution_id, job_id=run.job_id, state=state)

    async def list_executions(self, *_: Any) -> scheduler_pb2.ListExecutionsResponse:
        raise NotImplementedError("use SchedulerHarness.runs()")

    async def cluster_status(self, local_only: bool) -> scheduler_pb2.ClusterStatus:
        raise NotImplementedError("a harness has no cluster")

    async def list_queues(self, *_: Any) -> scheduler_pb2.ListQueuesResponse:
        raise NotImplementedError("a harness has no worker streams")


class SchedulerHarness:
    """A scheduler node and its workers in this process, on a clock that moves only when told.

    Jobs are created through the client API's own code (validation, idempotency keys, the
    store's transactions), fired by the node's own partitions (misfire, overlap, retry and
    backoff, dead letters) and run on handlers registered as on a :class:`~schedd.worker.
    Worker`; :meth:`advance` moves virtual time, visiting each instant at which something is
    due, so months pass in milliseconds. Nothing happens between calls to the time methods.

    Args:
        start: the virtual time at the start (a datetime, naive meaning UTC; ISO-8601 text;
            or UTC ms).
        seed: seeds job ids and the retry backoff's jitter: the same test runs the same way.
        partitions: how many partitions the node runs (one is enough for most tests).
    """

    def __init__(
        self,
        start: datetime | str | int = "2026-01-01T00:00:00Z",
        *,
        seed: int = 0,
        partitions: int = 1,
    ) -> None:
        self.clock = ManualClock(parse_time_ms(start, "start"))
        self.kv = MemoryKV(clock=self.clock)
        self.keys = Keys(b"/schedd-harness/")
        self.config = harness_config(partitions)
        self.jobs = JobStore(self.kv, self.keys, partitions=partitions)
        self.log = RunLog()
        self.workers = WorkerPool(self.clock)
        ids = random.Random(f"{seed}/job-ids")
        self.api = NodeApi(
            self.jobs, _Views(self.jobs, self.log), self.clock,
            id_factory=lambda: "j-" + base64.b32encode(ids.randbytes(15)).decode().lower()[:20],
        )  # fmt: skip
        self._rng = random.Random(seed)
        self.node: SimNode | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts the node (``async with`` does it)."""
        if self.node is None:
            self.node = await self._new_node()

    async def close(self) -> None:
        """Stops the node and cancels handlers still running (``async with`` does it)."""
        if self.node is not None:
            await self.node.stop(graceful=False)
            self.node = None
        for running in self.workers.running.values():
            running.future.cancel()

    async def __aenter__(self) -> SchedulerHarness:
        await self.start()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _new_node(self) -> SimNode:
        node = SimNode(
            self.kv, self.keys, self.clock, self.config, self.log, self.workers, self._rng
        )
        await node.start()
        return node

    # -- handlers --------------------------------------------------------------------------------

    def handler(self, name: str) -> Callable[[_H], _H]:
        """Decorator: register ``async def f(ctx, payload)`` or ``def f(ctx, payload)`` under
        ``name``, as :meth:`schedd.worker.Worker.handler` does (same Context, same outcomes)."""

        def register(fn: _H) -> _H:
            self.add_handler(name, fn)
            return fn

        return register

    def add_handler(self, name: str, fn: Handler) -> None:
        """Register ``fn`` under ``name`` (ValueError if empty or taken)."""
        if not name:
            raise ValueError("handler name must not be empty")
        if name in self.workers.handlers:
            raise ValueError(f"a handler named {name!r} is already registered")
        self.workers.handlers[name] = HandlerExecutor(fn)

    def add_executor(self, kind: str, executor: Executor) -> None:
        """Run ``"http"`` or ``"shell"`` jobs on ``executor`` (by default they fail
        permanently: the harness calls no URL and runs no command)."""
        self.workers.kinds[kind] = executor

    async def sleep(self, seconds: float) -> None:
        """In a handler: take ``seconds`` of virtual time (``asyncio.sleep`` takes real time
        and the harness does not wait for it)."""
        await self.workers.sleep(seconds)

    # -- jobs: the client API's calls ------------------------------------------------------------

    async def create_job(self, name: str, **kwargs: Any) -> job_pb2.Job:
        """Create a job; arguments as :func:`schedd.client.build_job` (``schedule``, ``tz``,
        ``handler``, ``payload``, ``max_attempts``, ``retry_initial``, ``misfire``,
        ``overlap``, ``jitter``, ``idempotency_key``, ...). Returns the stored job (the
        existing one for an idempotency key used before). Raises what the client raises
        (``InvalidArgument`` naming the field, ...)."""
        req = scheduler_pb2.CreateJobRequest(job=build_job(name, **kwargs))
        return (await self.api.create_job(req)).job

    async def get_job(self, job: JobRef) -> job_pb2.Job:
        return await self.api.get_job(scheduler_pb2.GetJobRequest(id=_job_id(job)))

    async def update_job(
        self, job: JobRef, *, payload: Any = UNSET, expected_version: int = 0, **changes: Any
    ) -> job_pb2.Job:
        """Change the given fields only, as :meth:`schedd.client.Client.update_job`."""
        req = build_update(
            _job_id(job), expected_version=expected_version, payload=payload, **changes
        )
        return await self.api.update_job(req)

    async def pause_job(self, job: JobRef) -> job_pb2.Job:
        return await self.api.pause_job(scheduler_pb2.PauseJobRequest(id=_job_id(job)))

    async def resume_job(self, job: JobRef) -> job_pb2.Job:
        return await self.api.resume_job(scheduler_pb2.ResumeJobRequest(id=_job_id(job)))

    async def delete_job(self, job: JobRef) -> int:
        """Delete a job; returns how many live executions were cancelled with it."""
        req = scheduler_pb2.DeleteJobRequest(id=_job_id(job))
        return (await self.api.delete_job(req)).cancelled_executions

    async def trigger_job(
        self, job: JobRef, payload: Any = None, *, idempotency_key: str = ""
    ) -> str:
        """Run the job once now (at the next time step: ``advance(seconds=0)`` or
        :meth:`run_until_idle`); returns the execution's id (with ``idempotency_key``, a
        repeat returns the first one's and runs nothing)."""
        req = scheduler_pb2.TriggerJobRequest(
            id=_job_id(job), payload=encode_payload(payload), idempotency_key=idempotency_key
        )
        return (await self.api.trigger_job(req)).id

    async def cancel(self, execution_id: str, reason: str = "") -> None:
        """Cancel a live execution (``FailedPrecondition`` when it has ended)."""
        req = scheduler_pb2.CancelExecutionRequest(id=execution_id, reason=reason)
        await self.api.cancel_execution(req)

    async def dead_letters(self, job: JobRef | None = None) -> list[Run]:
        """The dead-letter queue (of one job, or all), oldest fire first."""
        req = scheduler_pb2.ListDeadLettersRequest(
            job_id=_job_id(job) if job else "", page_size=1000
        )
        rows = (await self.api.list_dead_letters(req)).executions
        return sorted((Run.of(ex) for ex in rows), key=lambda r: (r.scheduled_ms, r.job_id))

    async def redrive(self, job: JobRef | None = None, execution_ids: Iterable[str] = ()) -> int:
        """Put dead executions back (these ids, else those of ``job``, else all); they run
        at the next time step. Returns how many were redriven."""
        ids = list(execution_ids)
        req = scheduler_pb2.RedriveDeadLettersRequest(
            execution_ids=ids, job_id=_job_id(job) if job and not ids else "",
            all=not ids and job is None,
        )  # fmt: skip
        return len((await self.api.redrive(req)).executions)

    # -- time --------------------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The virtual time, an aware UTC datetime."""
        return datetime.fromtimestamp(self.clock.now_ms() / 1000, tz=UTC)

    async def advance(
        self, *, days: float = 0, hours: float = 0, minutes: float = 0, seconds: float = 0
    ) -> None:
        """Move virtual time forward, running everything due on the way, in order."""
        delta = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        await self._run_until(self.clock.now_ms() + _ms(delta))

    async def advance_to(self, when: datetime | str | int) -> None:
        """Move virtual time forward to ``when`` (as ``start``); never back."""
        target = parse_time_ms(when, "when")
        if target < self.clock.now_ms():
            raise ValueError(f"{when} is before the harness's time {self.now.isoformat()}")
        await self._run_until(target)

    async def run_until_idle(self, *, limit: timedelta = timedelta(days=1)) -> None:
        """Move time on until no execution is live (claimed, running, waiting to retry), no
        handler runs and no ``@at`` or ``@after`` job is still to fire: what was created to
        run once, triggered, retried or redriven has ended (recurring schedules are not
        waited for).

        Raises:
            RuntimeError: still busy after ``limit`` of virtual time.
        """
        deadline = self.clock.now_ms() + _ms(limit)
        await self._run_until(deadline, stop=self._idle)
        if not await self._idle():
            raise RuntimeError(f"still busy after {limit} of virtual time")

    async def down(
        self,
        *,
        days: float = 0,
        hours: float = 0,
        minutes: float = 0,
        seconds: float = 0,
        graceful: bool = True,
    ) -> None:
        """The scheduler is down for this long, then starts again.

        Nothing fires meanwhile; handlers already running go on, and their results reach
        the node when it is back. The node that comes back takes its partitions under a new
        fence and applies each job's misfire policy to the fires it missed. ``graceful``:
        the node stopped as on SIGTERM (claimed, undispatched fires are given back, so their
        misfire policy decides); otherwise as on SIGKILL (they are adopted and run late).
        """
        await self._settle()
        if self.node is not None:
            await self.node.stop(graceful=graceful)
            self.node = None
        delta = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        await self._run_until(self.clock.now_ms() + _ms(delta))
        self.node = await self._new_node()
        await self._settle()

    async def _run_until(
        self, target_ms: int, stop: Callable[[], Awaitable[bool]] | None = None
    ) -> None:
        """Visits every instant up to ``target_ms`` at which something is due, in order."""
        while True:
            await self._settle()
            if stop is not None and await stop():
                return
            nxt = await self._next_event_ms()
            now = self.clock.now_ms()
            if nxt is None or nxt > target_ms:
                break
            self.clock.set_ms(max(nxt, now + 1))
        if target_ms > self.clock.now_ms():
            self.clock.set_ms(target_ms)
            await self._settle()

    async def _settle(self) -> None:
        """Runs what is due at this instant until nothing moves."""
        for _ in range(_MAX_PASSES):
            moved = self.workers.wake()
            await self.workers.quiesce()
            if self.node is not None:
                moved |= await self.node.step()
            if not moved:
                return
        raise RuntimeError(f"nothing settles at {self.now.isoformat()}: a livelock?")

    async def _next_event_ms(self) -> int | None:
        times = [self.workers.next_event_ms()]
        if self.node is not None:
            times.append(await self.node.next_event_ms())
        return min((t for t in times if t is not None), default=None)

    async def _idle(self) -> bool:
        """No handler runs, no execution is live, and no one-shot job (``@at``, ``@after``)
        is still to fire: only recurring schedules have fires to come."""
        if self.workers.running or self.workers.has_reports():
            return False
        start = self.keys.runs_all_prefix()
        if await self.kv.count(start, prefix_end(start)):
            return False
        for p in range(self.config.partitions):
            prefix = self.keys.due_prefix(p)
            found, _ = await self.kv.range_all(prefix, prefix_end(prefix))
            for kv in found:  # FIRE keys: a live run's RUN key means a run key exists too
                job = await self.jobs.get_job(self.keys.parse_due_key(kv.key)[2])
                expr = job.schedule
                sched = parse_schedule(expr.expr, expr.timezone, anchor_ms=job.created_ms)
                if sched.kind in (ScheduleKind.AT, ScheduleKind.AFTER):
                    return False
        return True

    # -- what happened ---------------------------------------------------------------------------

    def runs(self, job: JobRef | None = None, *, state: str | None = None) -> list[Run]:
        """Ended executions (of one job, or all; of one ``state``), by fire time: SUCCEEDED,
        DEAD, MISSED, SKIPPED, CANCELLED. Live ones: :meth:`live_runs`."""
        job_id = _job_id(job) if job is not None else None
        out = [
            r
            for r in self.log.runs.values()
            if (job_id is None or r.job_id == job_id) and (state is None or r.state == state)
        ]
        return sorted(out, key=lambda r: (r.scheduled_ms, r.job_id))

    async def live_runs(self, job: JobRef | None = None) -> list[Run]:
        """Executions not ended yet (PENDING, DISPATCHED, RUNNING, RETRY_WAIT), by fire
        time, as the store holds them."""
        rows = await self.jobs.list_live(_job_id(job) if job is not None else "")
        return sorted((Run.of(ex) for ex in rows), key=lambda r: (r.scheduled_ms, r.job_id))

    def attempts(self, job: JobRef | None = None) -> list[Attempt]:
        """Every attempt the workers ran (of one job, or all), in the order they ended."""
        if job is None:
            return list(self.workers.attempts)
        job_id = _job_id(job)
        return [a for a in self.workers.attempts if a.job_id == job_id]


def _ms(delta: timedelta) -> int:
    if delta < timedelta(0):
        raise ValueError("time never goes back")
    return round(delta.total_seconds() * 1000)
