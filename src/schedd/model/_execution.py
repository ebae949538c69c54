"""The executions a job's fires become: the first attempt of one fire, built from the job.

An execution's id is ``{job_id}@{scheduled_ms}`` (:func:`~schedd.model._ids.execution_id`):
one per (job, scheduled time), whoever claims it.
"""

from __future__ import annotations

from schedd.model._ids import execution_id as make_execution_id
from schedd.model._job import DEFAULT_QUEUE
from schedd.v1 import execution_pb2, job_pb2


def execution_template(job: job_pb2.Job, partition: int) -> execution_pb2.Execution:
    """What every first attempt of ``job`` has in common (see :func:`execution_from`)."""
    template = new_execution(job, partition, 0, 0, execution_pb2.TRIGGER_UNSPECIFIED)
    template.ClearField("id")
    return template


def execution_from(
    template: execution_pb2.Execution, scheduled_ms: int, due_ms: int, trigger: int
) -> execution_pb2.Execution:
    """:func:`new_execution` from the job's template: a copy and four fields (~3x cheaper)."""
    ex = execution_pb2.Execution()
    ex.CopyFrom(template)
    ex.id = make_execution_id(template.job_id, scheduled_ms)
    ex.scheduled_ms = scheduled_ms
    ex.due_ms = due_ms
    ex.trigger = trigger  # type: ignore[assignment]
    return ex


def new_execution(
    job: job_pb2.Job,
    partition: int,
    scheduled_ms: int,
    due_ms: int,
    trigger: int,
) -> execution_pb2.Execution:
    """A PENDING first attempt of ``job`` for the fire at ``scheduled_ms``."""
    target = job.WhichOneof("target")
    return execution_pb2.Execution(
        id=make_execution_id(job.id, scheduled_ms),
        job_id=job.id,
        tenant=job.tenant,
        scheduled_ms=scheduled_ms,
        due_ms=due_ms,
        state=execution_pb2.EXECUTION_PENDING,
        attempt=1,
        trigger=trigger,  # type: ignore[arg-type]
        partition=partition,
        queue=dispatch_queue(job),
        handler=job.handler.name if target == "handler" else "",
        max_attempts=job.retry.max_attempts or 3,
    )


def dispatch_queue(job: job_pb2.Job) -> str:
    """The queue every execution of ``job`` goes out on: its handler's queue, and the default
    queue for http and shell jobs."""
    return job.handler.queue if job.WhichOneof("target") == "handler" else DEFAULT_QUEUE
