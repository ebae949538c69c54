"""Job ids and execution ids."""

from __future__ import annotations

import base64
import os
import secrets

from schedd._errors import InvalidArgument
from schedd.model._fields import validate_id


class _JobIds:
    """Fresh random job ids, encoded a block at a time: 15 random bytes are exactly 24 base32
    characters, so one ``b32encode`` of many blocks gives each id's characters (base64's
    base32 is pure Python: per id it cost more than the rest of a create's validation)."""

    BLOCK = 256

    def __init__(self) -> None:
        self._ready: list[str] = []
        # A forked child must not hand out the ids its parent holds ready.
        os.register_at_fork(after_in_child=self._ready.clear)

    def __call__(self) -> str:
        if not self._ready:
            text = base64.b32encode(secrets.token_bytes(15 * self.BLOCK)).decode().lower()
            self._ready = ["j-" + text[i : i + 20] for i in range(0, len(text), 24)]
        return self._ready.pop()


#: A fresh random job id: ``"j-"`` and 20 lowercase base32 characters (100 bits).
new_job_id = _JobIds()


def execution_id(job_id: str, scheduled_ms: int) -> str:
    """The id of the execution of ``job_id`` for the fire at ``scheduled_ms``: one per
    (job, scheduled time), whoever claims it, so it is also the execution's idempotency key."""
    return f"{job_id}@{scheduled_ms}"


def parse_execution_id(value: str) -> tuple[str, int]:
    """Inverse of :func:`execution_id`; ValueError when malformed."""
    job_id, sep, ms = value.rpartition("@")
    if not sep or not job_id or not ms.isdigit():
        raise ValueError(f"{value!r} is not an execution id (JOB@MILLIS)")
    return job_id, int(ms)


def validate_execution_id(field: str, value: str) -> str:
    """Check an execution id (``"{job_id}@{scheduled_ms}"``).

    Raises:
        InvalidArgument: Empty, breaking the text limits, or not ``JOB@MILLIS``.
    """
    text = validate_id(field, value)
    try:
        parse_execution_id(text)
    except ValueError as exc:
        raise InvalidArgument(field, f"{value!r} is not an execution id (JOB@MILLIS)") from exc
    return text
