"""Job ids and execution ids."""

from __future__ import annotations

import base64
import os
import re
import secrets

from schedd._errors import InvalidArgument
from schedd.model._fields import check_text, validate_id

#: The default tenant: the tenant of a job created without one, and the only tenant whose
#: chosen job ids are not prefixed (``"nightly"``, not ``"default:nightly"``).
DEFAULT_TENANT = "default"
#: Separates a tenant from the ids its clients chose: ``"acme:nightly"`` (tenant names may
#: not contain it).
TENANT_SEP = ":"
_GENERATED = re.compile(r"^j-[a-z2-7]{20}$")


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


def is_generated_id(job_id: str) -> bool:
    """Whether ``job_id`` has the shape of an id :data:`new_job_id` makes (100 random bits:
    unique in every tenant without a prefix, and not guessable)."""
    return _GENERATED.match(job_id) is not None


def check_tenant(field: str, value: str, *, required: bool = False) -> str:
    """Check a tenant name: :func:`check_text`, and no ``":"`` (it separates a tenant from
    its jobs' chosen ids)."""
    tenant = check_text(field, value, required=required)
    if TENANT_SEP in tenant:
        raise InvalidArgument(field, f"must not contain {TENANT_SEP!r} (it prefixes job ids)")
    return tenant


def id_namespace(job_id: str) -> str | None:
    """The tenant whose namespace ``job_id`` is in: the part before ``":"``; None for an id
    without one (the default tenant's chosen ids, and generated ids, which any tenant has)."""
    tenant, sep, _ = job_id.partition(TENANT_SEP)
    return tenant if sep else None


def scoped_job_id(tenant: str, chosen: str, field: str = "job.id") -> str:
    """The id of a job whose client chose ``chosen`` as its id, in ``tenant``.

    Job ids are scoped by tenant: a tenant's chosen ids are prefixed with its name and
    ``":"`` (``"nightly"`` in tenant ``acme`` is ``"acme:nightly"``, and so is
    ``"acme:nightly"``; ``"bolt:x"`` is ``"acme:bolt:x"``), so two tenants may both choose
    ``"nightly"``, and a create never tells a tenant whether another tenant's id exists.
    The default tenant's chosen ids keep no prefix, and so may not contain ``":"`` nor have
    a generated id's shape: generated ids (``"j-"`` and 20 random characters) are unique in
    every tenant and never prefixed.

    Raises:
        InvalidArgument: the default tenant's id contains ``":"`` (other than its own
            ``"default:"``) or looks generated. The answer depends on the strings only.
    """
    if tenant != DEFAULT_TENANT:
        return chosen if id_namespace(chosen) == tenant else f"{tenant}{TENANT_SEP}{chosen}"
    bare = chosen.removeprefix(DEFAULT_TENANT + TENANT_SEP)
    if TENANT_SEP in bare:
        raise InvalidArgument(
            field,
            f"{chosen!r}: ids with {TENANT_SEP!r} are other tenants' ({id_namespace(bare)!r});"
            " the default tenant's ids have none",
        )
    if is_generated_id(bare):
        raise InvalidArgument(field, f"{chosen!r}: ids of this shape are generated ones")
    return bare


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
