"""Validation and normalisation of a job's spec: defaults filled in, every rule checked.

Every check raises :class:`~schedd.InvalidArgument` naming the field as a dotted path under
``job`` (``"job.schedule.expr"``, ``"job.handler.name"``, ``"job.retry.max_attempts"``), so a
client can point at exactly what to fix. Nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from schedd._errors import InvalidArgument
from schedd.model._fields import (
    MAX_ATTEMPTS,
    check_labels,
    check_non_negative,
    check_payload,
    check_text,
)
from schedd.model._ids import DEFAULT_TENANT, check_tenant, scoped_job_id
from schedd.v1 import job_pb2

if TYPE_CHECKING:
    from schedd.schedule import Schedule

DEFAULT_QUEUE = "default"
DEFAULT_TIMEZONE = "UTC"
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_INITIAL_BACKOFF_MS = 1_000
DEFAULT_MAX_BACKOFF_MS = 5 * 60_000
DEFAULT_MULTIPLIER = 2.0
DEFAULT_CATCH_UP_LIMIT = 10
DEFAULT_TIMEOUT_MS = 5 * 60_000
MAX_CATCH_UP_LIMIT = 10_000

#: Fields the server sets; a client's values for them are ignored.
OUTPUT_FIELDS = (
    "created_ms",
    "updated_ms",
    "next_fire_ms",
    "last_fire_ms",
    "version",
    "partition",
    "children",
)
#: The most parents a job may name (``after``).
MAX_PARENTS = 32

_URL = re.compile(r"^https?://[^/\s?#]+(?:[/?#]\S*)?$", re.IGNORECASE)
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def validate_new_job(
    job: job_pb2.Job, *, now_ms: int, id_factory: Callable[[], str]
) -> job_pb2.Job:
    """Validate a job for CreateJob and return its normalised copy.

    :func:`validate_new_job_parsed` does the same and also returns the parsed schedule.

    The copy has tenant, queue and time zone defaulted (``"default"``, ``"default"``, the
    canonical zone name, ``"UTC"`` when empty), an id from ``id_factory`` when none was given,
    output-only fields cleared and ``created_ms = updated_ms = now_ms``, and every policy
    default filled in (see :func:`normalise_spec`). ``job`` itself is not changed.

    Args:
        job: The job as the client sent it.
        now_ms: The current time; also the anchor of ``@every`` and ``@after`` schedules.
        id_factory: Makes a fresh job id (``"j-" + 20 lowercase characters``).

    Raises:
        InvalidArgument: The first rule the job breaks, with its dotted field path.
    """
    return validate_new_job_parsed(job, now_ms=now_ms, id_factory=id_factory)[0]


def validate_new_job_parsed(
    job: job_pb2.Job, *, now_ms: int, id_factory: Callable[[], str]
) -> tuple[job_pb2.Job, Schedule | None]:
    """:func:`validate_new_job`, with the schedule it parsed (a create parses it once)."""
    out = job_pb2.Job()
    out.CopyFrom(job)
    for name in OUTPUT_FIELDS:
        out.ClearField(name)  # type: ignore[arg-type]
    out.tenant = check_tenant("job.tenant", out.tenant) or DEFAULT_TENANT
    chosen = check_text("job.id", out.id)
    out.id = scoped_job_id(out.tenant, chosen) if chosen else id_factory()
    out.idempotency_key = check_text("job.idempotency_key", out.idempotency_key)
    schedule = normalise_spec(out, anchor_ms=now_ms)
    out.created_ms = now_ms
    out.updated_ms = now_ms
    return out, schedule


def normalise_spec(job: job_pb2.Job, *, anchor_ms: int) -> Schedule | None:
    """Check and default the mutable part of ``job`` in place; returns the parsed schedule
    (None for a job with parents, which has none).

    Defaults: retry (3 attempts, 1 s initial, 5 min max backoff, multiplier 2), misfire ONCE
    with a catch-up limit of 10, overlap ALLOW, a 5 min timeout, queue ``"default"``, HTTP
    method POST.

    Raises:
        InvalidArgument: The first rule broken, with its dotted field path.
    """
    job.name = check_text("job.name", job.name, required=True)
    schedule = _check_schedule(job.schedule, anchor_ms) if not _check_after(job) else None
    _check_target(job)
    check_payload("job.payload", job.payload)
    _check_retry(job.retry)
    _check_misfire(job.misfire)
    _check_overlap(job)
    job.timeout_ms = check_non_negative("job.timeout_ms", job.timeout_ms) or DEFAULT_TIMEOUT_MS
    check_non_negative("job.jitter_ms", job.jitter_ms)
    labels = check_labels("job.labels", dict(job.labels))
    job.labels.clear()
    job.labels.update(labels)
    return schedule


def _check_after(job: job_pb2.Job) -> bool:
    """Checks ``job.after`` (parents given by id or name; the API resolves them); returns
    whether the job has parents. A job with parents has no schedule, so its misfire policy
    and jitter do not apply either."""
    if not job.after:
        return False
    if len(job.after) > MAX_PARENTS:
        raise InvalidArgument("job.after", f"at most {MAX_PARENTS} parents")
    seen: set[str] = set()
    for n, parent in enumerate(job.after):
        ref = check_text(f"job.after[{n}]", parent, required=True)
        if ref in seen:
            raise InvalidArgument(f"job.after[{n}]", f"{ref!r} is named twice")
        seen.add(ref)
        job.after[n] = ref
    if job.schedule.expr.strip():
        raise InvalidArgument(
            "job.schedule.expr", "a job with parents (after) runs when they succeed: no schedule"
        )
    job.schedule.Clear()
    return True


def _check_schedule(schedule: job_pb2.Schedule, anchor_ms: int) -> Schedule:
    from schedd.schedule import parse_schedule, validate_timezone

    expr = schedule.expr.strip()
    if not expr:
        raise InvalidArgument("job.schedule.expr", "must not be empty")
    try:
        tz = validate_timezone(schedule.timezone or DEFAULT_TIMEZONE)
        parsed = parse_schedule(expr, tz, anchor_ms=anchor_ms)
    except InvalidArgument as exc:
        field = exc.field if exc.field.startswith("job.") else f"job.{exc.field or 'schedule'}"
        raise InvalidArgument(field, exc.reason) from exc
    schedule.expr = expr
    schedule.timezone = tz
    return parsed


def _check_target(job: job_pb2.Job) -> None:
    kind = job.WhichOneof("target")
    if kind is None:
        raise InvalidArgument("job.target", "one of handler, http or shell is required")
    if kind == "handler":
        target = job.handler
        target.name = check_text("job.handler.name", target.name, required=True)
        target.queue = check_text("job.handler.queue", target.queue) or DEFAULT_QUEUE
    elif kind == "http":
        _check_http(job.http)
    else:
        _check_shell(job.shell)


def _check_http(http: job_pb2.HttpTarget) -> None:
    url = http.url.strip()
    if not _URL.match(url):
        raise InvalidArgument("job.http.url", "must be an http:// or https:// URL with a host")
    http.url = url
    method = (http.method or "POST").strip().upper()
    if method not in _METHODS:
        raise InvalidArgument("job.http.method", f"unsupported method {http.method!r}")
    http.method = method
    for name, value in http.headers.items():
        if not _HEADER_NAME.match(name):
            raise InvalidArgument("job.http.headers", f"invalid header name {name!r}")
        if any(ch in value for ch in "\r\n\0"):
            raise InvalidArgument(f"job.http.headers[{name}]", "must not contain CR, LF or NUL")
    for code in http.success_codes:
        if not 100 <= code <= 599:
            raise InvalidArgument("job.http.success_codes", f"{code} is not an HTTP status")


def _check_shell(shell: job_pb2.ShellTarget) -> None:
    if not shell.argv or not shell.argv[0]:
        raise InvalidArgument("job.shell.argv", "must name a command")
    for arg in shell.argv:
        if "\0" in arg:
            raise InvalidArgument("job.shell.argv", "must not contain NUL")
    for key, value in shell.env.items():
        if not key or "=" in key or "\0" in key:
            raise InvalidArgument("job.shell.env", f"invalid variable name {key!r}")
        if "\0" in value:  # no process could get it; and a NUL opens an encrypted value
            raise InvalidArgument(f"job.shell.env[{key}]", "must not contain NUL")


def _check_retry(retry: job_pb2.RetryPolicy) -> None:
    if retry.max_attempts == 0:
        retry.max_attempts = DEFAULT_MAX_ATTEMPTS
    if not 1 <= retry.max_attempts <= MAX_ATTEMPTS:
        raise InvalidArgument(
            "job.retry.max_attempts", f"must be between 1 and {MAX_ATTEMPTS} (0 for the default)"
        )
    initial = check_non_negative("job.retry.initial_backoff_ms", retry.initial_backoff_ms)
    retry.initial_backoff_ms = initial or DEFAULT_INITIAL_BACKOFF_MS
    maximum = check_non_negative("job.retry.max_backoff_ms", retry.max_backoff_ms)
    retry.max_backoff_ms = maximum or max(DEFAULT_MAX_BACKOFF_MS, retry.initial_backoff_ms)
    if retry.max_backoff_ms < retry.initial_backoff_ms:
        raise InvalidArgument(
            "job.retry.max_backoff_ms", "must not be below retry.initial_backoff_ms"
        )
    if retry.multiplier == 0:
        retry.multiplier = DEFAULT_MULTIPLIER
    if not 1.0 <= retry.multiplier <= 100.0:
        raise InvalidArgument("job.retry.multiplier", "must be between 1 and 100 (0 for 2)")


#: The enums' known values (``EnumTypeWrapper.values()`` builds a list on every call).
_MISFIRE_MODES = frozenset(job_pb2.MisfireMode.values())
_OVERLAP_POLICIES = frozenset(job_pb2.OverlapPolicy.values())


def _check_misfire(misfire: job_pb2.MisfirePolicy) -> None:
    if misfire.mode == job_pb2.MISFIRE_MODE_UNSPECIFIED:
        misfire.mode = job_pb2.MISFIRE_ONCE
    if misfire.mode not in _MISFIRE_MODES:
        raise InvalidArgument("job.misfire.mode", f"unknown misfire mode {misfire.mode}")
    limit = check_non_negative("job.misfire.catch_up_limit", misfire.catch_up_limit)
    if limit > MAX_CATCH_UP_LIMIT:
        raise InvalidArgument("job.misfire.catch_up_limit", f"must be at most {MAX_CATCH_UP_LIMIT}")
    misfire.catch_up_limit = limit or DEFAULT_CATCH_UP_LIMIT
    check_non_negative("job.misfire.starting_deadline_ms", misfire.starting_deadline_ms)


def _check_overlap(job: job_pb2.Job) -> None:
    if job.overlap == job_pb2.OVERLAP_POLICY_UNSPECIFIED:
        job.overlap = job_pb2.OVERLAP_ALLOW
    if job.overlap not in _OVERLAP_POLICIES:
        raise InvalidArgument("job.overlap", f"unknown overlap policy {job.overlap}")


def same_spec(a: job_pb2.Job, b: job_pb2.Job) -> bool:
    """Whether two jobs ask for the same thing: equal ignoring id, paused and output fields.

    Used for idempotent create: compare the normalised new job with the stored one.
    """
    return _spec_only(a) == _spec_only(b)


def _spec_only(job: job_pb2.Job) -> job_pb2.Job:
    out = job_pb2.Job()
    out.CopyFrom(job)
    for name in ("id", "paused", *OUTPUT_FIELDS):
        out.ClearField(name)  # type: ignore[arg-type]
    return out
