"""Planning claims: what one due entry becomes in its fenced claim transaction.

A schedule fire (kind FIRE) on time becomes one PENDING execution and the job's next due key;
one later than the grace goes through the job's misfire policy (run all, bounded; coalesce;
skip), and dropped fires are recorded MISSED. A RUN entry (retry, trigger, backfill,
redrive) re-tokens the execution it points at. Pure planning: :class:`ClaimPlanner` builds
:class:`Claim` items with the partition store's builders and sends nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from schedd.model import execution_from, execution_template, new_execution
from schedd.schedule import Schedule, jitter_offset_ms, parse_schedule, plan_misfires
from schedd.store import (
    FIRE,
    DueEntry,
    Item,
    JobState,
    PartitionStore,
    StoredJob,
)
from schedd.store.abc import Op
from schedd.v1 import execution_pb2, job_pb2

log = logging.getLogger(__name__)

_MISFIRE_MODES = {
    job_pb2.MISFIRE_CATCH_UP: "catch_up",
    job_pb2.MISFIRE_ONCE: "once",
    job_pb2.MISFIRE_SKIP: "skip",
}


@dataclass(slots=True)
class _Compiled:
    """What the claim path derives from one version of a job's spec, kept while it lasts."""

    spec_revision: int
    schedule: Schedule
    #: The fields every first attempt shares; executions are copies of it.
    template: execution_pb2.Execution


@dataclass(slots=True)
class Claim:
    """A planned claim: the due entry, what the item writes, and what to do once it holds.

    Attributes:
        entry: the due entry claimed.
        item: the nested transaction (compares and writes) for the partition store.
        executions: the executions it creates or re-tokens; their token is the txn's revision.
        next_state: the job's new cursor (schedule fires only).
        missed: fires the misfire policy dropped, recorded MISSED once the claim holds.
    """

    entry: DueEntry
    item: Item
    executions: list[execution_pb2.Execution]
    next_state: JobState | None = None
    missed: list[execution_pb2.Execution] | None = None


class ClaimPlanner:
    """Plans the claims of one partition; caches each job's parsed schedule per spec revision."""

    def __init__(
        self,
        store: PartitionStore,
        grace_ms: int,
        *,
        tell: Callable[[execution_pb2.Execution], list[Op]] = lambda ex: [],
    ) -> None:
        self.store = store
        self.partition = store.partition
        self.grace_ms = grace_ms
        # The arrivals a missed fire leaves at its job's children (written with the claim).
        self._tell = tell
        self._compiled: dict[str, _Compiled] = {}  # job id -> its current spec, compiled

    def forget(self, job_id: str) -> None:
        """The job is gone: drop what was compiled for it."""
        self._compiled.pop(job_id, None)

    def plan(
        self,
        entry: DueEntry,
        cached: StoredJob | None,
        run: execution_pb2.Execution | None,
        now: int,
    ) -> Claim:
        """The claim of one due entry; ``run`` is the execution a RUN entry points at, or for
        a FIRE entry the run of that fire if it exists already (then the fire is claimed:
        the cursor moves past it and no second run is created; without this its claim would
        fail its create compare for as long as the run lives, then create it again)."""
        if cached is None:  # the job is gone: only its due key goes
            return Claim(entry, self.store.drop_due(entry), [])
        if entry.kind == FIRE:
            return self._plan_fire(entry, cached, now, exists=run is not None)
        return self._plan_run(entry, run)

    def _compile(self, cached: StoredJob) -> _Compiled:
        """The job's schedule and execution template, parsed once per spec revision."""
        job_id = cached.job.id
        comp = self._compiled.get(job_id)
        if comp is None or comp.spec_revision != cached.spec_revision:
            job = cached.job
            sched = parse_schedule(
                job.schedule.expr, job.schedule.timezone, anchor_ms=job.created_ms
            )
            comp = _Compiled(cached.spec_revision, sched, execution_template(job, self.partition))
            self._compiled[job_id] = comp
        return comp

    def _plan_fire(self, entry: DueEntry, cached: StoredJob, now: int, exists: bool) -> Claim:
        job, comp = cached.job, self._compile(cached)
        sched = comp.schedule
        missed: list[execution_pb2.Execution] = []
        if now - entry.due_ms <= self.grace_ms:  # on time: the common case
            f = entry.scheduled_ms
            executions = [self._new_run(comp, job, f, now)]
            last = f
            nxt = sched.next_fire(f)
        else:
            plan = plan_misfires(
                sched,
                cursor_ms=entry.scheduled_ms - 1,
                now_ms=now,
                mode=_MISFIRE_MODES.get(job.misfire.mode, "once"),
                catch_up_limit=job.misfire.catch_up_limit or 10,
                starting_deadline_ms=job.misfire.starting_deadline_ms,
                grace_ms=self.grace_ms,
            )
            fires, nxt = plan.run, plan.next_fire_ms
            missed = [self._missed(job, f, reason, now) for f, reason in plan.missed]
            if plan.missed_not_listed:
                log.warning(
                    "job %s: %d more missed fires not recorded", job.id, plan.missed_not_listed
                )
            executions = [self._new_run(comp, job, f, now) for f in fires]
            last = max([entry.scheduled_ms, *fires])
        if exists:
            executions = [ex for ex in executions if ex.scheduled_ms != entry.scheduled_ms]
        if nxt is not None:
            due_next = nxt + jitter_offset_ms(job.id, nxt, job.jitter_ms)
            state = JobState(due_next if due_next != entry.due_ms else due_next + 1, nxt, last)
        else:
            state = JobState(0, 0, last)
        then = [op for ex in missed for op in self._tell(ex)]
        item = self.store.claim_fire(cached, entry, executions, state, then)
        return Claim(entry, item, executions, state, missed)

    def _new_run(
        self, comp: _Compiled, job: job_pb2.Job, fire_ms: int, now: int
    ) -> execution_pb2.Execution:
        """The first attempt for one fire: at its jittered time, or now (catch-up) when late."""
        if now - fire_ms > self.grace_ms:
            return execution_from(comp.template, fire_ms, now, execution_pb2.TRIGGER_CATCH_UP)
        due = fire_ms + jitter_offset_ms(job.id, fire_ms, job.jitter_ms)
        return execution_from(comp.template, fire_ms, due, execution_pb2.TRIGGER_SCHEDULE)

    def _missed(
        self, job: job_pb2.Job, fire_ms: int, reason: str, now: int
    ) -> execution_pb2.Execution:
        ex = new_execution(job, self.partition, fire_ms, fire_ms, execution_pb2.TRIGGER_SCHEDULE)
        ex.state = execution_pb2.EXECUTION_MISSED
        ex.reason = reason
        ex.finished_ms = now
        return ex

    def _plan_run(self, entry: DueEntry, ex: execution_pb2.Execution | None) -> Claim:
        if ex is None or ex.state == execution_pb2.EXECUTION_CANCELLED:  # ended by its owner
            return Claim(entry, self.store.drop_due(entry), [])
        ex.state = execution_pb2.EXECUTION_PENDING
        ex.due_ms = entry.due_ms
        return Claim(entry, self.store.rewrite_run(ex, consume=entry), [ex])
