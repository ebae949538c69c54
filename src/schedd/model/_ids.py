"""Job ids and execution ids."""

from __future__ import annotations

import base64
import secrets

from schedd._errors import InvalidArgument
from schedd.model._fields import validate_id


def new_job_id() -> str:
    """A fresh random job id: ``"j-"`` and 20 lowercase base32 characters (100 bits)."""
    return "j-" + base64.b32encode(secrets.token_bytes(15)).decode().lower()[:20]


def validate_execution_id(field: str, value: str) -> str:
    """Check an execution id (``"{job_id}@{scheduled_ms}"``).

    Raises:
        InvalidArgument: Empty, breaking the text limits, or not ``JOB@MILLIS``.
    """
    text = validate_id(field, value)
    job_id, sep, ms = text.rpartition("@")
    if not sep or not job_id or not ms.isdigit():
        raise InvalidArgument(field, f"{value!r} is not an execution id (JOB@MILLIS)")
    return text
