"""Writing decisions into the outbox, inside the caller's transaction.

Nothing here talks to schedd: a row is one INSERT on the caller's connection (and, on
PostgreSQL, a ``pg_notify`` that is delivered when that transaction commits, so a relay wakes
at once). When the transaction rolls back, the row and the notification go with it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from sqlalchemy import Connection, Table, text

from schedd._errors import InvalidArgument
from schedd.client import build_job, encode_payload
from schedd.outbox._table import ACTION_CREATE, ACTION_TRIGGER, outbox_table
from schedd.v1 import job_pb2

_ACTIONS = (ACTION_CREATE, ACTION_TRIGGER)


def enqueue(
    conn: Connection,
    action: str,
    *,
    job: job_pb2.Job | None = None,
    job_ref: str = "",
    payload: Any = None,
    tenant: str = "",
    table: Table | None = None,
) -> int:
    """Adds one row to the outbox on ``conn``, in the transaction ``conn`` is in (begin it
    with ``engine.begin()`` or use a Session's ``connection()``); returns the row's id.

    Args:
        action: ``"create"`` (give ``job``) or ``"trigger"`` (give ``job_ref``, and
            ``payload`` to override the job's for that run).
        job: The Job to create, as :func:`schedd.client.build_job` makes it. Without an
            ``idempotency_key`` of its own it gets the row's key.
        job_ref: The id or the name (in ``tenant``) of the job to run once.
        payload: The run's payload (JSON-encoded unless bytes); None: the job's own.
        tenant: The tenant of a trigger's ``job_ref`` when it is a name.
        table: The outbox table (:func:`outbox_table`); default ``schedd_outbox``.

    Raises:
        InvalidArgument: An unknown ``action``, or a field the action needs missing, named.
    """
    if action not in _ACTIONS:
        raise InvalidArgument("action", f"must be one of {', '.join(_ACTIONS)}, not {action!r}")
    if action == ACTION_CREATE:
        if not isinstance(job, job_pb2.Job):
            raise InvalidArgument("job", "a create needs the Job (schedd.client.build_job)")
        body = job.SerializeToString()
        tenant = job.tenant
    else:
        if job is not None:
            raise InvalidArgument("job", "a trigger names its job with job_ref")
        if not job_ref.strip():
            raise InvalidArgument("job_ref", "a trigger needs the job's id or name")
        body = encode_payload(payload)
    table = table if table is not None else outbox_table()
    key = f"outbox-{uuid.uuid4()}"
    row = {
        "key": key,
        "action": action,
        "tenant": tenant,
        "job_ref": job_ref,
        "body": body,
        "created_ms": int(time.time() * 1000),
    }
    result = conn.execute(table.insert().values(**row))
    row_id = result.inserted_primary_key
    if conn.dialect.name == "postgresql":
        # Delivered when (and only if) the caller's transaction commits.
        conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": table.name})
    assert row_id is not None
    return int(row_id[0])


def create_job(
    conn: Connection,
    job: job_pb2.Job | None = None,
    *,
    table: Table | None = None,
    **spec: Any,
) -> int:
    """Adds a row that creates a job: ``job`` as built, or the keyword arguments of
    :func:`schedd.client.build_job` (``name``, ``schedule`` such as ``"@after 3d"`` or a cron,
    ``handler``, ``payload``, ...). Returns the row's id.

    The schedule is checked by schedd when the row is sent: a row it refuses is marked
    ``failed`` with the reason, and the rows after it go on.

    Raises:
        InvalidArgument: Both ``job`` and keyword arguments, or a value ``build_job`` refuses.
    """
    if job is not None and spec:
        raise InvalidArgument("job", "give the Job or build_job's arguments, not both")
    if job is None:
        if "name" not in spec or "schedule" not in spec:
            raise InvalidArgument("schedule" if "name" in spec else "name", "is required")
        job = build_job(**spec)
    return enqueue(conn, ACTION_CREATE, job=job, table=table)


def trigger_job(
    conn: Connection,
    job: str,
    *,
    payload: Any = None,
    tenant: str = "",
    table: Table | None = None,
) -> int:
    """Adds a row that runs the existing job ``job`` (its id, or its name in ``tenant``) once,
    with ``payload`` overriding the job's when given. Returns the row's id."""
    return enqueue(conn, ACTION_TRIGGER, job_ref=job, payload=payload, tenant=tenant, table=table)
