"""Sending one outbox row to schedd, so that sending it again changes nothing.

Every row carries its key as an idempotency key. A **create** sends it as the job's (unless
the job has one of its own): schedd answers a repeated create with the job it made the first
time. A **trigger** sends it as ``TriggerJobRequest.idempotency_key``: schedd answers a
repeated trigger with the execution the first one made (for 24 h, far longer than a row is
retried) and runs nothing more. So a row whose earlier send may have landed (the relay died
between the send and the mark, an answer was lost, a paused relay's rows were taken over) is
simply sent again.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError

from schedd._errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SchedError,
)
from schedd.client import AsyncClient
from schedd.outbox._rows import Row
from schedd.outbox._table import ACTION_CREATE, ACTION_TRIGGER
from schedd.v1 import job_pb2

#: What schedd says when it refuses a row for good: sending it again would be refused again.
#: Not PERMISSION_DENIED nor UNAUTHENTICATED: a relay's token or role is fixed in its
#: configuration, and its rows must wait for that, not fail.
REFUSED_FOR_GOOD: tuple[type[SchedError], ...] = (
    InvalidArgument,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
)


class Refused(Exception):
    """schedd (or the row itself) refused the row for good; ``str()`` says why."""


@dataclass(frozen=True)
class Sent:
    """What a sent row became: a job id or an execution id, and a description for the log."""

    result: str
    what: str = ""


def describe(exc: SchedError) -> str:
    """The error as stored in a failed row: the status code's name and schedd's message."""
    return f"{exc.grpc_code}: {exc}"


async def send_row(client: AsyncClient, row: Row) -> Sent:
    """Sends ``row`` to schedd.

    Raises:
        Refused: The row can never be sent (schedd refused it for good, or it is malformed).
        SchedError: Anything else (schedd unavailable, a deadline): worth sending again.
    """
    try:
        if row.action == ACTION_CREATE:
            return await _create(client, row)
        if row.action == ACTION_TRIGGER:
            return await _trigger(client, row)
    except REFUSED_FOR_GOOD as exc:
        raise Refused(describe(exc)) from exc
    raise Refused(f"unknown action {row.action!r}")


async def _create(client: AsyncClient, row: Row) -> Sent:
    try:
        job = job_pb2.Job.FromString(row.body)
    except DecodeError as exc:
        raise Refused(f"body is not a schedd.v1.Job: {exc}") from exc
    if not job.idempotency_key:
        job.idempotency_key = row.key
    res = await client.create(job)
    return Sent(res.job.id, what=f"job {res.job.name!r} ({res.job.id})")


async def _trigger(client: AsyncClient, row: Row) -> Sent:
    job = await client.find_job(row.job_ref, row.tenant)
    ex = await client.trigger_job(job.id, row.body, idempotency_key=row.key)
    return Sent(ex.id, what=f"run {ex.id}")
