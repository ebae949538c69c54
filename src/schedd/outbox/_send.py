"""Sending one outbox row to schedd, so that sending it again changes nothing.

A **create** carries the row's key as its idempotency key (unless the job has one of its own):
schedd answers a repeated create with the job it made the first time.

A **trigger** has no idempotency key in the API (``TriggerJobRequest`` has the job and a
payload only), so a row that may have been sent before (its earlier claim ended without a
mark: the relay died between the send and the mark, or the answer was lost) is first looked
for: an execution of the job made by TriggerJob, with the row's payload override, scheduled at
or after the row's first attempt (less ``skew_ms`` for the clocks of relay and node), that no
other row of the table accounts for. Found, the row adopts it instead of triggering again. The
limit: a manual trigger of the same job with the same payload by someone else in that window
can be taken for the row's. docs/outbox.md says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from schedd._errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SchedError,
    Unavailable,
)
from schedd.client import AsyncClient
from schedd.outbox._rows import Row
from schedd.outbox._table import ACTION_CREATE, ACTION_TRIGGER
from schedd.v1 import execution_pb2, job_pb2

#: What schedd says when it refuses a row for good: sending it again would be refused again.
#: Not PERMISSION_DENIED nor UNAUTHENTICATED: a relay's token or role is fixed in its
#: configuration, and its rows must wait for that, not fail.
REFUSED_FOR_GOOD: tuple[type[SchedError], ...] = (
    InvalidArgument,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
)

#: How many executions of a job one lookup reads at most, newest first.
_LOOKUP_PAGE = 500


class Refused(Exception):
    """schedd (or the row itself) refused the row for good; ``str()`` says why."""


@dataclass(frozen=True)
class Sent:
    """What a sent row became: a job id or an execution id, and whether an execution an
    earlier attempt made was adopted instead of triggering again."""

    result: str
    adopted: bool = False
    what: str = ""


#: Given execution ids, which other sent rows already account for (``OutboxRows.taken``).
Taken = Callable[[Sequence[str]], Awaitable[set[str]]]


def describe(exc: SchedError) -> str:
    """The error as stored in a failed row: the status code's name and schedd's message."""
    return f"{exc.grpc_code}: {exc}"


async def send_row(client: AsyncClient, row: Row, taken: Taken, skew_ms: int) -> Sent:
    """Sends ``row`` to schedd.

    Raises:
        Refused: The row can never be sent (schedd refused it for good, or it is malformed).
        SchedError: Anything else (schedd unavailable, a deadline): worth sending again.
    """
    try:
        if row.action == ACTION_CREATE:
            return await _create(client, row)
        if row.action == ACTION_TRIGGER:
            return await _trigger(client, row, taken, skew_ms)
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


async def _trigger(client: AsyncClient, row: Row, taken: Taken, skew_ms: int) -> Sent:
    job = await client.find_job(row.job_ref, row.tenant)
    if row.attempts > 1:
        earlier = await _earlier_run(client, job.id, row, taken, skew_ms)
        if earlier:
            return Sent(earlier, adopted=True, what=f"run {earlier} (made by an earlier attempt)")
    ex = await client.trigger_job(job.id, row.body)
    return Sent(ex.id, what=f"run {ex.id}")


async def _earlier_run(
    client: AsyncClient, job_id: str, row: Row, taken: Taken, skew_ms: int
) -> str | None:
    """The oldest execution an earlier attempt of ``row`` may have made, not accounted for by
    another row; None when there is none."""
    since = row.first_attempt_ms - skew_ms
    found: list[str] = []
    page = ""
    while True:
        resp = await client.list_executions_page(job_id, (), "", _LOOKUP_PAGE, page)
        if resp.missing_nodes:
            names = ", ".join(m.node_id for m in resp.missing_nodes)
            raise Unavailable(f"cannot tell whether row {row.id} ran: no answer from {names}")
        older = False
        for ex in resp.executions:
            if ex.scheduled_ms < since:
                older = True
                break
            if _made_by(ex, row):
                found.append(ex.id)
        page = resp.next_page_token
        if older or not page:
            break
    others = await taken(found)
    free = [eid for eid in found if eid not in others]
    return free[-1] if free else None  # newest first: the last is the oldest


def _made_by(ex: execution_pb2.Execution, row: Row) -> bool:
    if ex.trigger != execution_pb2.TRIGGER_MANUAL:
        return False
    if row.body:
        return ex.has_payload_override and ex.payload_override == row.body
    return not ex.has_payload_override
